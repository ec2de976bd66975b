/**
 * Which environment variables a command's code reads, found in its sources: the modules its entry
 * module imports, statically or with `import()`, all the way down, and in each the names read from
 * `process.env` or from an `env` object (`env.NAME`, `env[NAME]`, a constant resolved in the same
 * file). Writes (`env.NAME = ...`) build a child's environment and are not reads.
 */
import { readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

const NAME = "[A-Z_][A-Z0-9_]*";

/** The variable names `source` reads. */
export function envReads(source: string): string[] {
  // Comments are prose: a doc comment naming a variable reads nothing.
  const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:"'`])\/\/.*$/gm, "$1");
  const constants = new Map([...code.matchAll(new RegExp(`\\bconst (${NAME})\\s*=\\s*"(${NAME})"`, "g"))].map((m) => [m[1]!, m[2]!]));
  const found = new Set<string>();
  const notWrite = (rest: string) => !/^\s*(=(?!=)|\?\?=|\|\|=)/.test(rest);
  // `delete process.env.NAME` takes a variable away from the children; it reads nothing.
  const receiver = `(?<!delete\\s+)(?:process\\.env|(?<![.\\w])env)`;
  for (const m of code.matchAll(new RegExp(`${receiver}\\??\\.(${NAME})\\b(?=([^\\n]*))`, "g"))) if (notWrite(m[2]!)) found.add(m[1]!);
  for (const m of code.matchAll(new RegExp(`${receiver}\\[\\s*(?:"(${NAME})"|(${NAME}))\\s*\\](?=([^\\n]*))`, "g"))) {
    const name = m[1] ?? constants.get(m[2]!);
    if (name && notWrite(m[3]!)) found.add(name);
  }
  return [...found].sort();
}

/** The src modules `file` imports (statically, re-exports, or with a literal `import()`); a type-only import loads nothing. */
function imports(file: string, source: string): string[] {
  const code = source.replace(/^(?:import|export) type [^;]*;/gm, "");
  const specs = [...code.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|\bimport\s+)"(\.{1,2}\/[^"]+\.ts)"/g)].map((m) => m[1]!);
  return specs.map((s) => resolve(dirname(file), s));
}

/** Every src module `entry` reaches, with its source (`read` lets a test plant a file). */
export function reachable(entry: string, read: (file: string) => string = (f) => readFileSync(f, "utf8")): Map<string, string> {
  const seen = new Map<string, string>();
  const queue = [resolve(PROJECT_ROOT, entry)];
  while (queue.length) {
    const file = queue.pop()!;
    if (seen.has(file)) continue;
    const source = read(file);
    seen.set(file, source);
    queue.push(...imports(file, source).filter((f) => !seen.has(f)));
  }
  return seen;
}

/** The variables the modules `entry` reaches read, each with the files that read it (relative to the project). */
export function commandReads(entry: string, read?: (file: string) => string): Map<string, string[]> {
  const reads = new Map<string, string[]>();
  for (const [file, source] of reachable(entry, read)) {
    for (const name of envReads(source)) reads.set(name, [...(reads.get(name) ?? []), relative(PROJECT_ROOT, file)]);
  }
  return reads;
}

export const srcFile = (path: string) => join(PROJECT_ROOT, path);
