import type { Ledger } from "../ledger/schema.ts";
import type { AdjudicationRecord } from "./schema.ts";

/**
 * The record must be this ledger's (contract R93): its run id, its protocol hash and the sha256 of
 * the ledger's bytes, and each item bound to an observation the ledger holds. One check for
 * `report` (which refuses) and `ledger verify --adjudication` (which names each problem).
 */
export function checkBinding(ledger: Ledger, ledgerSha256: string, record: AdjudicationRecord): string[] {
  const problems: string[] = [];
  if (record.ledger.runId !== ledger.runId) problems.push(`the adjudication record is of run ${record.ledger.runId}, not of this ledger's run ${ledger.runId}`);
  if (record.ledger.protocolHash !== ledger.protocol.protocolHash) problems.push("the adjudication record's protocol hash differs from the ledger's");
  if (record.ledger.sha256 !== ledgerSha256) problems.push("the ledger changed after it was adjudicated (its sha256 differs from the one the record binds to); adjudicate it again");
  for (const item of record.items) {
    const o = ledger.observations[item.observationIndex];
    if (!o || o.task !== item.task || o.scenario !== item.scenario || o.repetition !== item.repetition) {
      problems.push(
        `adjudication item ${item.itemId} is bound to observation ${item.observationIndex} (${item.task}, ${item.scenario}, repetition ${item.repetition}), which the ledger does not hold`,
      );
    }
  }
  return problems;
}
