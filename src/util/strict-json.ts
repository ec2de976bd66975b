import { visit } from "jsonc-parser";

/** A key that appears twice in one JSON object: where, and under which path. */
export interface DuplicateKey {
  key: string;
  /** JSON path of the object holding it, e.g. `answerKeys` or `tasks[2]`; "" for the top level. */
  at: string;
  /** 1-based lines of its first and its repeated occurrence. */
  firstLine: number;
  line: number;
}

const showPath = (path: readonly (string | number)[]) => path.map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? p : `.${p}`)).join("");

/**
 * Every key repeated inside one object, at any depth. JSON.parse keeps the last value silently,
 * so a reader and the runner would see different manifests; jsonc-parser's visitor reports each
 * property with its line and path (property names compared after unescaping, so `"a"` and
 * `"\u0061"` are the same key).
 */
export function duplicateKeys(text: string): DuplicateKey[] {
  const stack: Map<string, number>[] = [];
  const found: DuplicateKey[] = [];
  visit(
    text,
    {
      onObjectBegin: () => {
        stack.push(new Map());
      },
      onObjectEnd: () => {
        stack.pop();
      },
      onObjectProperty: (key, _offset, _length, startLine, _startCharacter, pathSupplier) => {
        const seen = stack[stack.length - 1];
        if (!seen) return;
        const first = seen.get(key);
        if (first === undefined) seen.set(key, startLine + 1);
        else found.push({ key, at: showPath(pathSupplier()), firstLine: first, line: startLine + 1 });
      },
    },
    { disallowComments: true, allowTrailingComma: false },
  );
  return found;
}

/**
 * JSON.parse, refusing duplicate keys: returns the value, or the problems (one per repeated key,
 * naming the key, its object and both lines). Syntax errors are JSON.parse's.
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
