import { lstat, mkdtemp, readdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isProcessAlive } from "./process.ts";

/**
 * Per-attempt folders on the host are named `study-runner-<kind>-<pid>-XXXXXX`, so a later run
 * can remove what a runner killed outright (SIGKILL, power loss) left behind: an export, an
 * attempt HOME holding a copy of the CLI login, a doc-bridge or egress-proxy socket folder.
 */
export type FolderKind = "export" | "home" | "mcp" | "egress" | "gateway" | "engine" | "probe";

export const folderPrefix = (kind: FolderKind) => `study-runner-${kind}-`;

const runnerFolderStem = (kind: FolderKind, parentDir: string) => join(parentDir, `${folderPrefix(kind)}${process.pid}-`);

/** A fresh, private (0700) folder of this runner process. */
export function makeRunnerFolder(kind: FolderKind, parentDir: string = tmpdir()): Promise<string> {
  return mkdtemp(runnerFolderStem(kind, parentDir));
}

/** The path of a folder makeRunnerFolder would make, mkdtemp's six characters as X: its length is every such folder's. */
export function runnerFolderShape(kind: FolderKind, parentDir: string = tmpdir()): string {
  return `${runnerFolderStem(kind, parentDir)}XXXXXX`;
}

const warnOnStderr = (line: string) => void process.stderr.write(`study-runner: warning: ${line}\n`);

/**
 * Removes the folders of `kind` whose runner pid is no longer alive. A live pid keeps its
 * folder even if the pid was reused: keeping a stray folder is cheaper than deleting a running
 * attempt's. Only folders owned by this user are touched. Best effort (contract R122): a folder
 * that cannot be removed is named in a warning and skipped, never a reason to refuse a run.
 * Returns the removed paths.
 */
export async function reapOrphanFolders(kind: FolderKind, remove: (dir: string) => Promise<void>, parentDir: string = tmpdir(), warn: (line: string) => void = warnOnStderr): Promise<string[]> {
  let names: string[];
  try {
    names = await readdir(parentDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") warn(`cannot list ${parentDir} for folders a killed runner left (${(err as NodeJS.ErrnoException).code ?? String(err)}); skipped`);
    return [];
  }
  const re = new RegExp(`^${folderPrefix(kind)}(\\d+)-[^/]+$`);
  const uid = process.getuid?.();
  const removed: string[] = [];
  for (const name of names) {
    const pid = Number(re.exec(name)?.[1]);
    if (!Number.isSafeInteger(pid) || pid <= 0 || isProcessAlive(pid)) continue;
    const full = join(parentDir, name);
    const st = await lstat(full).catch(() => undefined);
    if (!st?.isDirectory() || (uid !== undefined && st.uid !== uid)) continue;
    try {
      await remove(full);
      removed.push(full);
    } catch (err) {
      warn(`cannot remove ${full}, left by the runner process ${pid} that is gone (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); skipped: remove it by hand`);
    }
  }
  return removed;
}
