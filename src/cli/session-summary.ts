import type { SessionLedger } from "../session/schema.ts";

/** Counts and states only: the questions and answers stay in the private ledger. */
export function sessionSummary(ledgerPath: string, ledger: SessionLedger) {
  return {
    ledger: ledgerPath,
    status: ledger.status,
    statusReason: ledger.statusReason ?? null,
    spentUsd: ledger.budget.spentUsd,
    sessions: ledger.sessions.map((s) => ({
      id: s.id,
      task: s.taskId,
      state: s.state,
      questions: s.questions.length,
      calls: s.calls.length,
      spentUsd: s.spentUsd,
      testExitCode: s.test?.exitCode ?? null,
    })),
  };
}
