/**
 * Where the reference doc-bridge index lives: a folder the runner owns, outside every checkout,
 * one file per repository, pin and engine revision. A corpus decides nothing about this path, so a
 * committed symlink or a config value cannot send the index (document text a shell would run,
 * written as whoever runs the indexer) anywhere else.
 */
import { closeSync, fsyncSync, openSync, writeSync } from "node:fs";
import { lstat, mkdir, readdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { git } from "../corpus/git.ts";
import { defaultCacheDir } from "../util/cache-dir.ts";
import { OncePerKey } from "../util/once-per-key.ts";

/** Overrides the index folder; the runner also uses it to hand an unprivileged engine its copy. */
export const INDEX_DIR_ENV = "STUDY_RUNNER_DOC_INDEX";

/** `$STUDY_RUNNER_DOC_INDEX`, else `doc-bridge-index` in the runner's cache folder (the one `image build --install` uses). */
export function defaultIndexRoot(env: Readonly<Record<string, string | undefined>> = process.env): string {
  return env[INDEX_DIR_ENV] || join(defaultCacheDir(env), "doc-bridge-index");
}

/**
 * The repository's identity independent of where it is checked out: its root commit(s) at the
 * pin. Two clones share their indexes; two repositories never do.
 */
export async function repositoryKey(checkout: string, pin: string): Promise<string> {
  const roots = (await git(checkout, ["rev-list", "--max-parents=0", pin])).toString("utf8").split("\n").filter(Boolean).sort();
  if (roots.length === 0) throw new Error(`no root commit above ${pin}`);
  return roots[0]!;
}

/**
 * `repositoryKey` of each (checkout, pin), asked of git once by whoever owns this (a run, for
 * every doc-bridge engine it starts): a pin's root commits are part of the commit and never change.
 */
export class RepositoryKeys {
  private readonly keys = new OncePerKey<string>();

  of(checkout: string, pin: string): Promise<string> {
    return this.keys.get(JSON.stringify([checkout, pin]), () => repositoryKey(checkout, pin));
  }
}

export interface IndexLocation {
  root: string;
  /** `<root>/<repository key>` */
  repoDir: string;
  /** `<root>/<repository key>/<pin>` */
  pinDir: string;
  file: string;
}

export function indexLocation(root: string, repoKey: string, pin: string, revision: string): IndexLocation {
  for (const [what, value] of [
    ["repository key", repoKey],
    ["pin", pin],
    ["engine revision", revision],
  ] as const) {
    if (!/^[A-Za-z0-9._-]{1,80}$/.test(value) || value.startsWith(".")) throw new Error(`index ${what} '${value}' is not a plain name`);
  }
  const repoDir = join(root, repoKey);
  const pinDir = join(repoDir, pin);
  return { root, repoDir, pinDir, file: join(pinDir, `${revision}.json`) };
}

/** A folder below the index root that must be a real folder (never a symlink), made if missing. */
async function realFolder(path: string): Promise<void> {
  try {
    const st = await lstat(path);
    if (st.isDirectory()) return;
    throw new Error(`index folder ${path} is ${st.isSymbolicLink() ? "a symlink" : "not a folder"}; refusing to write through it`);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  await mkdir(path, { mode: 0o755 });
}

/** Writes the index atomically (exclusive temp file, fsync, rename), every folder on the way checked. */
export async function writeIndexFile(loc: IndexLocation, text: string): Promise<void> {
  await mkdir(loc.root, { recursive: true, mode: 0o755 });
  await realFolder(loc.repoDir);
  await realFolder(loc.pinDir);
  const tmp = `${loc.file}.${process.pid}.tmp`;
  // "wx": never through a planted file or link; 0644: an unprivileged engine is handed a copy, not this.
  const fd = openSync(tmp, "wx", 0o644);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    await rename(tmp, loc.file);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/** The index file's text, or undefined when there is none; refuses anything but a regular file. */
export async function readIndexFile(file: string): Promise<string | undefined> {
  let st;
  try {
    st = await lstat(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  if (!st.isFile()) throw new Error(`index ${file} is not a regular file; refusing to read it`);
  return readFile(file, "utf8");
}

/** Pins of this repository that have an index (any revision), for a "stale" message. */
export async function indexedPins(loc: IndexLocation): Promise<string[]> {
  try {
    return (await readdir(loc.repoDir)).filter((p) => /^[0-9a-f]{40,64}$/.test(p));
  } catch {
    return [];
  }
}
