import { readFile } from "node:fs/promises";
import { createPrivateFile, InvalidLedgerError, LEDGER_MODE, type OutputPathContext } from "../ledger/store.ts";
import { writeFileAtomic } from "../util/atomic-file.ts";
import { blindingSummary } from "./blinding.ts";
import { UsageError } from "../util/errors.ts";
import { formatIssues } from "../util/zod-errors.ts";
import { AdjudicationRecordSchema, type AdjudicationRecord } from "./schema.ts";

/**
 * The adjudication record follows the ledger's rules for a private file (it holds verdicts that
 * quote answers): a new path outside every checkout and the project, created exclusively, mode
 * 0600, validated before every write, replaced atomically.
 */

export interface RecordHandle {
  readonly path: string;
  readonly adjudicationId: string;
}

function serialize(record: AdjudicationRecord, path: string): { text: string; record: AdjudicationRecord } {
  // Derived from the items on every write, so the figure can never disagree with them.
  const parsed = AdjudicationRecordSchema.safeParse({ ...record, blinding: blindingSummary(record.items) });
  if (!parsed.success) {
    const problems = formatIssues(parsed.error.issues);
    throw new InvalidLedgerError(`refusing to write the adjudication record ${path}: it does not match its schema (a runner bug):\n  ${problems.join("\n  ")}`, problems);
  }
  return { text: `${JSON.stringify(parsed.data, null, 2)}\n`, record: parsed.data };
}

export async function createRecord(path: string, initial: AdjudicationRecord, context: OutputPathContext): Promise<RecordHandle> {
  const { text, record } = serialize(initial, path);
  const real = await createPrivateFile(path, text, context, "adjudication record");
  return { path: real, adjudicationId: record.adjudicationId };
}

export async function writeRecord(handle: RecordHandle, record: AdjudicationRecord): Promise<void> {
  const { text, record: parsed } = serialize(record, handle.path);
  if (parsed.adjudicationId !== handle.adjudicationId) {
    throw new InvalidLedgerError(`refusing to write ${handle.path}: adjudicationId '${parsed.adjudicationId}' is not the one that created it`, ["adjudicationId: differs"]);
  }
  await writeFileAtomic(handle.path, text, { mode: LEDGER_MODE });
}

/** Read and validate a record; messages never quote its content (verdicts quote answers). */
export async function readRecord(path: string): Promise<AdjudicationRecord> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    throw new UsageError(`cannot read adjudication record ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}; check the path given to --adjudication`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new UsageError(`adjudication record ${path} is not valid JSON; it was not written by this runner or is damaged`);
  }
  const parsed = AdjudicationRecordSchema.safeParse(json);
  if (!parsed.success) {
    const problems = formatIssues(parsed.error.issues);
    throw new UsageError(`adjudication record ${path} does not match its schema:\n  ${problems.join("\n  ")}`, problems);
  }
  return parsed.data;
}
