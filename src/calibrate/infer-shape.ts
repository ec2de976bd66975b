/** The body shape of measured requests (contract R140): what the gateway admits, inferred from what the CLI sent. */
import { variantOf, type ShapeNode } from "../gateway/request-shape.ts";
import type { JsonValue } from "../util/strict-json.ts";

/** The shape of `values` (inference for the measurement): `opaque` names members whose content is data, with the reason. */
export function inferShape(values: readonly JsonValue[], opaque: Readonly<Record<string, string>> = {}): ShapeNode {
  const node: ShapeNode = {};
  for (const v of values) addToShape(node, v, opaque);
  return node;
}

/**
 * A measured key may be any string, "__proto__" and "constructor" too: only own members are read,
 * and a new one is defined, never assigned, so no key reaches a prototype (here or the process's).
 */
function define<T>(record: Record<string, T>, key: string, value: T): T {
  Object.defineProperty(record, key, { value, enumerable: true, writable: true, configurable: true });
  return value;
}

/** `record`'s own member `key`, defined as `make()` when it has none. */
function own<T>(record: Record<string, T>, key: string, make: () => T): T {
  return Object.hasOwn(record, key) ? record[key]! : define(record, key, make());
}

function addToShape(node: ShapeNode, v: JsonValue, opaque: Readonly<Record<string, string>>): void {
  if (v === null) node.null = true;
  else if (typeof v === "boolean") node.boolean = true;
  else if (typeof v === "number") node.number = true;
  else if (typeof v === "string") node.string = true;
  else if (Array.isArray(v)) {
    node.array ??= {};
    for (const e of v) addToShape(node.array, e, opaque);
  } else {
    node.object ??= {};
    const variant = variantOf(v);
    const members = own<Record<string, ShapeNode>>(node.object, variant, () => ({}));
    for (const [k, m] of Object.entries(v)) {
      if (k === "type" && variant !== "") continue;
      if (Object.hasOwn(opaque, k)) define(members, k, { any: opaque[k]! });
      else
        addToShape(
          own<ShapeNode>(members, k, () => ({})),
          m,
          opaque,
        );
    }
  }
}
