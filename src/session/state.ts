import { constants } from "node:fs";
import { chmod, chown, lstat, mkdir, open, readdir, rename, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { exportAtPin, removeTree, type ExportOptions } from "../export/export.ts";
import { CONTAINER } from "../transport/cli/spec.ts";
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
 * through the session channel (src/transport/cli/session-channel.ts, contract R141).
 */

/** Bounds of a session's state, the same as with-relay.cjs applies in the container (and src/transport/cli/session-channel.ts to the stream). */
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
 * Reads the frames with-relay.cjs sent through the session channel (src/transport/cli/session-channel.ts):
 * a JSON line `{"path","bytes"}` and that many bytes per file, then `{"end":true}`. The stream came
 * out of the agent's container, so it is read as untrusted: paths of at most four names of letters,
 * digits, '.', '_' and '-', each file once, within the bounds. Anything else refuses the whole
 * stream. Returns the files, or the problem.
 */
export function parseSessionStream(bytes: Buffer): { files: Array<{ path: string; bytes: Buffer }> } | { problem: string } {
  const files: Array<{ path: string; bytes: Buffer }> = [];
  const seen = new Set<string>();
  let at = 0;
  let total = 0;
  for (;;) {
    const eol = bytes.indexOf(0x0a, at);
    if (eol < 0 || eol - at > 1024) return { problem: "the stream ends before its end frame (the CLI's session files did not all come back)" };
    let header: unknown;
    try {
      header = JSON.parse(bytes.subarray(at, eol).toString("utf8"));
    } catch {
      return { problem: `a frame header at byte ${at} is not JSON` };
    }
    at = eol + 1;
    const h = header as Record<string, unknown>;
    if (h !== null && typeof h === "object" && h.end === true && Object.keys(h).length === 1) {
      if (at !== bytes.length) return { problem: "bytes follow the end frame" };
      return { files };
    }
    const keys = h !== null && typeof h === "object" ? Object.keys(h).sort().join(",") : "";
    if (keys !== "bytes,path" || typeof h.path !== "string" || !Number.isSafeInteger(h.bytes) || (h.bytes as number) < 0) {
      return { problem: `a frame header at byte ${at} is not {"path","bytes"} or {"end":true}` };
    }
    const names = h.path.split("/");
    if (names.length > STATE_MAX_DEPTH || names.some((n) => !NAME_RE.test(n) || n === "." || n === "..")) {
      return { problem: `the path ${JSON.stringify(h.path.slice(0, 200))} is not at most ${STATE_MAX_DEPTH} names of letters, digits, '.', '_' or '-'` };
    }
    const size = h.bytes as number;
    if (size > STATE_FILE_LIMIT_BYTES || total + size > STATE_LIMIT_BYTES) return { problem: `${h.path} would pass the bounds (${STATE_FILE_LIMIT_BYTES} bytes a file, ${STATE_LIMIT_BYTES} in all)` };
    if (at + size > bytes.length) return { problem: `${h.path} is cut short (the stream ends before its end frame)` };
    const prefixes = names.slice(0, -1).map((_, i) => names.slice(0, i + 1).join("/"));
    if (seen.has(h.path) || prefixes.some((p) => seen.has(p)) || [...seen].some((p) => p.startsWith(`${h.path}/`))) return { problem: `${h.path} is sent twice or is both a file and a folder` };
    for (const p of prefixes) seen.add(`${p}/`);
    seen.add(h.path);
    files.push({ path: h.path, bytes: bytes.subarray(at, at + size) });
    total += size;
    at += size;
  }
}

/**
 * Keeps what came through the session channel as the session's state: a new copy replaces the
 * old one only when the stream is whole and valid and its copy complete, so anything else leaves
 * the previous state intact. Returns the problems (none when the state was replaced).
 */
export async function collectSessionCall(receipt: { streamFile: string | null; problem: string | null }, stateDir: string): Promise<string[]> {
  if (receipt.problem !== null) return [receipt.problem];
  if (receipt.streamFile === null) return ["the container never opened the session channel"];
  const handle = await open(receipt.streamFile, constants.O_RDONLY | constants.O_NOFOLLOW);
  let bytes: Buffer;
  try {
    bytes = await handle.readFile();
  } finally {
    await handle.close();
  }
  const parsed = parseSessionStream(bytes);
  if ("problem" in parsed) return [parsed.problem];
  const fresh = `${stateDir}.new`;
  await rm(fresh, { recursive: true, force: true });
  await mkdir(fresh, { mode: 0o700 });
  for (const f of parsed.files) {
    const target = join(fresh, ...f.path.split("/"));
    await mkdir(dirname(target), { recursive: true, mode: 0o700 });
    const out = await open(target, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    try {
      await out.writeFile(f.bytes);
      await out.sync();
    } finally {
      await out.close();
    }
  }
  const old = `${stateDir}.old`;
  await rm(old, { recursive: true, force: true });
  await rename(stateDir, old).catch(() => undefined);
  await rename(fresh, stateDir);
  await rm(old, { recursive: true, force: true });
  return [];
}
