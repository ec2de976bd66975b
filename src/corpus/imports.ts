import { lstat, open } from "node:fs/promises";
import { join, posix } from "node:path";
import { instructionFilesIn } from "./filter.ts";

/**
 * The files the pinned CLI inlines as instructions through `@` imports, as measured on 2.1.296
 * (tests/conformance/instruction-files.test.ts, contract R129): from the working folder's
 * CLAUDE.md it follows a path relative to the importing file and an absolute path inside
 * `/workspace`, nested imports up to IMPORT_MAX_HOPS imports away from CLAUDE.md, and nothing
 * outside the working folder (an absolute path elsewhere, `~/`).
 */

/** Measured: CLAUDE.md → 1 → 2 → 3 → 4 are inlined, the fifth import in the chain is not. */
export const IMPORT_MAX_HOPS = 4;
/** The working folder inside the container, as an import's absolute path names it. */
const WORKSPACE = "/workspace/";
/** The files the CLI loads at start and whose imports it follows (measured: the working folder's). */
const ROOTS = new Set(["CLAUDE.md", "CLAUDE.local.md"]);
/** Read at most this much of an instruction file when looking for its imports. */
const READ_LIMIT = 1024 * 1024;

/** The `@` import targets of a file's text, as the paths it names (not yet resolved). */
export function importTargets(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/(?:^|\s)@([^\s]+)/g)) out.push(m[1]!);
  return out;
}

/** An import target resolved to a path of the export, or null when it leaves the working folder. */
export function resolveImport(from: string, target: string): string | null {
  if (target.startsWith("~")) return null;
  let path: string;
  if (target.startsWith("/")) {
    if (!target.startsWith(WORKSPACE)) return null;
    path = posix.normalize(target.slice(WORKSPACE.length));
  } else {
    path = posix.normalize(posix.join(posix.dirname(from), target));
  }
  return path.startsWith("../") || path === ".." || path === "." || path.startsWith("/") ? null : path;
}

async function readText(dir: string, path: string): Promise<string> {
  const file = join(dir, path);
  if (!(await lstat(file)).isFile()) return "";
  const handle = await open(file, "r");
  try {
    const buffer = Buffer.alloc(READ_LIMIT);
    const { bytesRead } = await handle.read(buffer, 0, READ_LIMIT, 0);
    return buffer.subarray(0, bytesRead).toString("utf8");
  } finally {
    await handle.close();
  }
}

/**
 * Every instruction file of an export (instructionFilesIn) and every file the CLI inlines from
 * them through `@` imports, following the measured rules over the export's own files only.
 */
export async function instructionFilesWithImports(dir: string, paths: readonly string[]): Promise<string[]> {
  const present = new Set(paths);
  const found = new Set(instructionFilesIn(paths));
  let frontier = paths.filter((p) => ROOTS.has(p));
  const seen = new Set(frontier);
  for (let hop = 1; hop <= IMPORT_MAX_HOPS && frontier.length > 0; hop++) {
    const next: string[] = [];
    for (const from of frontier) {
      for (const target of importTargets(await readText(dir, from))) {
        const path = resolveImport(from, target);
        if (path === null || !present.has(path) || seen.has(path)) continue;
        seen.add(path);
        found.add(path);
        next.push(path);
      }
    }
    frontier = next;
  }
  return [...found].sort();
}
