import { createHash } from "node:crypto";
import { closeSync, constants, fsyncSync, openSync, writeSync, type Stats } from "node:fs";
import { chmod, lstat, mkdir, open, readdir } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { STDOUT_LIMIT_BYTES } from "../terms/limits.ts";
import { fsyncDirectory } from "../util/atomic-file.ts";
import { LEDGER_MODE } from "./store.ts";

/**
 * The raw stream-json of every attempt, kept beside its ledger (or adjudication record) so that
 * anyone can read it again with the runner's rules (`study-runner ledger verify`). Transcripts
 * hold answers and tool inputs, so they follow the ledger's privacy rules: a folder created
 * exclusively next to the private file (which was itself checked to be outside every checkout
 * and the project), mode 700, each file created exclusively with mode 600. The ledger records the
 * sha256 of each file's bytes, so an edit, a truncation or a swap is visible.
 */

export const TRANSCRIPT_DIR_MODE = 0o700;

/** `<ledger>.transcripts/`: beside the private file, so it is as private as that file's place. */
export function transcriptDir(privateFile: string): string {
  return join(dirname(privateFile), `${basename(privateFile)}.transcripts`);
}

/**
 * The names a transcripts folder may hold: an observation's or adjudicator run's `NNNN.jsonl`, a
 * session call's `sNNNN-cNNNN.jsonl` (transcriptFile, sessionCallTranscript).
 */
export const TRANSCRIPT_NAME = /^(?:[0-9]{4,}|s[0-9]{4,}-c[0-9]{4,})\.jsonl$/;

/**
 * The most bytes a kept transcript can hold: the stdout bound, each byte written again as at most
 * three (a byte that is not UTF-8 becomes U+FFFD), and the last line's newline.
 */
export const TRANSCRIPT_MAX_BYTES = 3 * STDOUT_LIMIT_BYTES + 1;

/** What the evidence reader found at a path: the file's bytes, nothing, or why it was not read. */
export type EvidenceRead = { kind: "file"; path: string; bytes: Buffer; mode: number } | { kind: "missing"; path: string } | { kind: "refused"; path: string; problem: string };

function fileKind(st: Stats): string {
  if (st.isDirectory()) return "a folder";
  if (st.isFIFO()) return "a FIFO";
  if (st.isSocket()) return "a socket";
  if (st.isCharacterDevice() || st.isBlockDevice()) return "a device";
  if (st.isSymbolicLink()) return "a symbolic link";
  return "not a regular file";
}

/**
 * The one reader of evidence files (the transcripts beside a ledger or a record, and the private
 * files a report's digest covers), each read as untrusted (contract R183): opened without
 * blocking (a FIFO would block an open for reading) and, unless `followLinks`, without following
 * a link; then fstat on the open file: only a regular file of at most `maxBytes` is read, and no
 * more than that is read even when it grows meanwhile. Anything else is refused with a problem
 * that names what it is; it never throws for what the path holds.
 */
export async function readEvidenceFile(path: string, o: { maxBytes: number; followLinks?: boolean }): Promise<EvidenceRead> {
  const flags = constants.O_RDONLY | constants.O_NONBLOCK | (o.followLinks ? 0 : constants.O_NOFOLLOW);
  let handle;
  try {
    handle = await open(path, flags);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return { kind: "missing", path };
    if (code === "ELOOP") return { kind: "refused", path, problem: "is a symbolic link; evidence is never read through a link" };
    // A socket cannot be opened (ENXIO); anything else is named by its code.
    if (code === "ENXIO") return { kind: "refused", path, problem: "is a socket, not a regular file" };
    return { kind: "refused", path, problem: `cannot be opened (${code ?? "unknown error"})` };
  }
  try {
    const st = await handle.stat();
    if (!st.isFile()) return { kind: "refused", path, problem: `is ${fileKind(st)}, not a regular file` };
    if (st.size > o.maxBytes) return { kind: "refused", path, problem: `is ${st.size} bytes, above the bound of ${o.maxBytes} bytes` };
    // One byte past the bound tells a file that grew since the fstat.
    const buffer = Buffer.alloc(Math.min(st.size, o.maxBytes) + 1);
    let length = 0;
    for (;;) {
      if (length === buffer.length) return { kind: "refused", path, problem: `grew past the bound of ${o.maxBytes} bytes while it was read` };
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
      if (bytesRead === 0) break;
      length += bytesRead;
      if (length > o.maxBytes) return { kind: "refused", path, problem: `grew past the bound of ${o.maxBytes} bytes while it was read` };
    }
    return { kind: "file", path, bytes: buffer.subarray(0, length), mode: st.mode & 0o777 };
  } catch (err) {
    return { kind: "refused", path, problem: `cannot be read (${(err as NodeJS.ErrnoException).code ?? "unknown error"})` };
  } finally {
    await handle.close();
  }
}

/**
 * What `<privateFile>.transcripts/` holds, read as untrusted: the names a transcript may have,
 * sorted (their files are read with readEvidenceFile), and a problem for every other entry and
 * for a folder that is not one (a link, a file). No names when the folder does not exist.
 */
export async function transcriptNames(privateFile: string): Promise<{ names: string[]; problems: string[] }> {
  const dir = transcriptDir(privateFile);
  let st: Stats;
  try {
    st = await lstat(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return { names: [], problems: [] };
    return { names: [], problems: [`${dir}: cannot be read (${(err as NodeJS.ErrnoException).code ?? "unknown error"})`] };
  }
  if (!st.isDirectory()) return { names: [], problems: [`${dir}: is ${fileKind(st)}, not the transcripts folder the runner makes; its contents are not read`] };
  let names: string[];
  try {
    names = (await readdir(dir)).sort();
  } catch (err) {
    return { names: [], problems: [`${dir}: cannot be listed (${(err as NodeJS.ErrnoException).code ?? "unknown error"})`] };
  }
  const problems = names
    .filter((n) => !TRANSCRIPT_NAME.test(n))
    .map((n) => `${dir}/${JSON.stringify(n).slice(1, -1)}: is not a transcript's name (NNNN.jsonl or sNNNN-cNNNN.jsonl); it was not made by the runner`);
  return { names: names.filter((n) => TRANSCRIPT_NAME.test(n)), problems };
}

/**
 * One file per observation (or adjudication item), named by its 0-based index; a session call's
 * file is named by its session and call (sessionCallTranscript).
 */
export function transcriptFile(privateFile: string, index: number | string): string {
  return join(transcriptDir(privateFile), `${typeof index === "number" ? String(index).padStart(4, "0") : index}.jsonl`);
}

/** The stem of a session call's transcript: `s0001-c0002` for call 2 of the ledger's second session. */
export function sessionCallTranscript(sessionIndex: number, callIndex: number): string {
  return `s${String(sessionIndex).padStart(4, "0")}-c${String(callIndex).padStart(4, "0")}`;
}

export function sha256Hex(bytes: string | Buffer): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Writes one transcript: lines as they arrive (synchronously, from the stdout line callback). */
export class TranscriptWriter {
  private fd: number | null;
  private readonly hash = createHash("sha256");
  private digest: string | null = null;

  constructor(readonly path: string) {
    // `wx`: an existing transcript is never overwritten (a second run on the same ledger is a bug).
    this.fd = openSync(path, "wx", LEDGER_MODE);
  }

  pushLine(line: string): void {
    if (this.fd === null) throw new Error(`transcript ${this.path} is already finished`);
    const bytes = Buffer.from(`${line}\n`, "utf8");
    writeSync(this.fd, bytes);
    this.hash.update(bytes);
  }

  /** Flushes and closes the file; returns the sha256 of its bytes. Safe to call twice. */
  finish(): string {
    if (this.fd !== null) {
      fsyncSync(this.fd);
      closeSync(this.fd);
      this.fd = null;
      this.digest = this.hash.digest("hex");
    }
    return this.digest!;
  }
}

export class TranscriptStore {
  private constructor(
    readonly dir: string,
    private readonly privateFile: string,
  ) {}

  /**
   * Creates `<privateFile>.transcripts/` exclusively (mode 700). `privateFile` must be the real
   * path the ledger or record was created at (`LedgerHandle.path`, `RecordHandle.path`).
   */
  static async create(privateFile: string): Promise<TranscriptStore> {
    const dir = transcriptDir(privateFile);
    try {
      await mkdir(dir, { mode: TRANSCRIPT_DIR_MODE });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "EEXIST") throw new Error(`${dir} already exists; transcripts are never mixed between runs: remove it or choose a new ledger path`);
      throw err;
    }
    await chmod(dir, TRANSCRIPT_DIR_MODE);
    if (!(await lstat(dir)).isDirectory()) throw new Error(`${dir} is not a folder after mkdir`);
    await fsyncDirectory(dirname(dir));
    return new TranscriptStore(dir, privateFile);
  }

  /**
   * The store of a record whose folder already exists (a session ledger's later passes); created
   * when it does not (a session ledger written before sessions kept transcripts).
   */
  static async openOrCreate(privateFile: string): Promise<TranscriptStore> {
    const dir = transcriptDir(privateFile);
    const st = await lstat(dir).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return null;
      throw err;
    });
    if (st === null) return TranscriptStore.create(privateFile);
    if (!st.isDirectory() || (st.mode & 0o777) !== TRANSCRIPT_DIR_MODE) throw new Error(`${dir} is not a private folder (mode 700); it was not made by this runner`);
    return new TranscriptStore(dir, privateFile);
  }

  begin(index: number | string): TranscriptWriter {
    return new TranscriptWriter(transcriptFile(this.privateFile, index));
  }
}

/** Reads a stored transcript with the evidence reader (readEvidenceFile); never prints its content. */
export function readTranscriptFile(privateFile: string, index: number | string): Promise<EvidenceRead> {
  return readEvidenceFile(transcriptFile(privateFile, index), { maxBytes: TRANSCRIPT_MAX_BYTES });
}

/** The lines the runner's reader saw: the file's lines without the final newline's empty remainder. */
export function transcriptLines(bytes: Buffer): string[] {
  const lines = bytes.toString("utf8").split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines;
}
