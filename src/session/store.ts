import { PrivateRecordStore, type OutputPathContext } from "../ledger/store.ts";
import { SessionLedgerSchema, type SessionLedger } from "./schema.ts";

/**
 * The session ledger follows the ledger's rules for a private file (PrivateRecordStore): a new
 * path outside every checkout and the project, created exclusively, mode 0600, validated before
 * every write, replaced atomically, read back without quoting its content.
 */
export const SESSION_LEDGER_STORE = new PrivateRecordStore({
  noun: "session ledger",
  schema: SessionLedgerSchema,
  readFix: "give the path --output named at the start",
  id: { field: "runId", of: "run" },
});

/** Creates the session ledger; returns the real path every later write goes to. */
export async function createSessionLedger(path: string, ledger: SessionLedger, context: OutputPathContext): Promise<string> {
  return (await SESSION_LEDGER_STORE.create(path, ledger, context)).path;
}

/** Replaces the session ledger at `path` (the real path createSessionLedger returned) atomically. */
export function writeSessionLedger(path: string, ledger: SessionLedger): Promise<void> {
  return SESSION_LEDGER_STORE.write({ path, id: ledger.runId }, ledger);
}

export function readSessionLedger(path: string): Promise<SessionLedger> {
  return SESSION_LEDGER_STORE.read(path);
}
