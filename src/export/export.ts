import { createHash } from "node:crypto";
import { chmodSync, closeSync, fchmodSync, mkdirSync, openSync, writeSync } from "node:fs";
import { chmod, lstat, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join, resolve, sep } from "node:path";
import { checkPin, lsTree, readBlobs, type TreeEntry } from "../corpus/git.ts";
import { loadPublicFilter, publicBlobPass, type AnswerKeyMatch, type ExclusionReason, type PublicFilter, type PublicPathOptions } from "../corpus/filter.ts";
import { UsageError } from "../util/errors.ts";
import { OncePerKey } from "../util/once-per-key.ts";
import { folderPrefix, makeRunnerFolder, reapOrphanFolders } from "../util/orphans.ts";
import { removeDeep } from "../util/remove-deep.ts";

/**
 * The attempt's working directory: the pinned blobs that pass the public-path filter,
 * read from git objects (never the work tree), files 0444 and directories 0555, no `.git`
 * (contract R58, R60).
 */

/** Name prefix of every export folder; `<prefix><pid>-XXXXXX` lets a reaper find orphans. */
export const EXPORT_PREFIX = folderPrefix("export");

/** Every file is 0444 (the 100755 bit is dropped: the agent reads, it never runs corpus files). */
export const FILE_MODE = 0o444;
export const DIR_MODE = 0o555;

export interface ExportSource extends PublicPathOptions {
  repoDir: string;
  /** Full 40-hex commit id. */
  pin: string;
  /** Where the export folder is made (default: the OS temp dir); the path limit is what it leaves. */
  parentDir?: string;
  /** The run's file-count and byte limits (default DEFAULT_EXPORT_LIMITS). */
  limits?: ExportLimits;
}

export interface ExportOptions extends ExportSource {
  labels: { run: string; attempt: string };
}

/** How many files and bytes one export may hold (`--max-export-files`, `--max-export-bytes`). */
export interface ExportLimits {
  maxFiles: number;
  maxBytes: number;
}

/**
 * Measured: 200,001 files took 19 s and 789 MB on disk to export, and every attempt writes its
 * own export (one more is written ahead). 50,000 files and 500 MB hold every corpus this project
 * has met many times over; a larger one is a decision, made with the flags.
 */
export const DEFAULT_EXPORT_LIMITS: Readonly<ExportLimits> = { maxFiles: 50_000, maxBytes: 500_000_000 };

/** Longest absolute path the kernel takes (Linux PATH_MAX is 4096 bytes with its NUL). */
export const PATH_MAX_BYTES = 4095;
/** Longest name of one path component (Linux NAME_MAX). */
export const NAME_MAX_BYTES = 255;
/** Where attempts see the export inside their container. */
export const CONTAINER_WORKSPACE = "/workspace";
/** A pid has at most 7 digits (Linux's pid_max is at most 4194304); mkdtemp adds 6 characters. */
const FOLDER_SUFFIX_BYTES = 7 + 1 + 6;

/**
 * The longest tree path an export can write: what PATH_MAX leaves after the longer of the export
 * folder under `parentDir` and the container's `/workspace/`.
 */
export function exportPathLimit(parentDir: string = tmpdir()): number {
  const hostRoot = Buffer.byteLength(resolve(parentDir)) + 1 + Buffer.byteLength(EXPORT_PREFIX) + FOLDER_SUFFIX_BYTES;
  return PATH_MAX_BYTES - Math.max(hostRoot, CONTAINER_WORKSPACE.length) - 1;
}

/** A path in a message: its start, its length in bytes; never its whole length when it is long. */
function showPath(path: string): string {
  const bytes = Buffer.byteLength(path);
  return bytes > 120 ? `'${path.slice(0, 60)}…' (${bytes} bytes)` : `'${path}'`;
}

/**
 * Refuses (exit 2), naming the path and the limit, an export the runner could not write or
 * should not: a path longer than `exportPathLimit`, a name over 255 bytes, more files or bytes
 * than the limits (contract R121). Checked on the file list alone, before any folder exists.
 */
export function checkExportLimits(files: readonly ExportedFile[], o: { parentDir?: string; limits?: ExportLimits; repository?: string } = {}): void {
  const limits = o.limits ?? DEFAULT_EXPORT_LIMITS;
  const pathLimit = exportPathLimit(o.parentDir);
  const where = o.repository ? ` of '${o.repository}'` : "";
  const problems: string[] = [];
  let bytes = 0;
  for (const f of files) {
    bytes += f.size;
    const long = f.path.split("/").find((p) => Buffer.byteLength(p) > NAME_MAX_BYTES);
    if (long !== undefined) {
      problems.push(
        `the export${where} holds ${showPath(f.path)}, whose name ${showPath(long)} is over the ${NAME_MAX_BYTES}-byte limit of a file name; no file system can write it: rename it in the corpus or keep it out`,
      );
    } else if (Buffer.byteLength(f.path) > pathLimit) {
      problems.push(
        `the export${where} holds the path ${showPath(f.path)}, longer than the ${pathLimit}-byte path limit that PATH_MAX (${PATH_MAX_BYTES}) leaves after the export folder and ${CONTAINER_WORKSPACE}/; shorten it in the corpus or keep it out`,
      );
    }
    if (problems.length >= 5) break;
  }
  if (files.length > limits.maxFiles)
    problems.push(`the export${where} holds ${files.length} files, more than the limit of ${limits.maxFiles}; raise it with --max-export-files if the corpus is meant to be this large`);
  else if (bytes > limits.maxBytes)
    problems.push(`the export${where} holds ${bytes} bytes, more than the limit of ${limits.maxBytes}; raise it with --max-export-bytes if the corpus is meant to be this large`);
  if (problems.length) throw new UsageError(problems.join("\n"), problems);
}

export interface ExportedFile {
  path: string;
  oid: string;
  size: number;
  /** The git mode at the pin (100644 or 100755); on disk every file is 0444. */
  mode: string;
}

export interface ExportPlan {
  /** Sorted by the bytes of their UTF-8 path. */
  files: ExportedFile[];
  /** How many tree entries each filter rule kept out. */
  excluded: Record<ExclusionReason, number>;
  /** What each answer key kept out, by name and by content. */
  answerKeys: AnswerKeyMatch[];
}

export interface ExportResult extends ExportPlan {
  /** `ExportHasher` over what was written. */
  exportHash: string;
  dir: string;
  labels: { run: string; attempt: string };
}

const REASONS: readonly ExclusionReason[] = ["not-a-regular-file", "not-utf8-path", "hidden", "build-or-dependency-dir", "lockfile", "answer-key", "manifest", "instruction-file", "too-large"];

/** The mode every exported file is written with, as it enters the hash. */
const HASHED_FILE_MODE = FILE_MODE.toString(8);

/**
 * exportHash = hex(sha256( concat over the files written, sorted by UTF-8 path bytes, of
 *   path (UTF-8) ‖ 0x00 ‖ mode as written (octal ASCII, "444") ‖ 0x00 ‖ byte count (decimal ASCII) ‖ 0x00 ‖ the bytes ))
 * A path cannot hold NUL and the byte count says where each file ends, so the encoding is
 * unambiguous: two exports with different bytes never share it (contract R118). Documented in
 * docs/export.md.
 */
export class ExportHasher {
  private readonly hash = createHash("sha256");
  private last: Buffer | undefined;

  add(path: string, data: Buffer, mode: string = HASHED_FILE_MODE): void {
    const key = Buffer.from(path, "utf8");
    if (this.last && Buffer.compare(this.last, key) >= 0) throw new Error(`exportHash: files must come sorted by path bytes (${path} after ${this.last.toString("utf8")})`);
    this.last = key;
    this.hash.update(key).update("\0").update(mode, "latin1").update("\0").update(String(data.length), "latin1").update("\0").update(data);
  }

  digest(): string {
    return this.hash.digest("hex");
  }
}

/** The exportHash of `files` at the pin, from their bytes, without writing them (http tools, ledger verify). */
export async function hashExport(repoDir: string, files: readonly ExportedFile[]): Promise<string> {
  const hasher = new ExportHasher();
  await readBlobs(
    repoDir,
    files.map((f) => f.oid),
    (i, data) => hasher.add(files[i]!.path, data),
  );
  return hasher.digest();
}

/** The export's file list with the tree and filter it came from (the dry run's and doctor's view). */
export interface ExportInspection {
  plan: ExportPlan;
  entries: TreeEntry[];
  filter: PublicFilter;
}

/**
 * Lists the pinned tree once and applies the public-path filter, then checks the file list
 * against the limits (contract R121). Reads only symlink targets and, when there are answer
 * keys, the blobs' contents for copy matching. Refuses (UsageError, exit 2) what is not a pin
 * (contract R124), an answer key that cannot be resolved (R119) and a list over a limit.
 */
export async function inspectExport(source: ExportSource, o: { repository?: string } = {}): Promise<ExportInspection> {
  const entries = await pinnedEntries(source);
  const filter = await loadPublicFilter(source.repoDir, entries, source);
  const plan = planOf(entries, filter);
  checkExportLimits(plan.files, { ...source, ...o });
  return { plan, entries, filter };
}

/** The pinned tree's entries, once the pin is known to be one (contract R124). */
async function pinnedEntries(source: ExportSource): Promise<TreeEntry[]> {
  const wrong = await checkPin(source.repoDir, source.pin);
  if (wrong) throw new UsageError(wrong);
  return lsTree(source.repoDir, source.pin);
}

function exportedFile(entry: TreeEntry): ExportedFile {
  return { path: entry.path, oid: entry.oid, size: entry.size!, mode: entry.mode };
}

/** What `filter` keeps of `entries`, sorted by path bytes, and how many each rule kept out. */
function planOf(entries: readonly TreeEntry[], filter: PublicFilter): ExportPlan {
  const excluded = Object.fromEntries(REASONS.map((r) => [r, 0])) as Record<ExclusionReason, number>;
  const kept: TreeEntry[] = [];
  for (const entry of entries) {
    const reason = filter.reason(entry);
    if (reason) excluded[reason]++;
    else kept.push(entry);
  }
  kept.sort((a, b) => Buffer.compare(a.rawPath, b.rawPath));
  return { files: kept.map(exportedFile), excluded, answerKeys: filter.answerKeys };
}

/** `inspectExport`'s file list: what an export of the source writes. */
export async function planExport(source: ExportSource): Promise<ExportPlan> {
  return (await inspectExport(source)).plan;
}

/** Joins a tree path under `dir`, refusing anything that could land outside it. */
function safeJoin(dir: string, path: string): string {
  const parts = path.split("/");
  if (path.includes("\0") || parts.some((p) => p === "" || p === "." || p === "..")) {
    throw new Error(`export: refusing tree path ${JSON.stringify(path)}`);
  }
  const full = resolve(dir, path);
  if (!full.startsWith(dir + sep)) throw new Error(`export: tree path ${JSON.stringify(path)} leaves the export folder`);
  return full;
}

/**
 * Writes files into `dir` (which must exist, be empty and be writable) one at a time, in
 * path-byte order, each from the bytes it is handed, and hashes what it wrote. Each directory is
 * made (0700) before its first file; `finish` makes every directory below `dir` and `dir` itself
 * 0555, deepest first, only after the last file, so no write ever meets a read-only parent, and
 * no directory exists that holds no exported file. The writes are synchronous: measured on 5,000
 * files / 50 MB on tmpfs, a thread-pool version with 8 writes in flight took about 1.4x as long
 * (1.05 s vs 0.74 s), because each file costs four round trips to the pool. Each call blocks the
 * event loop for one small file only; git keeps decoding the next blobs meanwhile.
 */
class ExportWriter {
  private readonly hasher = new ExportHasher();
  private readonly root: string;
  private readonly dirs: string[] = [];
  private readonly made = new Set<string>();
  readonly written: string[] = [];

  constructor(dir: string) {
    this.root = resolve(dir);
  }

  write(file: ExportedFile, data: Buffer): void {
    if (data.length !== file.size) throw new Error(`export: blob ${file.oid} of ${file.path} has ${data.length} bytes, tree says ${file.size}`);
    const target = safeJoin(this.root, file.path);
    const parts = file.path.split("/");
    for (let i = 1; i < parts.length; i++) {
      const d = parts.slice(0, i).join("/");
      if (this.made.has(d)) continue;
      mkdirSync(safeJoin(this.root, d), { mode: 0o700 });
      this.made.add(d);
      this.dirs.push(d);
    }
    // "wx": a duplicate path in a crafted tree fails instead of overwriting.
    const fd = openSync(target, "wx", FILE_MODE);
    try {
      let off = 0;
      while (off < data.length) off += writeSync(fd, data, off, data.length - off);
      // The umask may have cleared read bits of the open() mode; the contract says 0444.
      fchmodSync(fd, FILE_MODE);
    } finally {
      closeSync(fd);
    }
    this.hasher.add(file.path, data);
    this.written.push(file.path);
  }

  /** Makes the folders read-only and returns the exportHash of what was written. */
  finish(): string {
    // A parent is made before its children, so the reverse order is deepest first.
    for (const d of [...this.dirs].reverse()) chmodSync(join(this.root, d), DIR_MODE);
    chmodSync(this.root, DIR_MODE);
    return this.hasher.digest();
  }
}

/**
 * Writes the planned files into `dir` (which must exist, be empty and be writable) and returns
 * the exportHash of what it wrote. Blobs come from one `git cat-file --batch` process and go
 * straight to disk one at a time, so memory holds one blob (at most 200000 bytes) plus a pipe
 * chunk (`ExportWriter`).
 */
export async function writeExport(dir: string, repoDir: string, files: readonly ExportedFile[]): Promise<string> {
  const writer = new ExportWriter(dir);
  // Every path is checked before anything is written.
  for (const f of files) safeJoin(resolve(dir), f.path);
  await readBlobs(
    repoDir,
    files.map((f) => f.oid),
    (i, data) => writer.write(files[i]!, data),
  );
  return writer.finish();
}

/**
 * Lists the pin, filters it and writes what it keeps into the folder `makeDir` makes, reading
 * each blob once (`publicBlobPass`): the bytes the filter reads for answer-key copies are the
 * bytes written, each checked against its id (`readBlobs`). The limits (contract R121) are
 * checked before `makeDir` on the files the filter may keep, a superset of what it keeps; when
 * that superset is over a limit, the exact list is made first (the blobs are then read twice) so
 * that what is refused is exactly what `inspectExport` refuses. On a failure after `makeDir`, the
 * folder is removed before the error is passed on.
 */
export async function writePinnedExport(
  source: ExportSource,
  makeDir: (keysByName: readonly AnswerKeyMatch[]) => Promise<string>,
  o: { repository?: string } = {},
): Promise<{ dir: string; plan: ExportPlan; exportHash: string }> {
  const entries = await pinnedEntries(source);
  const pass = await publicBlobPass(source.repoDir, entries, source);
  const candidates = pass.candidates.map(exportedFile);
  let overLimit = false;
  try {
    checkExportLimits(candidates, { ...source, ...o });
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    overLimit = true;
  }
  if (overLimit) {
    const plan = (await inspectExport(source, o)).plan;
    const dir = await makeDir(plan.answerKeys);
    return { dir, plan, exportHash: await removedOnFailure(dir, () => writeExport(dir, source.repoDir, plan.files)) };
  }
  const dir = await makeDir(pass.keysByName);
  return removedOnFailure(dir, async () => {
    const writer = new ExportWriter(dir);
    for (const f of candidates) safeJoin(resolve(dir), f.path);
    const plan = planOf(entries, await pass.run((i, data) => writer.write(candidates[i]!, data)));
    // What was written is what the filter keeps, file for file.
    if (plan.files.length !== writer.written.length || plan.files.some((f, i) => f.path !== writer.written[i])) {
      throw new Error(`export: the files written (${writer.written.length}) are not the files the filter keeps (${plan.files.length})`);
    }
    return { dir, plan, exportHash: writer.finish() };
  });
}

async function removedOnFailure<T>(dir: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    await removeTree(dir);
    throw err;
  }
}

/**
 * Makes a fresh export of `pin` for one attempt in a new `study-runner-export-<pid>-XXXXXX`
 * folder. On any failure the folder is removed before the error is passed on.
 */
export async function exportAtPin(opts: ExportOptions): Promise<ExportResult> {
  const { dir, plan, exportHash } = await writePinnedExport(opts, () => makeRunnerFolder("export", opts.parentDir));
  return { dir, ...plan, exportHash, labels: { run: opts.labels.run, attempt: opts.labels.attempt } };
}

/** Everything an export's plan is a function of; a field added to ExportSource must be added here (the type says so). */
function planKey(source: ExportSource): string {
  const fields: { [K in keyof Required<ExportSource>]: unknown } = {
    repoDir: resolve(source.repoDir),
    pin: source.pin,
    answerKeys: source.answerKeys ?? [],
    manifestPaths: source.manifestPaths ?? [],
    manifestBlobIds: source.manifestBlobIds ?? [],
    excludeInstructionFiles: source.excludeInstructionFiles ?? false,
    parentDir: resolve(source.parentDir ?? tmpdir()),
    limits: [source.limits?.maxFiles ?? DEFAULT_EXPORT_LIMITS.maxFiles, source.limits?.maxBytes ?? DEFAULT_EXPORT_LIMITS.maxBytes],
  };
  return JSON.stringify(fields);
}

/**
 * The exports of one run (a study, an adjudication), made by the run and passed down to its
 * attempts: each source (checkout, pin, filter, limits) is planned once per run, and every later
 * export of it writes that plan (contract R284). A commit id names immutable content, so the
 * plan's facts (the pin is a commit, contract R124; the tree's entries; what the public-path
 * filter keeps, contract R119, R120; the limits, contract R121) cannot change while the run lasts, and are not read
 * again: three to five git processes fewer per export. What stays per export, because it is the
 * export: a fresh folder, every planned blob read anew through one `git cat-file --batch`,
 * checked against its id and written from the bytes read, and the exportHash of what was written
 * (contract R118). The listing is the run's: an object store changed under the run (an alternates file, a
 * rewritten tree object) cannot change what a later export of that run holds, and a blob that no
 * longer reads as its id fails the export that reads it (contract R285). The first export of a source is
 * `exportAtPin`'s single-read pass; one whose plan is being made waits for it. A plan that failed
 * is not kept.
 */
export class RunExports {
  private readonly plans = new OncePerKey<ExportPlan>();

  /** A fresh export of `opts` in a new export folder, from the run's plan of its source. */
  async exportAtPin(opts: ExportOptions): Promise<ExportResult> {
    let first: Promise<ExportResult> | undefined;
    const plan = await this.plans.get(planKey(opts), () => {
      first = exportAtPin(opts);
      return first.then((made): ExportPlan => ({ files: made.files, excluded: made.excluded, answerKeys: made.answerKeys }));
    });
    if (first) return first;
    const dir = await makeRunnerFolder("export", opts.parentDir);
    const exportHash = await removedOnFailure(dir, () => writeExport(dir, opts.repoDir, plan.files));
    return { dir, ...plan, exportHash, labels: { run: opts.labels.run, attempt: opts.labels.attempt } };
  }

  /** The plan of `source` (`planExport`), made once per run. */
  plan(source: ExportSource): Promise<ExportPlan> {
    return this.plans.get(planKey(source), () => planExport(source));
  }
}

/**
 * Restores write permission on every directory (files need none to be unlinked), then removes.
 * A tree whose paths are longer than PATH_MAX (ENAMETOOLONG) is removed relative to open
 * directory handles instead (`removeDeep`).
 */
export async function removeTree(dir: string): Promise<void> {
  const restore = async (d: string): Promise<void> => {
    await chmod(d, 0o755);
    for (const entry of await readdir(d, { withFileTypes: true })) {
      if (entry.isDirectory()) await restore(join(d, entry.name));
    }
  };
  try {
    const st = await lstat(dir);
    if (!st.isDirectory()) throw new Error(`export: ${dir} is not a directory; not removing it`);
    await restore(dir);
    await rm(dir, { recursive: true, force: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return;
    if (code !== "ENAMETOOLONG") throw err;
    removeDeep(dir);
  }
}

/**
 * Removes an export folder made by `exportAtPin`; no error if it is already gone. Refuses a
 * folder whose name is not an export's, so a wrong argument cannot delete a checkout.
 */
export async function removeExport(dir: string): Promise<void> {
  if (!basename(dir).startsWith(EXPORT_PREFIX)) {
    throw new Error(`removeExport: ${dir} is not an export folder (its name must start with ${EXPORT_PREFIX})`);
  }
  await removeTree(dir);
}

/** Removes export folders left by runners that died (see src/util/orphans.ts). Returns the removed paths. */
export function reapOrphanExports(parentDir: string = tmpdir()): Promise<string[]> {
  return reapOrphanFolders("export", removeTree, parentDir);
}
