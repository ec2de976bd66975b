import { AdjudicationRecordSchema } from "../adjudicate/schema.ts";
import { checkLedger, parseRecordKind, type LedgerCheck } from "../ledger/check.ts";
import { LedgerSchema } from "../ledger/schema.ts";
import { checkSessionLedger } from "../session/check.ts";
import { SESSION_LEDGER_KIND, SessionLedgerSchema } from "../session/schema.ts";
import { ADJUDICATION_RECORD_INVARIANTS, applyInvariants, SESSION_LEDGER_INVARIANTS, STUDY_LEDGER_INVARIANTS } from "./invariants.ts";

/**
 * `study-runner ledger check`: any private record the runner writes (a study ledger, a session
 * ledger, an adjudication record), judged by its schema and then by the invariants of its kind
 * (src/verify/invariants.ts): what the file alone proves. `ledger verify` applies the same list.
 */

/** The invariants' problems make an otherwise valid record invalid, and the verdict says how many. */
function withInvariants(result: LedgerCheck, problems: readonly string[]): LedgerCheck {
  if (!result.valid || problems.length === 0) return result;
  result.problems.push(...problems);
  result.valid = false;
  result.state = "invalid";
  result.verdict = `invalid: ${result.problems.length} problem${result.problems.length === 1 ? "" : "s"} (${result.verdict})`;
  return result;
}

function checkRecord(json: Record<string, unknown>, result: LedgerCheck): LedgerCheck {
  const r = parseRecordKind(AdjudicationRecordSchema, json, result, "adjudication record", (record) => record.adjudicationId);
  if (r === null) return result;
  const runs = r.items.flatMap((i) => (i.run ? [i.run] : []));
  const open = r.items.filter((i) => i.run !== null && i.run.phase !== "settled");
  result.observations = { total: runs.length, settled: runs.length - open.length, open: open.length };
  result.openReservations = open.map((i) => ({ index: i.observationIndex, phase: i.run!.phase, reservationUsd: i.run!.reservationUsd }));
  result.openReservation = result.openReservations[0] ?? null;
  if (r.status === "running") {
    result.state = "interrupted";
    result.verdict = `interrupted: adjudication running; ${open.length} run(s) open, counted at their reservation; spent ${r.budget.spentUsd} USD`;
  } else {
    result.state = "finished";
    result.verdict = `${r.status}: ${r.items.length} of ${r.ledger.observations} items; spent ${r.budget.spentUsd} USD`;
  }
  return withInvariants(result, applyInvariants(ADJUDICATION_RECORD_INVARIANTS, r));
}

function checkSession(json: Record<string, unknown>, result: LedgerCheck): LedgerCheck {
  const checked = checkSessionLedger(json, result);
  const parsed = SessionLedgerSchema.safeParse(json);
  return parsed.success ? withInvariants(checked, applyInvariants(SESSION_LEDGER_INVARIANTS, parsed.data)) : checked;
}

/** `ledger check` of any private record: the schema of its kind, then its invariants. */
export function checkAnyLedger(path: string, bytes: Buffer): LedgerCheck {
  const result = checkLedger(path, bytes, { [SESSION_LEDGER_KIND]: checkSession, adjudication: checkRecord });
  if (!result.valid) return result;
  // A valid study ledger (the kinds above return their own result).
  const parsed = LedgerSchema.safeParse(JSON.parse(bytes.toString("utf8")));
  return parsed.success ? withInvariants(result, applyInvariants(STUDY_LEDGER_INVARIANTS, parsed.data)) : result;
}
