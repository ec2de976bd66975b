import { createReadStream } from "node:fs";
import { lstat, readdir, readlink } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import tar from "tar-stream";
import type { Workspace } from "./port.ts";

/**
 * A folder of the runner's host as the runtime port's read-only tree: its content as a tar stream
 * (for a runtime that shares no filesystem with the runner, e.g. a pod on another node) and the
 * folder itself (`hostPath`), which a runtime on this host may bind-mount read-only instead.
 */
export function treeFromFolder(target: string, folder: string, exportHash?: string): Workspace {
  return { target, hostPath: folder, tar: () => packFolder(folder), ...(exportHash !== undefined ? { exportHash } : {}) };
}

/**
 * The folder as an uncompressed tar, streamed: folders, regular files and symbolic links (kept as
 * links, never followed), with their modes; owners are left out (the container's user reads
 * them). Entries in name order, so the same tree gives the same bytes.
 */
export function packFolder(folder: string, opts: FolderEntryOptions = {}): NodeJS.ReadableStream {
  const pack = tar.pack();
  addFolder(pack, folder, opts).then(
    () => pack.finalize(),
    (err: unknown) => pack.destroy(err as Error),
  );
  return packStream(pack);
}

/** tar-stream's pack is a streamx stream: handed on as a Node stream of bytes. */
export function packStream(pack: tar.Pack): NodeJS.ReadableStream {
  return Readable.from(pack as AsyncIterable<Buffer>, { objectMode: false });
}

export interface FolderEntryOptions {
  /** Entries are named under this folder of the tar (none: at its root). */
  prefix?: string;
  /** The owner every entry gets (none: root, left out). */
  owner?: { uid: number; gid: number };
}

/** Adds the folder's tree to `pack` as `packFolder` describes; resolves once every entry is in. */
export async function addFolder(pack: tar.Pack, folder: string, opts: FolderEntryOptions = {}): Promise<void> {
  const owner = opts.owner ? { uid: opts.owner.uid, gid: opts.owner.gid } : {};
  const walk = async (rel: string): Promise<void> => {
    const names = (await readdir(join(folder, rel))).sort();
    for (const name of names) {
      const path = rel === "" ? name : `${rel}/${name}`;
      const full = join(folder, path);
      const st = await lstat(full);
      const header = { name: opts.prefix ? `${opts.prefix}/${path}` : path, mode: st.mode & 0o7777, mtime: st.mtime, ...owner };
      if (st.isDirectory()) {
        pack.entry({ ...header, type: "directory" });
        await walk(path);
      } else if (st.isSymbolicLink()) {
        pack.entry({ ...header, type: "symlink", linkname: await readlink(full) });
      } else if (st.isFile()) {
        await new Promise<void>((resolve, reject) => {
          const entry = pack.entry({ ...header, type: "file", size: st.size }, (err) => (err ? reject(err) : resolve()));
          createReadStream(full).on("error", reject).pipe(entry);
        });
      }
      // Sockets, FIFOs and devices are no part of an export: left out.
    }
  };
  await walk("");
}
