/**
 * Records keyed by names that come from outside (a measured request's members, the tools a model or
 * a transcript names): any string is a name there, "__proto__" and "constructor" too. Such a record
 * is read by its own members only, and a member is defined, never assigned, so no name reads or
 * reaches a prototype (the record's, or every object's in the process).
 */

/** `record`'s own member `key`, undefined without one (never an inherited member). */
export function ownValue<T>(record: Readonly<Record<string, T>>, key: string): T | undefined {
  return Object.hasOwn(record, key) ? record[key] : undefined;
}

/** Defines `record`'s own member `key` as `value` (an assignment of "__proto__" would set the prototype instead); returns `value`. */
export function setOwn<T>(record: Record<string, T>, key: string, value: T): T {
  Object.defineProperty(record, key, { value, enumerable: true, writable: true, configurable: true });
  return value;
}
