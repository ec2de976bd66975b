import { createHash } from "node:crypto";
import { closeSync, fsyncSync, openSync, writeSync } from "node:fs";
import { chmod, lstat, mkdir, readdir, readFile, stat } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
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

/** The names in `<privateFile>.transcripts/`, sorted; none when the folder does not exist. */
export async function transcriptNames(privateFile: string): Promise<string[]> {
  try {
    return (await readdir(transcriptDir(privateFile))).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
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

/** Reads a stored transcript; null when it is missing. Never prints its content. */
export async function readTranscriptFile(privateFile: string, index: number | string): Promise<{ path: string; bytes: Buffer; mode: number } | null> {
  const path = transcriptFile(privateFile, index);
  try {
    const [bytes, st] = await Promise.all([readFile(path), stat(path)]);
    return { path, bytes, mode: st.mode & 0o777 };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw err;
  }
}

/** The lines the runner's reader saw: the file's lines without the final newline's empty remainder. */
export function transcriptLines(bytes: Buffer): string[] {
  const lines = bytes.toString("utf8").split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines;
}
