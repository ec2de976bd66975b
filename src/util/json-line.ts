/** One line of a JSON-lines stream as an object; undefined when it is not JSON or not an object (a line to pass over). */
export function jsonObjectLine(line: string): Record<string, unknown> | undefined {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return undefined;
  }
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}
