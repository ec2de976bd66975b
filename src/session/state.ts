import { constants } from "node:fs";
import { chmod, chown, lstat, mkdir, open, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { exportAtPin, removeTree, type ExportOptions } from "../export/export.ts";
import { CONTAINER } from "../attempt/spec.ts";
import { CONTAINER_GID, CONTAINER_UID } from "../util/container-socket.ts";

/**
 * What a session keeps on the host between its calls, in the run's private storage folder
 * (mode 700, outside every checkout and the project):
 *
 *   <storage>/<session id>/worktree/   the writable copy of the filtered export, never reset
 *   <storage>/<session id>/state/      the CLI's session files, as the last container left them
 *
 * Measured on 2.1.296 (docs/claude-cli-observations.md, "Resume"): a resume in a fresh HOME
 * needs only the login and `.claude/projects/-workspace/<id>.jsonl`, owned by the container
 * user. `state/` is the copy of `$HOME/.claude/projects` that with-relay.cjs hands back
 * (into the call's own output folder, see src/cli-attempt/run.ts).
 */

/** Bounds of a session's state, the same as with-relay.cjs applies in the container. */
export const STATE_FILE_LIMIT_BYTES = 8 * 1024 * 1024;
export const STATE_LIMIT_BYTES = 32 * 1024 * 1024;
const STATE_MAX_DEPTH = 4;
const NAME_RE = /^[A-Za-z0-9_.-]{1,200}$/;

const asRoot = () => process.getuid?.() === 0;

export function sessionPaths(storageDir: string, sessionId: string) {
  const root = join(storageDir, sessionId);
  return { root, worktree: join(root, "worktree"), state: join(root, "state") };
}

/**
 * The session's worktree: the filtered export at the pin, then made writable for the container
 * user (files 0644, folders 0755, owned by uid 1000 when the runner is root), because the agent
 * edits it. Returns its path and the export hash.
 */
export async function makeWorktree(storageDir: string, sessionId: string, source: Omit<ExportOptions, "parentDir">): Promise<{ worktree: string; exportHash: string }> {
  const paths = sessionPaths(storageDir, sessionId);
  await mkdir(paths.root, { mode: 0o700 });
  await mkdir(paths.state, { mode: 0o700 });
  const exported = await exportAtPin({ ...source, parentDir: paths.root });
  await rename(exported.dir, paths.worktree);
  const open = async (p: string): Promise<void> => {
    const st = await lstat(p);
    if (st.isDirectory()) {
      await chmod(p, 0o755);
      for (const name of await readdir(p)) await open(join(p, name));
    } else await chmod(p, 0o644);
    if (asRoot()) await chown(p, CONTAINER_UID, CONTAINER_GID);
  };
  await open(paths.worktree);
  return { worktree: paths.worktree, exportHash: exported.exportHash };
}

/** Removes everything the session kept (worktree and session files); no error when already gone. */
export async function removeSessionStorage(storageDir: string, sessionId: string): Promise<void> {
  const { root } = sessionPaths(storageDir, sessionId);
  await removeTree(root).catch(async () => rm(root, { recursive: true, force: true }));
}

/**
 * Copies the regular files of one tree into a new folder `to`: never a symlink, a special file
 * or an odd name, within the size bounds, at most four levels deep. The source may have been
 * written by the agent's container, so each file is opened with O_NOFOLLOW and checked again
 * after opening. Returns what was left out.
 */
export async function copyRegularTree(from: string, to: string, owner?: { uid: number; gid: number }): Promise<string[]> {
  const skipped: string[] = [];
  let left = STATE_LIMIT_BYTES;
  const walk = async (src: string, dst: string, depth: number): Promise<void> => {
    let names: string[];
    try {
      names = await readdir(src);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
      throw err;
    }
    await mkdir(dst, { mode: 0o700 });
    if (owner) await chown(dst, owner.uid, owner.gid);
    for (const name of names.sort()) {
      if (!NAME_RE.test(name) || name === "." || name === "..") {
        skipped.push(`a name that is not letters, digits, '.', '_' or '-'`);
        continue;
      }
      const s = join(src, name);
      const st = await lstat(s);
      if (st.isDirectory()) {
        if (depth + 1 >= STATE_MAX_DEPTH) skipped.push(`${name}: deeper than ${STATE_MAX_DEPTH} levels`);
        else await walk(s, join(dst, name), depth + 1);
        continue;
      }
      if (!st.isFile() || st.size > STATE_FILE_LIMIT_BYTES || st.size > left) {
        skipped.push(`${name}: not a regular file within the bounds`);
        continue;
      }
      const handle = await open(s, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
      let bytes: Buffer;
      try {
        const again = await handle.stat();
        if (!again.isFile() || again.size > STATE_FILE_LIMIT_BYTES || again.size > left) {
          skipped.push(`${name}: changed while it was read`);
          continue;
        }
        bytes = await handle.readFile();
      } finally {
        await handle.close();
      }
      if (bytes.length > left) {
        skipped.push(`${name}: grew past the bound`);
        continue;
      }
      left -= bytes.length;
      const out = await open(join(dst, name), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
      try {
        await out.writeFile(bytes);
        await out.sync();
      } finally {
        await out.close();
      }
      if (owner) await chown(join(dst, name), owner.uid, owner.gid);
    }
  };
  await walk(from, to, 0);
  return skipped;
}

export interface SessionCallInput {
  /** The session's worktree: the container's working folder, mounted read-write. */
  worktree: string;
  /** Where the session files are kept between calls. */
  stateDir: string;
  /** The call's prompt, handed to the CLI on stdin. */
  prompt: string;
  /** The export hash recorded when the worktree was made. */
  exportHash: string;
  /**
   * The prompt usage of the session's earlier messages: the CLI's modelUsage after a resume
   * covers the whole session while its stream shows only this call's messages (measured).
   */
  priorMessageUsage: ReadonlyArray<{ messageId: string; inputTokens: number; cacheReadInputTokens: number; cacheCreationInputTokens: number }>;
}

/**
 * Puts the prompt and the session files beside the staged login (the folder mounted at
 * CONTAINER.sessionLoginDir), owned by the container user, and returns the in-container paths for
 * with-relay.cjs (`--stdin`, `--projects`).
 */
export async function stageSessionCall(stagedHome: string, input: SessionCallInput): Promise<{ stdinFile: string; projectsDir: string }> {
  const owner = asRoot() ? { uid: CONTAINER_UID, gid: CONTAINER_GID } : undefined;
  const promptPath = join(stagedHome, "prompt.txt");
  const handle = await open(promptPath, "wx", 0o600);
  try {
    await handle.writeFile(input.prompt);
  } finally {
    await handle.close();
  }
  if (owner) await chown(promptPath, owner.uid, owner.gid);
  const projects = join(stagedHome, "projects");
  await copyRegularTree(input.stateDir, projects, owner);
  // An empty state (the first call) still needs the folder for the copy back.
  await mkdir(projects, { mode: 0o700 }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "EEXIST") throw err;
  });
  if (owner) await chown(projects, owner.uid, owner.gid);
  return { stdinFile: `${CONTAINER.sessionLoginDir}/prompt.txt`, projectsDir: `${CONTAINER.sessionLoginDir}/projects` };
}

/**
 * Keeps what the container handed back (into `projectsOut`, the call's own output folder) as the
 * session's state: a new copy replaces the old one only when the copy is complete, so a failed
 * copy leaves the previous state intact.
 */
export async function collectSessionCall(projectsOut: string, stateDir: string): Promise<string[]> {
  const fresh = `${stateDir}.new`;
  await rm(fresh, { recursive: true, force: true });
  const skipped = await copyRegularTree(projectsOut, fresh);
  await mkdir(fresh, { mode: 0o700 }).catch(() => undefined);
  const old = `${stateDir}.old`;
  await rm(old, { recursive: true, force: true });
  await rename(stateDir, old).catch(() => undefined);
  await rename(fresh, stateDir);
  await rm(old, { recursive: true, force: true });
  return skipped;
}
