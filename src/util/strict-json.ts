/**
 * JSON parsed strictly: `JSON.parse` for the value (RFC 8259 text only), and an object that names
 * a key twice, at any depth, is refused. `JSON.parse` keeps the last of two equal keys, so a
 * reader that checks the parsed value and a receiver that reads the first key (or the raw bytes,
 * or a person reading the file) would disagree about the same text.
 *
 * One reader for the manifests a person writes (every repeated key named with its lines) and the
 * gateway's request bodies (docs/gateway.md, "Allow list"), up to 16 MiB each, parsed while other
 * attempts' replies stream through the same event loop. So the duplicate check is a scan of the
 * already valid text rather than a parser library: the strict parsers measured on a 1.1 MB request
 * body (momoa 3.3.13's AST, jsonc-parser 3.3.1's visitor) took 80–630 ms against 1.4 ms for
 * JSON.parse, which on a 16 MiB body would hold the event loop for seconds. The scan jumps from
 * quote to quote with indexOf and decodes a key only when it holds an escape (`"\u0061"` equals
 * `"a"`); lines are counted only for a key that repeats.
 */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

export class StrictJsonError extends Error {}

/** The path of a member or element, as `a.b[2].c`. */
export function jsonPath(parent: string, key: string | number): string {
  if (typeof key === "number") return `${parent}[${key}]`;
  if (/^[A-Za-z_$][\w$]*$/.test(key)) return parent === "" ? key : `${parent}.${key}`;
  return `${parent}[${JSON.stringify(key.slice(0, 100))}]`;
}

/** A key that appears twice in one JSON object: where, and under which path. */
export interface DuplicateKey {
  key: string;
  /** Path of the object holding it, e.g. `answerKeys` or `tasks[2]`; "" for the top level. */
  at: string;
  /** 1-based lines of its first and its repeated occurrence. */
  firstLine: number;
  line: number;
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

/** The 1-based line of each offset (offsets ascending or not). */
function linesOf(text: string, offsets: number[]): number[] {
  return offsets.map((offset) => {
    let line = 1;
    for (let i = text.indexOf("\n"); i >= 0 && i < offset; i = text.indexOf("\n", i + 1)) line++;
    return line;
  });
}

/** Every key of `text` (valid JSON) that repeats inside one object, at any depth, in text order. */
export function duplicateKeys(text: string): DuplicateKey[] {
  // One frame per open container: an object's keys with the offset of each, or an array's next index.
  const stack: Array<{ keys: Map<string, number> | null; path: string; index: number; key: string | null }> = [];
  const found: Array<{ key: string; at: string; first: number; offset: number }> = [];
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
        const first = top.keys.get(key);
        if (first === undefined) top.keys.set(key, i);
        else found.push({ key, at: top.path, first, offset: i });
        top.key = key;
      }
      i = end;
    } else if (c === 0x7b /* { */) {
      const path = pathOfTop();
      stack.push({ keys: new Map(), path, index: 0, key: null });
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
  return found.map((d) => {
    const [firstLine, line] = linesOf(text, [d.first, d.offset]) as [number, number];
    return { key: d.key, at: d.at, firstLine, line };
  });
}

/** The value of `text`, or a StrictJsonError naming what is wrong (the first repeated key with its object's path). */
export function parseStrictJson(text: string): JsonValue {
  let value: JsonValue;
  try {
    value = JSON.parse(text) as JsonValue;
  } catch (err) {
    throw new StrictJsonError(`not JSON: ${(err as Error).message.slice(0, 200)}`);
  }
  const [first] = duplicateKeys(text);
  if (first) throw new StrictJsonError(`the key ${JSON.stringify(first.key.slice(0, 100))} appears twice in the object at ${first.at || "the top level"}`);
  return value;
}

/**
 * For a file a person wrote: JSON.parse's value, or one problem per repeated key, naming the key,
 * its object and both lines. Syntax errors are JSON.parse's (thrown).
 */
export function parseJsonStrict(text: string): { ok: true; value: unknown } | { ok: false; problems: string[] } {
  const value: unknown = JSON.parse(text);
  const dups = duplicateKeys(text);
  if (dups.length === 0) return { ok: true, value };
  return {
    ok: false,
    problems: dups.map(
      (d) =>
        `the key ${JSON.stringify(d.key)}${d.at ? ` in ${d.at}` : " at the top level"} appears twice (line ${d.firstLine} and line ${d.line}); JSON keeps only the last one silently, so remove or merge the duplicate`,
    ),
  };
}
