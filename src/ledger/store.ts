import { lstat, readFile, realpath, stat, unlink } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { interruptedLedgerProblem } from "./check.ts";
import { LedgerSchema, type Ledger } from "./schema.ts";
import { fsyncDirectory, NODE_FILES, writeFileAtomic, type FileLayer } from "../util/atomic-file.ts";
import { UsageError } from "../util/errors.ts";
import { formatIssues } from "../util/zod-errors.ts";

/** The ledger holds private answers: owner read/write only. */
export const LEDGER_MODE = 0o600;

/** Checkouts as plain paths, or as repository name -> path (the names then appear in messages). */
export type Checkouts = readonly string[] | ReadonlyMap<string, string>;

export interface OutputPathContext {
  checkouts: Checkouts;
  projectRoot: string;
}

/** What `createLedger` returns; later writes go to the real path that was checked and created. */
export interface LedgerHandle {
  readonly path: string;
  readonly runId: string;
}

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

function serialize(ledger: unknown, path: string): { text: string; ledger: Ledger } {
  const parsed = LedgerSchema.safeParse(ledger);
  if (!parsed.success) {
    const problems = formatIssues(parsed.error.issues);
    throw new InvalidLedgerError(`refusing to write the ledger ${path}: it does not match the ledger schema (a runner bug):\n  ${problems.join("\n  ")}`, problems);
  }
  return { text: `${JSON.stringify(parsed.data, null, 2)}\n`, ledger: parsed.data };
}

/**
 * Create the ledger file exclusively (`wx`, so an existing file or a concurrent run is never
 * clobbered), mode 0600 whatever the umask, with `initial` as its content, fsync'd with its folder.
 */
export async function createLedger(path: string, initial: Ledger, context: OutputPathContext, files: FileLayer = NODE_FILES): Promise<LedgerHandle> {
  const { real, problems } = await resolveTarget(path, context);
  if (problems.length) throw new UsageError(problems.join("\n"), problems);
  const { text, ledger } = serialize(initial, real);
  await createExclusive(path, real, text, "ledger", files);
  return { path: real, runId: ledger.runId };
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

/** Replace the ledger atomically (temp file, fsync, rename, fsync folder), after validating it. */
export async function writeLedger(handle: LedgerHandle, ledger: Ledger, files: FileLayer = NODE_FILES): Promise<void> {
  const { text, ledger: parsed } = serialize(ledger, handle.path);
  if (parsed.runId !== handle.runId) {
    throw new InvalidLedgerError(`refusing to write the ledger ${handle.path}: runId '${parsed.runId}' is not the run '${handle.runId}' that created it`, ["runId: differs from the created ledger"]);
  }
  await writeFileAtomic(handle.path, text, { mode: LEDGER_MODE, files });
}

/** Read and validate a ledger; the messages never quote the file's content (it holds answers). */
export async function readLedger(path: string): Promise<Ledger> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    throw new UsageError(`cannot read ledger ${path}: ${errnoCode(err)}; check the path given to --ledger/--output`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    // V8's JSON error quotes part of the input, which may be a private answer.
    throw new UsageError(`ledger ${path} is not valid JSON; it was not written by this runner or is damaged`);
  }
  const parsed = LedgerSchema.safeParse(json);
  if (!parsed.success) {
    const problems = formatIssues(parsed.error.issues);
    throw new UsageError(`ledger ${path} does not match the ledger schema:\n  ${problems.join("\n  ")}`, problems);
  }
  return parsed.data;
}
