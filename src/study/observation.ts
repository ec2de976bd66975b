import type { Observation } from "../ledger/schema.ts";
import type { PlannedAttempt } from "../plan/plan.ts";
import type { TranscriptFacts } from "../transcript/reader.ts";
import { emptyRunFacts } from "../transport/cli/record.ts";
import type { Transport } from "../terms/terms.ts";

/** A fresh observation for a planned attempt whose budget is reserved and nothing has started. */
export function reservedObservation(
  a: PlannedAttempt,
  o: { transport: Transport; cliVersion: string | null; expectedCliVersion: string | null; attemptBudgetUsd: number | null; reservationUsd: number },
): Observation {
  return {
    index: a.index,
    task: a.taskId,
    scenario: a.scenario,
    arm: a.arm,
    repository: a.repository,
    pin: a.pin,
    repetition: a.repetition,
    transport: o.transport,
    cliVersion: o.cliVersion,
    expectedCliVersion: o.expectedCliVersion,
    attemptBudgetUsd: o.attemptBudgetUsd,
    ...emptyRunFacts(o.reservationUsd),
    mcpServers: null,
    permissionDenials: [],
    toolErrorsByName: {},
    answer: null,
    correctness: null,
    adjudication: "pending",
  };
}

/** What an observation records of a transcript beyond the shared run facts. */
export function observationExtras(facts: TranscriptFacts): Partial<Observation> {
  return {
    mcpServers: facts.initMcpServers?.map((s) => ({ ...s })) ?? null,
    permissionDenials: facts.permissionDenials.map((d) => ({ toolName: d.toolName, toolUseId: d.toolUseId ?? null })),
    toolErrorsByName: facts.toolErrorsByName,
    answer: facts.answer,
  };
}
