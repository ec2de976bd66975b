import { createHash } from "node:crypto";
import { lstat, open, readdir } from "node:fs/promises";
import { join, posix } from "node:path";
import { ContainerRuntimeError } from "./port.ts";
import { encodeFrame, FRAME, STREAM_LIMITS } from "./stream-mux.ts";

/**
 * Content carried to the engine-api relay on its own stream (contract R282): the staged folder
 * (the placeholder login, a session call's prompt and files) and the fake image's test files,
 * written by the relay into the volumes it mounts, before it listens, instead of a `putArchive`
 * (which runs Docker's own untar program once per call). docker/helpers/stream-relay.cjs keeps
 * the same numbers and the same digest.
 *
 * Frames, runner -> relay on channel 0, before `listen`: `put` with a JSON header
 * `{"root","path","type","mode","uid","gid","size"}` per entry, a folder before what it holds; a
 * file's `size` bytes follow in `data` frames on channel 0. The relay answers with one `staged`
 * frame, the digest of what it wrote read back, before `ready` (contract R282).
 */

/** The most the relay writes: above a session's state (32 MiB) with its prompt and login (contract R283). */
export const STAGED_LIMIT_BYTES = 40 * 1024 * 1024;
/** The most entries (files and folders) it writes (contract R283). */
export const STAGED_ENTRIES_LIMIT = 4096;

/** One file or folder for the relay to write at `<root>/<path>`. */
export interface StreamEntry {
  /** The folder the relay writes under: where it mounts the volume. */
  root: string;
  /** Relative, `/`-separated. */
  path: string;
  type: "file" | "directory";
  /** Permission bits only: no set-id or sticky bit. */
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** The runner's file a file's bytes are read from. */
  source?: string;
}

/** Why the stream cannot carry a folder: the runner's own folder broke the bounds (contract R283). */
function refused(what: string, why: string): ContainerRuntimeError {
  return new ContainerRuntimeError(
    `${what} ${why}: the engine-api relay writes regular files and folders only, at most ${STAGED_ENTRIES_LIMIT} entries and ${STAGED_LIMIT_BYTES} bytes; use --sandbox-channel host-paths on an engine that shares the runner's files`,
    "invalid-spec",
  );
}

/**
 * Reads a folder's tree (names in order, a folder before its content) as entries under `root`
 * (and `prefix` in it), owned by `owner`, without following a link, within the bounds: a link, a
 * special file, a set-id or sticky mode, too many entries or bytes refuse the whole folder before
 * anything is made (contract R283).
 */
export async function readStagedTree(folder: string, root: string, owner: { uid: number; gid: number }, opts: { prefix?: string; limitBytes?: number } = {}): Promise<StreamEntry[]> {
  const limitBytes = opts.limitBytes ?? STAGED_LIMIT_BYTES;
  const entries: StreamEntry[] = [];
  let total = 0;
  const walk = async (rel: string): Promise<void> => {
    for (const name of (await readdir(join(folder, rel))).sort()) {
      const path = rel === "" ? name : `${rel}/${name}`;
      const st = await lstat(join(folder, path));
      const shown = JSON.stringify(path.slice(0, 200));
      const what = `the folder ${folder} for the engine-api relay`;
      if (!st.isFile() && !st.isDirectory()) throw refused(what, `holds ${shown}, ${st.isSymbolicLink() ? "a symbolic link" : "a special file"}`);
      if ((st.mode & 0o7000) !== 0) throw refused(what, `holds ${shown} with mode ${(st.mode & 0o7777).toString(8)} (a set-id or sticky bit)`);
      if (entries.length >= STAGED_ENTRIES_LIMIT) throw refused(what, `holds more than ${STAGED_ENTRIES_LIMIT} entries`);
      const size = st.isFile() ? st.size : 0;
      total += size;
      if (total > limitBytes) throw refused(what, `holds more than ${limitBytes} bytes`);
      const type = st.isFile() ? "file" : "directory";
      const at = opts.prefix ? `${opts.prefix}/${path}` : path;
      entries.push({ root, path: at, type, mode: st.mode & 0o777, ...owner, size, ...(type === "file" ? { source: join(folder, path) } : {}) });
      if (st.isDirectory()) await walk(path);
    }
  };
  await walk("");
  return entries;
}

/** Refuses entries that together pass the relay's bounds (contract R283). */
export function checkStreamBounds(entries: readonly StreamEntry[]): void {
  const bytes = entries.reduce((n, e) => n + e.size, 0);
  if (entries.length > STAGED_ENTRIES_LIMIT || bytes > STAGED_LIMIT_BYTES) throw refused("the content for the engine-api relay", `holds ${entries.length} entries and ${bytes} bytes`);
}

/** One entry's line of the digest; docker/helpers/stream-relay.cjs writes the same. */
function digestLine(e: StreamEntry, sha256: string): string {
  return `${e.type} ${e.mode.toString(8)} ${e.uid}:${e.gid} ${e.size} ${sha256} ${JSON.stringify(posix.join(e.root, e.path))}`;
}

/** The digest of what was written: the entries' lines in the order of their full names, hashed (contract R282). */
function digestOf(lines: ReadonlyMap<string, string>): string {
  const hash = createHash("sha256");
  for (const path of [...lines.keys()].sort()) hash.update(`${lines.get(path)!}\n`);
  return hash.digest("hex");
}

/**
 * Sends the entries' `put` and `data` frames to the relay's stdin, waiting while it is full, each
 * file read for exactly the size its entry says (a file that changed since fails the send), and
 * returns the digest of what was sent, which the relay's must equal.
 */
export async function sendStaged(out: NodeJS.WritableStream, entries: readonly StreamEntry[]): Promise<string> {
  const write = async (frame: Buffer): Promise<void> => {
    if (!out.write(frame)) await new Promise<void>((resolve) => out.once("drain", resolve));
  };
  const max = STREAM_LIMITS.maxPayloadBytes;
  const lines = new Map<string, string>();
  for (const e of entries) {
    const { source, ...header } = e;
    await write(encodeFrame(0, FRAME.put, Buffer.from(JSON.stringify(header), "utf8")));
    if (e.type === "directory") {
      lines.set(posix.join(e.root, e.path), digestLine(e, "-"));
      continue;
    }
    if (source === undefined) throw new Error(`the file ${posix.join(e.root, e.path)} for the engine-api relay has no source`);
    const hash = createHash("sha256");
    const file = await open(source, "r");
    try {
      let at = 0;
      // One byte past the size: a file that grew is found too.
      for (;;) {
        const chunk = Buffer.alloc(Math.min(max, e.size - at + 1));
        const { bytesRead } = await file.read(chunk, 0, chunk.length, at);
        if (bytesRead === 0) break;
        if (at + bytesRead > e.size) throw new Error(`the file ${source} for the engine-api relay grew while it was sent`);
        hash.update(chunk.subarray(0, bytesRead));
        await write(encodeFrame(0, FRAME.data, chunk.subarray(0, bytesRead)));
        at += bytesRead;
      }
      if (at !== e.size) throw new Error(`the file ${source} for the engine-api relay shrank while it was sent`);
    } finally {
      await file.close();
    }
    lines.set(posix.join(e.root, e.path), digestLine(e, hash.digest("hex")));
  }
  return digestOf(lines);
}
