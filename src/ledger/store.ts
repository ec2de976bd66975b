import { lstat, readFile, realpath, stat, unlink } from "node:fs/promises";
import type { z } from "zod";
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { interruptedLedgerProblem } from "./check.ts";
import { LedgerSchema, type Ledger } from "./schema.ts";
import { fsyncDirectory, NODE_FILES, writeFileAtomic, type FileLayer } from "../util/atomic-file.ts";
import { UsageError } from "../util/errors.ts";
import { formatIssues } from "../util/zod-errors.ts";
import { readJsonAs } from "../util/json-file.ts";

/** The ledger holds private answers: owner read/write only. */
export const LEDGER_MODE = 0o600;

/** Checkouts as plain paths, or as repository name -> path (the names then appear in messages). */
export type Checkouts = readonly string[] | ReadonlyMap<string, string>;

export interface OutputPathContext {
  checkouts: Checkouts;
  projectRoot: string;
}

/** What `createLedger` returns (its id is the runId). */
export type LedgerHandle = PrivateRecordHandle;

/** A ledger that does not match the schema: a runner bug, caught before anything is written. */
export class InvalidLedgerError extends Error {
  override readonly name = "InvalidLedgerError";
  constructor(
    message: string,
    readonly problems: readonly string[],
  ) {
    super(message);
  }
}

const article = (noun: string) => (/^[aeiou]/i.test(noun) ? "an" : "a");

function isInside(child: string, root: string): boolean {
  const rel = relative(root, child);
  return rel === "" || (rel !== ".." && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
}

async function realOrResolved(path: string): Promise<string> {
  try {
    return await realpath(path);
  } catch {
    return resolve(path);
  }
}

function errnoCode(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? String(err);
}

interface ResolvedTarget {
  /** realpath(parent) + basename: where the file really is. */
  real: string;
  problems: string[];
}

async function resolveTarget(path: string, context: OutputPathContext, noun = "ledger"): Promise<ResolvedTarget> {
  const fix = "choose a path outside every checkout and outside the project";
  if (path.trim() === "") return { real: "", problems: ["--output is empty; give a new file path, e.g. --output ~/study-ledgers/pilot.json"] };
  const lexical = resolve(path);
  const name = basename(lexical);
  if (lexical === dirname(lexical) || name === "" || name === "." || name === "..") {
    return { real: "", problems: [`--output ${path} does not name a file; give a new file path such as ${join(lexical, "ledger.json")}`] };
  }
  const problems: string[] = [];
  try {
    const existing = await lstat(lexical);
    // A study ledger a killed runner left open: name its open attempt and point to `ledger check` (contract R160).
    const interrupted = noun === "ledger" && existing.isFile() ? interruptedLedgerProblem(path, await readFile(lexical).catch(() => Buffer.alloc(0))) : null;
    problems.push(`--output ${path} already exists; ${article(noun)} ${noun} is never overwritten or reused: choose a new file name${interrupted ? `. ${interrupted}` : ""}`);
  } catch (err) {
    if (errnoCode(err) !== "ENOENT") problems.push(`--output ${path} cannot be checked (${errnoCode(err)}); choose a new file in an existing folder`);
  }
  const parent = dirname(lexical);
  let realParent: string;
  try {
    realParent = await realpath(parent);
    if (!(await stat(realParent)).isDirectory()) throw Object.assign(new Error("not a folder"), { code: "ENOTDIR" });
  } catch (err) {
    problems.push(`--output ${path}: its folder ${parent} does not exist or is not a folder (${errnoCode(err)}); create it first (mkdir -p ${parent})`);
    return { real: lexical, problems };
  }
  const real = join(realParent, name);
  const via = real === lexical ? "" : ` (it resolves to ${real})`;
  const places: Array<[string, string]> = [];
  const checkouts = context.checkouts;
  if (checkouts instanceof Map) {
    for (const [repo, root] of checkouts) places.push([`the checkout ${root} (root '${repo}')`, root]);
  } else {
    for (const root of checkouts as readonly string[]) places.push([`the checkout ${root}`, root]);
  }
  places.push([`the project ${context.projectRoot}`, context.projectRoot]);
  for (const [label, root] of places) {
    const realRoot = await realOrResolved(root);
    const lexicalRoot = resolve(root);
    // Both the written and the real location count: a symlinked folder into a checkout is refused,
    // and so is a path that merely looks like it is inside one.
    if ([real, lexical].some((p) => isInside(p, realRoot) || isInside(p, lexicalRoot))) {
      problems.push(`--output ${path} is inside ${label}${via}; ${fix}`);
    }
  }
  return { real, problems };
}

/**
 * Problems with `path` as the ledger location, empty when it is usable: it must not exist, its
 * folder must exist, and its real location must be outside every checkout and the project.
 */
export async function checkOutputPath(path: string, context: OutputPathContext, noun = "ledger"): Promise<string[]> {
  return (await resolveTarget(path, context, noun)).problems;
}

/** One kind of private record: what messages call it, its schema, and the field whose value names it. */
export interface PrivateRecordKind<S extends z.ZodType> {
  /** "ledger", "adjudication record", "session ledger". */
  noun: string;
  schema: S;
  /** How messages name the schema ("its schema" when undefined). */
  schemaName?: string;
  /** What to do when the file cannot be read, e.g. `check the path given to --adjudication`. */
  readFix: string;
  /** The field naming the record and what it names, e.g. runId of a run: a write of another record to its file is refused. */
  id: { field: keyof z.output<S> & string; of: string };
  /** Fields derived from the others on every write, so they can never disagree with them. */
  derive?: (record: z.output<S>) => z.output<S>;
}

/** What `create` returns; later writes go to the real path that was checked and created. */
export interface PrivateRecordHandle {
  readonly path: string;
  /** The value of the kind's id field in the created record. */
  readonly id: string;
}

/**
 * The store of one kind of private record (the ledger, the adjudication record, the session
 * ledger): created exclusively at a new path outside every checkout and the project, mode 0600,
 * validated before every write and replaced atomically, read back and validated with messages
 * that name the file and each field but never quote its content (it holds answers).
 */
export class PrivateRecordStore<S extends z.ZodType> {
  constructor(readonly kind: PrivateRecordKind<S>) {}

  /** The record's file text, refused (InvalidLedgerError, a runner bug) when it does not match the schema. */
  serialize(record: z.output<S>, path: string): { text: string; record: z.output<S> } {
    const parsed = this.kind.schema.safeParse(this.kind.derive ? this.kind.derive(record) : record);
    if (!parsed.success) {
      const problems = formatIssues(parsed.error.issues);
      const schema = this.kind.schemaName ?? "its schema";
      throw new InvalidLedgerError(`refusing to write the ${this.kind.noun} ${path}: it does not match ${schema} (a runner bug):\n  ${problems.join("\n  ")}`, problems);
    }
    return { text: `${JSON.stringify(parsed.data, null, 2)}\n`, record: parsed.data };
  }

  /**
   * Create the file exclusively (`wx`, so an existing file or a concurrent run is never
   * clobbered), mode 0600 whatever the umask, with `initial` as its content, fsync'd with its folder.
   */
  async create(path: string, initial: z.output<S>, context: OutputPathContext, files: FileLayer = NODE_FILES): Promise<PrivateRecordHandle> {
    const { real, problems } = await resolveTarget(path, context, this.kind.noun);
    if (problems.length) throw new UsageError(problems.join("\n"), problems);
    const { text, record } = this.serialize(initial, real);
    await createExclusive(path, real, text, this.kind.noun, files);
    return { path: real, id: this.idOf(record) };
  }

  /** Replace the file atomically (temp file, fsync, rename, fsync folder), after validating the record. */
  async write(handle: PrivateRecordHandle, record: z.output<S>, files: FileLayer = NODE_FILES): Promise<void> {
    const { text, record: parsed } = this.serialize(record, handle.path);
    const { field, of } = this.kind.id;
    if (this.idOf(parsed) !== handle.id) {
      throw new InvalidLedgerError(`refusing to write the ${this.kind.noun} ${handle.path}: ${field} '${this.idOf(parsed)}' is not the ${of} '${handle.id}' that created it`, [
        `${field}: differs from the created ${this.kind.noun}`,
      ]);
    }
    await writeFileAtomic(handle.path, text, { mode: LEDGER_MODE, files });
  }

  /** Read and validate a record, with the exact bytes read (the sha256 a record or report binds to is theirs). */
  readWithBytes(path: string): Promise<{ value: z.output<S>; bytes: Buffer }> {
    return readJsonAs(path, this.kind.schema, {
      name: `${this.kind.noun} ${path}`,
      readFix: this.kind.readFix,
      mismatch: `does not match ${this.kind.schemaName ?? "its schema"}`,
      written: "by-runner",
    });
  }

  async read(path: string): Promise<z.output<S>> {
    return (await this.readWithBytes(path)).value;
  }

  private idOf(record: z.output<S>): string {
    return String((record as Record<string, unknown>)[this.kind.id.field]);
  }
}

/** The study's ledger (contract: private, never overwritten, replaced atomically). */
export const LEDGER_STORE = new PrivateRecordStore({
  noun: "ledger",
  schema: LedgerSchema,
  schemaName: "the ledger schema",
  readFix: "check the path given to --ledger/--output",
  id: { field: "runId", of: "run" },
});

/** Create the ledger file (PrivateRecordStore.create). */
export function createLedger(path: string, initial: Ledger, context: OutputPathContext, files: FileLayer = NODE_FILES): Promise<LedgerHandle> {
  return LEDGER_STORE.create(path, initial, context, files);
}

/**
 * The ledger's rules for any other private file of the runner (e.g. the adjudication record):
 * a new path outside every checkout and the project, created exclusively, mode 0600, fsync'd
 * with its folder. `text` must already be validated. Returns the real path later atomic
 * writes (`writeFileAtomic(real, ..., { mode: LEDGER_MODE })`) must go to.
 */
export async function createPrivateFile(path: string, text: string, context: OutputPathContext, noun: string): Promise<string> {
  const { real, problems } = await resolveTarget(path, context, noun);
  if (problems.length) throw new UsageError(problems.join("\n"), problems);
  await createExclusive(path, real, text, noun);
  return real;
}

async function createExclusive(path: string, real: string, text: string, noun: string, files: FileLayer = NODE_FILES): Promise<void> {
  let handle;
  try {
    handle = await files.open(real, "wx", LEDGER_MODE);
  } catch (err) {
    if (errnoCode(err) === "EEXIST") {
      throw new UsageError(`--output ${path} already exists; ${article(noun)} ${noun} is never overwritten or reused: choose a new file name`);
    }
    throw err;
  }
  try {
    await handle.chmod(LEDGER_MODE);
    const mode = (await handle.stat()).mode & 0o777;
    if (mode !== LEDGER_MODE) throw new Error(`${noun} ${real} has mode ${mode.toString(8)} after chmod 600; refusing to write private answers to it`);
    await handle.writeFile(text);
    await handle.sync();
  } catch (err) {
    await handle.close().catch(() => undefined);
    await unlink(real).catch(() => undefined);
    throw err;
  }
  await handle.close();
  await fsyncDirectory(dirname(real), files);
  // The folder could have been swapped for a symlink between the check and the open.
  if ((await realpath(real)) !== real) {
    await unlink(real).catch(() => undefined);
    throw new UsageError(`--output ${path} moved while it was being created (its folder changed); choose a path in a folder nobody else modifies`);
  }
}

/** Replace the ledger atomically (PrivateRecordStore.write). */
export function writeLedger(handle: LedgerHandle, ledger: Ledger, files: FileLayer = NODE_FILES): Promise<void> {
  return LEDGER_STORE.write(handle, ledger, files);
}

/** Read and validate a ledger; the messages never quote the file's content (it holds answers). */
export function readLedger(path: string): Promise<Ledger> {
  return LEDGER_STORE.read(path);
}
