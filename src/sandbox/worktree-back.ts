import { randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { chmod, mkdir, rename, symlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { pipeline } from "node:stream/promises";
import tar from "tar-stream";
import { removeTree } from "../export/export.ts";

/**
 * A writable worktree's way back on the engine-api channel (contract R245): the tree the program
 * left in its volume, read through `getArchive` after it ended, replaces the runner's copy of the
 * folder, as the bound folder on a local engine would hold it. The archive is written by the
 * inside, so it is read as untrusted: regular files, folders and symbolic links (kept as links,
 * never followed, nothing extracted beneath one), no name that leaves the folder, permission bits
 * only, at most `limits` bytes and entries. Anything else leaves the runner's copy as it was and
 * is returned as a problem: a partial tree never replaces a whole one.
 */

export interface WorktreeLimits {
  /** Bytes of regular files in all. */
  bytes: number;
  /** Entries (files, folders, links) in all. */
  entries: number;
}

/** The largest worktree that comes back: the export's own size bound is far below it. */
export const WORKTREE_BACK_LIMITS: WorktreeLimits = { bytes: 256 * 1024 * 1024, entries: 100_000 };

/** Reads `archive` (entries under one top folder) into a fresh sibling of `folder`, then swaps it in; returns the problems (none when replaced). */
export async function replaceFromArchive(archive: NodeJS.ReadableStream, folder: string, limits: WorktreeLimits = WORKTREE_BACK_LIMITS): Promise<string[]> {
  const tag = randomBytes(6).toString("hex");
  const incoming = join(dirname(folder), `.${basename(folder)}.incoming-${tag}`);
  await mkdir(incoming, { mode: 0o700 });
  let problems: string[];
  try {
    problems = await extractTree(archive, incoming, limits);
  } catch (err) {
    await removeTree(incoming);
    throw err;
  }
  if (problems.length > 0) {
    await removeTree(incoming);
    return problems;
  }
  const old = join(dirname(folder), `.${basename(folder)}.old-${tag}`);
  await rename(folder, old);
  await rename(incoming, folder);
  await removeTree(old);
  return [];
}

/** The checks and the writing of one tree; folders get their modes once everything is in them. */
async function extractTree(archive: NodeJS.ReadableStream, root: string, limits: WorktreeLimits): Promise<string[]> {
  const problems: string[] = [];
  const links = new Set<string>();
  const seen = new Set<string>();
  const folderModes: Array<[string, number]> = [];
  let bytes = 0;
  let entries = 0;
  let rootMode: number | undefined;
  const extract = tar.extract();
  await new Promise<void>((resolve, reject) => {
    extract.on("entry", (header, stream, next) => {
      const skip = (why?: string): void => {
        if (why) problems.push(why);
        stream.resume();
        stream.on("end", next);
      };
      const rel = header.name.split("/").slice(1).join("/").replace(/\/$/, "");
      const shown = JSON.stringify(rel.slice(0, 200));
      const mode = (header.mode ?? 0) & 0o777;
      if (rel === "") {
        if (header.type === "directory") rootMode = mode;
        return skip();
      }
      const parts = rel.split("/");
      if (parts.some((p) => p === "" || p === "." || p === "..")) return skip(`${shown}: not a plain relative name`);
      if (parts.some((_, i) => links.has(parts.slice(0, i + 1).join("/")))) return skip(`${shown}: beneath a symbolic link`);
      if (seen.has(rel)) return skip(`${shown}: sent twice`);
      seen.add(rel);
      if (++entries > limits.entries) return skip(`${shown}: past the bound of ${limits.entries} entries`);
      const target = join(root, ...parts);
      if (header.type === "directory") {
        folderModes.push([target, mode]);
        mkdir(target, { recursive: true, mode: 0o700 }).then(() => skip(), reject);
        return;
      }
      if (header.type === "symlink") {
        links.add(rel);
        mkdir(dirname(target), { recursive: true, mode: 0o700 })
          .then(() => symlink(header.linkname ?? "", target))
          .then(() => skip(), reject);
        return;
      }
      if (header.type !== "file") return skip(`${shown}: a ${header.type}, not a regular file, folder or link`);
      bytes += header.size ?? 0;
      if (bytes > limits.bytes) return skip(`${shown}: past the bound of ${limits.bytes} bytes`);
      mkdir(dirname(target), { recursive: true, mode: 0o700 })
        .then(() => pipeline(stream, createWriteStream(target, { flags: "wx", mode: 0o600 })))
        .then(() => chmod(target, mode))
        .then(() => next(), reject);
    });
    extract.on("finish", resolve);
    extract.on("error", reject);
    archive.on("error", reject);
    archive.pipe(extract as unknown as NodeJS.WritableStream);
  });
  // Deepest first, so a folder without write permission is closed only once it is filled.
  for (const [path, mode] of folderModes.reverse()) await chmod(path, mode);
  if (rootMode !== undefined) await chmod(root, rootMode);
  return problems;
}
