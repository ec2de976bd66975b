import { randomBytes } from "node:crypto";
import { open, rename, unlink, type FileHandle } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/**
 * The file operations the ledger's durability rests on. Production uses node:fs/promises; a test
 * hands in a layer that records the calls, to check that every write point fsyncs in order.
 */
export interface FileLayer {
  open(path: string, flags: string, mode?: number): Promise<FileHandle>;
  rename(from: string, to: string): Promise<void>;
  unlink(path: string): Promise<void>;
}

export const NODE_FILES: FileLayer = { open, rename, unlink };

export interface AtomicWriteOptions {
  /** File mode of the result, enforced with fchmod so that the umask cannot widen or narrow it. */
  mode: number;
  /** Owner to give the file before it replaces the old one (only effective when running as root). */
  uid?: number;
  gid?: number;
  files?: FileLayer;
}

/** fsync a directory so that a create or rename inside it survives a crash. */
export async function fsyncDirectory(dir: string, files: FileLayer = NODE_FILES): Promise<void> {
  const handle = await files.open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Replace `path` atomically: write a temp file in the same directory (created exclusively, so
 * a stray file is never reused), fsync it, rename it over `path`, fsync the directory. A crash
 * at any instant leaves either the old or the new content, never a torn file.
 */
export async function writeFileAtomic(path: string, data: string | Uint8Array, options: AtomicWriteOptions): Promise<void> {
  const dir = dirname(path);
  const temp = join(dir, `.${basename(path)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  const files = options.files ?? NODE_FILES;
  const handle = await files.open(temp, "wx", options.mode);
  let renamed = false;
  try {
    await handle.chmod(options.mode);
    if (options.uid !== undefined && options.gid !== undefined) await handle.chown(options.uid, options.gid);
    await handle.writeFile(data);
    await handle.sync();
    await handle.close();
    await files.rename(temp, path);
    renamed = true;
    await fsyncDirectory(dir, files);
  } finally {
    await handle.close().catch(() => undefined);
    if (!renamed) await files.unlink(temp).catch(() => undefined);
  }
}
