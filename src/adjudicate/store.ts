import { PrivateRecordStore, type OutputPathContext, type PrivateRecordHandle } from "../ledger/store.ts";
import { blindingSummary } from "./blinding.ts";
import { AdjudicationRecordSchema, type AdjudicationRecord } from "./schema.ts";

/**
 * The adjudication record follows the ledger's rules for a private file (it holds verdicts that
 * quote answers): a new path outside every checkout and the project, created exclusively, mode
 * 0600, validated before every write, replaced atomically (PrivateRecordStore).
 */
export const RECORD_STORE = new PrivateRecordStore({
  noun: "adjudication record",
  schema: AdjudicationRecordSchema,
  readFix: "check the path given to --adjudication",
  id: { field: "adjudicationId", of: "adjudication" },
  // Derived from the items on every write, so the figure can never disagree with them.
  derive: (record) => ({ ...record, blinding: blindingSummary(record.items) }),
});

/** What `createRecord` returns (its id is the adjudicationId). */
export type RecordHandle = PrivateRecordHandle;

export function createRecord(path: string, initial: AdjudicationRecord, context: OutputPathContext): Promise<RecordHandle> {
  return RECORD_STORE.create(path, initial, context);
}

export function writeRecord(handle: RecordHandle, record: AdjudicationRecord): Promise<void> {
  return RECORD_STORE.write(handle, record);
}

/** Read and validate a record; messages never quote its content (verdicts quote answers). */
export function readRecord(path: string): Promise<AdjudicationRecord> {
  return RECORD_STORE.read(path);
}
