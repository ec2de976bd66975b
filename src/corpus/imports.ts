import { lstat, open } from "node:fs/promises";
import { join, posix } from "node:path";
import { instructionFilesIn } from "./filter.ts";

/**
 * The files a CLI version inlines as instructions through `@` imports, by the rules its
 * calibration profile measured (contract R129, R265; 2.1.296: a path relative to the importing
 * file and an absolute path inside `/workspace`, nested imports up to 4 imports away from
 * CLAUDE.md, nothing outside the working folder). Only the export's own files can be followed:
 * the attempt's container holds nothing else a corpus could name.
 */

/** The measured rules the runner follows (a profile's `imports.plain`). */
export interface ImportRulesFollowed {
  claudeMd: boolean;
  relative: boolean;
  absoluteInWorkspace: boolean;
  maxHops: number;
}
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

/** An import target resolved to a path of the export, or null when it leaves the working folder or its form is not followed. */
export function resolveImport(from: string, target: string, rules: Pick<ImportRulesFollowed, "relative" | "absoluteInWorkspace"> = { relative: true, absoluteInWorkspace: true }): string | null {
  if (target.startsWith("~")) return null;
  let path: string;
  if (target.startsWith("/")) {
    if (!target.startsWith(WORKSPACE) || !rules.absoluteInWorkspace) return null;
    path = posix.normalize(target.slice(WORKSPACE.length));
  } else {
    if (!rules.relative) return null;
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
 * them through `@` imports, following the version's measured `rules` over the export's own files
 * only (none when the CLI did not load CLAUDE.md itself).
 */
export async function instructionFilesWithImports(dir: string, paths: readonly string[], rules: ImportRulesFollowed): Promise<string[]> {
  const present = new Set(paths);
  const found = new Set(instructionFilesIn(paths));
  let frontier = rules.claudeMd ? paths.filter((p) => ROOTS.has(p)) : [];
  const seen = new Set(frontier);
  for (let hop = 1; hop <= rules.maxHops && frontier.length > 0; hop++) {
    const next: string[] = [];
    for (const from of frontier) {
      for (const target of importTargets(await readText(dir, from))) {
        const path = resolveImport(from, target, rules);
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
