import { createHash } from "node:crypto";
import { lstat, open, readdir } from "node:fs/promises";
import { join } from "node:path";
import { ContainerRuntimeError } from "./port.ts";
import { encodeFrame, FRAME, STREAM_LIMITS } from "./stream-mux.ts";

/**
 * The staged folder carried to the engine-api relay on its own stream (contract R282): the
 * placeholder login and a session call's prompt and files, written by the relay into the staged
 * volume it mounts, before it listens, instead of a `putArchive` (which runs Docker's own untar
 * program once per call). docker/helpers/stream-relay.cjs keeps the same numbers and the same
 * digest.
 *
 * Frames, runner -> relay on channel 0, before `listen`: `put` with a JSON header
 * `{"root","path","type","mode","uid","gid","size"}` per entry, a folder before what it holds; a
 * file's `size` bytes follow in `data` frames on channel 0. The relay answers with one `staged`
 * frame, the digest of what it wrote read back, before `ready` (contract R282).
 */

/** The most the staged folder holds: above a session's state (32 MiB) with its prompt and login (contract R283). */
export const STAGED_LIMIT_BYTES = 40 * 1024 * 1024;
/** The most entries (files and folders) it holds (contract R283). */
export const STAGED_ENTRIES_LIMIT = 4096;

export interface StagedEntry {
  /** Relative, `/`-separated. */
  path: string;
  type: "file" | "directory";
  /** Permission bits only: no set-id or sticky bit. */
  mode: number;
  size: number;
}

/** A staged folder read for the stream: its entries in the order they are sent, and their owner in the volume. */
export interface StagedTree {
  folder: string;
  owner: { uid: number; gid: number };
  entries: StagedEntry[];
}

/** Why the stream cannot carry a staged folder: the runner's own folder broke the bounds (contract R283). */
function refused(folder: string, why: string): ContainerRuntimeError {
  return new ContainerRuntimeError(
    `the staged folder ${folder} ${why}: the engine-api relay writes regular files and folders only, at most ${STAGED_ENTRIES_LIMIT} entries and ${STAGED_LIMIT_BYTES} bytes; use --sandbox-channel host-paths on an engine that shares the runner's files`,
    "invalid-spec",
  );
}

/**
 * Reads the staged folder's tree (names in order, a folder before its content) without following
 * a link, within the bounds: a link, a special file, a set-id or sticky mode, too many entries or
 * bytes refuse the whole folder before anything is made (contract R283).
 */
export async function readStagedTree(folder: string, owner: { uid: number; gid: number }, limitBytes = STAGED_LIMIT_BYTES): Promise<StagedTree> {
  const entries: StagedEntry[] = [];
  let total = 0;
  const walk = async (rel: string): Promise<void> => {
    for (const name of (await readdir(join(folder, rel))).sort()) {
      const path = rel === "" ? name : `${rel}/${name}`;
      const st = await lstat(join(folder, path));
      const shown = JSON.stringify(path.slice(0, 200));
      if (!st.isFile() && !st.isDirectory()) throw refused(folder, `holds ${shown}, ${st.isSymbolicLink() ? "a symbolic link" : "a special file"}`);
      if ((st.mode & 0o7000) !== 0) throw refused(folder, `holds ${shown} with mode ${(st.mode & 0o7777).toString(8)} (a set-id or sticky bit)`);
      if (entries.length >= STAGED_ENTRIES_LIMIT) throw refused(folder, `holds more than ${STAGED_ENTRIES_LIMIT} entries`);
      const size = st.isFile() ? st.size : 0;
      total += size;
      if (total > limitBytes) throw refused(folder, `holds more than ${limitBytes} bytes`);
      entries.push({ path, type: st.isFile() ? "file" : "directory", mode: st.mode & 0o777, size });
      if (st.isDirectory()) await walk(path);
    }
  };
  await walk("");
  return { folder, owner, entries };
}

/** One entry's line of the staged digest; docker/helpers/stream-relay.cjs writes the same. */
function digestLine(e: StagedEntry, owner: { uid: number; gid: number }, sha256: string): string {
  return `${e.type} ${e.mode.toString(8)} ${owner.uid}:${owner.gid} ${e.size} ${sha256} ${JSON.stringify(e.path)}`;
}

/** The digest of a staged tree: its entries' lines in name order, hashed (contract R282). */
export function stagedDigest(lines: ReadonlyMap<string, string>): string {
  const hash = createHash("sha256");
  for (const path of [...lines.keys()].sort()) hash.update(`${lines.get(path)!}\n`);
  return hash.digest("hex");
}

/**
 * Sends the tree's `put` and `data` frames to the relay's stdin, waiting while it is full, each
 * file read for exactly the size its entry says (a file that changed since fails the send), and
 * returns the digest of what was sent, which the relay's must equal.
 */
export async function sendStaged(out: NodeJS.WritableStream, root: string, tree: StagedTree): Promise<string> {
  const write = async (frame: Buffer): Promise<void> => {
    if (!out.write(frame)) await new Promise<void>((resolve) => out.once("drain", resolve));
  };
  const max = STREAM_LIMITS.maxPayloadBytes;
  const lines = new Map<string, string>();
  for (const e of tree.entries) {
    const header = { root, path: e.path, type: e.type, mode: e.mode, uid: tree.owner.uid, gid: tree.owner.gid, size: e.size };
    await write(encodeFrame(0, FRAME.put, Buffer.from(JSON.stringify(header), "utf8")));
    if (e.type === "directory") {
      lines.set(e.path, digestLine(e, tree.owner, "-"));
      continue;
    }
    const hash = createHash("sha256");
    const file = await open(join(tree.folder, e.path), "r");
    try {
      let at = 0;
      // One byte past the size: a file that grew is found too.
      for (;;) {
        const chunk = Buffer.alloc(Math.min(max, e.size - at + 1));
        const { bytesRead } = await file.read(chunk, 0, chunk.length, at);
        if (bytesRead === 0) break;
        if (at + bytesRead > e.size) throw new Error(`the staged file ${join(tree.folder, e.path)} grew while it was sent`);
        hash.update(chunk.subarray(0, bytesRead));
        await write(encodeFrame(0, FRAME.data, chunk.subarray(0, bytesRead)));
        at += bytesRead;
      }
      if (at !== e.size) throw new Error(`the staged file ${join(tree.folder, e.path)} shrank while it was sent`);
    } finally {
      await file.close();
    }
    lines.set(e.path, digestLine(e, tree.owner, hash.digest("hex")));
  }
  return stagedDigest(lines);
}
