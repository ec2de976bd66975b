import { SESSION_LEDGER_KIND, SessionLedgerSchema } from "./schema.ts";
import { checkLedger, parseRecordKind, type LedgerCheck } from "../ledger/check.ts";

/** True when the bytes are JSON of a session ledger (its own record kind beside the study ledger), valid or not. */
export function isSessionLedgerFile(bytes: Buffer): boolean {
  try {
    const json = JSON.parse(bytes.toString("utf8")) as unknown;
    return typeof json === "object" && json !== null && (json as { kind?: unknown }).kind === SESSION_LEDGER_KIND;
  } catch {
    return false;
  }
}

/**
 * `ledger check` of a session ledger: its schema (every harness event's fields, the events naming
 * its sessions, spent = calls' charges + open reservations, a foreign session_id only as
 * invalid-setup). A call left open is an interruption: `study-runner resume` settles it at its
 * reservation and ends that session, and continues the others.
 */
export function checkSessionLedger(json: Record<string, unknown>, result: LedgerCheck): LedgerCheck {
  const l = parseRecordKind(SessionLedgerSchema, json, result, "session ledger", (r) => r.runId);
  if (l === null) return result;
  const calls = l.sessions.flatMap((s) => s.calls);
  const open = calls.filter((c) => c.phase !== "settled");
  result.observations = { total: calls.length, settled: calls.length - open.length, open: open.length };
  const states = l.sessions.map((s) => `${s.taskId} ${s.state}`).join(", ");
  if (l.status === "running" || open.length > 0) {
    result.state = "interrupted";
    const named = l.sessions.flatMap((s) =>
      s.calls.filter((c) => c.phase !== "settled").map((c) => `session ${s.id} (${s.taskId}) call ${c.index} (phase ${c.phase}, ${c.reservationUsd} USD reserved)`),
    );
    const openText = named.length
      ? `open: ${named.join(", ")}, counted at the reservation; \`study-runner resume\` settles ${named.length === 1 ? "it" : "them"} (failed, the reservation charged) and exits 1`
      : "no call open";
    result.verdict = `interrupted: status ${l.status}; ${openText}; sessions: ${states}; spent ${l.budget.spentUsd} USD`;
  } else {
    result.state = "finished";
    result.verdict = `${l.status}: sessions: ${states}; ${l.events.length} events; spent ${l.budget.spentUsd} USD`;
  }
  return result;
}

/** `ledger check` of any private ledger the runner writes: a study ledger, or a session ledger. */
export function checkAnyLedger(path: string, bytes: Buffer): LedgerCheck {
  return checkLedger(path, bytes, { [SESSION_LEDGER_KIND]: checkSessionLedger });
}
