/**
 * JSON parsed strictly: `JSON.parse` for the value (RFC 8259 text only), and an object that names
 * a key twice, at any depth, is refused. `JSON.parse` keeps the last of two equal keys, so a
 * reader that checks the parsed value and a receiver that reads the first key (or the raw bytes)
 * would disagree about the same body.
 *
 * This is the gateway's parse of request bodies (docs/gateway.md, "Allow list"), up to 16 MiB
 * each, while other attempts' replies stream through the same event loop. The duplicate check is
 * a scan of the already valid text rather than a library: the strict parsers measured on a
 * 1.1 MB request body (momoa 3.3.13's AST, jsonc-parser 3.3.1's visitor) took 80–630 ms against
 * 1.4 ms for JSON.parse, which on a 16 MiB body would hold the event loop for seconds. The scan
 * jumps from quote to quote with indexOf and decodes a key only when it holds an escape
 * (`"\u0061"` equals `"a"`). Manifests (small files a person writes, whose errors want line
 * numbers) have a strict reader of their own.
 */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

export class StrictJsonError extends Error {}

/** The path of a member or element, as `a.b[2].c`. */
export function jsonPath(parent: string, key: string | number): string {
  if (typeof key === "number") return `${parent}[${key}]`;
  if (/^[A-Za-z_$][\w$]*$/.test(key)) return parent === "" ? key : `${parent}.${key}`;
  return `${parent}[${JSON.stringify(key.slice(0, 100))}]`;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** The index of the quote that closes the string whose opening quote is at `open`. */
function stringEnd(text: string, open: number): number {
  let i = open + 1;
  for (;;) {
    const q = text.indexOf('"', i);
    if (q < 0) throw new StrictJsonError("not JSON: an unterminated string");
    let slashes = 0;
    for (let k = q - 1; k > open && text.charCodeAt(k) === BACKSLASH; k--) slashes++;
    if (slashes % 2 === 0) return q;
    i = q + 1;
  }
}

/** Throws naming the object and the key when an object of `text` (valid JSON) has a key twice. */
function assertNoDuplicateKeys(text: string): void {
  // One frame per open container: the keys of an object (with its path), or an array's next index.
  const stack: Array<{ keys: Set<string> | null; path: string; index: number; key: string | null }> = [];
  const pathOfTop = () => {
    const top = stack[stack.length - 1];
    if (!top) return "";
    return top.keys ? jsonPath(top.path, top.key ?? "") : jsonPath(top.path, top.index);
  };
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = stringEnd(text, i);
      const top = stack[stack.length - 1];
      // A string is a key when it follows `{` or `,` inside an object, i.e. a `:` comes next.
      let j = end + 1;
      while (j < text.length && (text[j] === " " || text[j] === "\t" || text[j] === "\n" || text[j] === "\r")) j++;
      if (top?.keys && text[j] === ":") {
        const raw = text.slice(i + 1, end);
        const key = raw.includes("\\") ? (JSON.parse(`"${raw}"`) as string) : raw;
        if (top.keys.has(key)) throw new StrictJsonError(`the key ${JSON.stringify(key.slice(0, 100))} appears twice in the object at ${top.path || "the top level"}`);
        top.keys.add(key);
        top.key = key;
      }
      i = end;
    } else if (c === 0x7b /* { */) {
      const path = pathOfTop();
      stack.push({ keys: new Set(), path, index: 0, key: null });
    } else if (c === 0x5b /* [ */) {
      const path = pathOfTop();
      stack.push({ keys: null, path, index: 0, key: null });
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top && !top.keys) top.index++;
    }
  }
}

/** The value of `text`, or a StrictJsonError naming what is wrong (a duplicate key with its path). */
export function parseStrictJson(text: string): JsonValue {
  let value: JsonValue;
  try {
    value = JSON.parse(text) as JsonValue;
  } catch (err) {
    throw new StrictJsonError(`not JSON: ${(err as Error).message.slice(0, 200)}`);
  }
  assertNoDuplicateKeys(text);
  return value;
}
