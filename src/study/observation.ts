import type { Observation } from "../ledger/schema.ts";
import type { PlannedAttempt } from "../plan/plan.ts";
import type { TranscriptFacts } from "../transcript/reader.ts";
import type { CostResult } from "../cost/compute.ts";
import type { Transport } from "../terms/terms.ts";

/** A fresh observation for a planned attempt whose budget is reserved and nothing has started. */
export function reservedObservation(a: PlannedAttempt, o: { transport: Transport; cliVersion: string | null; expectedCliVersion: string | null; attemptBudgetUsd: number | null; reservationUsd: number }): Observation {
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
    reservationUsd: o.reservationUsd,
    phase: "reserved",
    startedAt: null,
    model: null,
    tools: null,
    mcpServers: null,
    toolCallsByName: {},
    toolCalls: 0,
    permissionDenials: [],
    inputTokens: null,
    outputTokens: null,
    cacheCreationInputTokens: null,
    cacheReadInputTokens: null,
    numTurns: null,
    cliSubtype: null,
    isError: null,
    usageComplete: false,
    toolErrorsByName: {},
    cliReportedCostUsd: null,
    computedCostUsd: null,
    costBasis: null,
    setupProblems: [],
    costProblem: null,
    chargedUsd: null,
    wallTimeMs: null,
    status: null,
    answer: null,
    correctness: null,
    adjudication: "pending",
    exportHash: null,
    containerId: null,
  };
}

/**
 * Token counts: the sums over `modelUsage` when it is present, else the result's `usage`.
 * Measured on 2.1.296: on `error_max_budget_usd` the result's `usage` is all zeros while
 * `modelUsage` holds the real counts, and a zero would understate the attempt.
 */
export function tokenCounts(facts: TranscriptFacts) {
  if (!facts.modelUsage) {
    return { inputTokens: facts.inputTokens, outputTokens: facts.outputTokens, cacheCreationInputTokens: facts.cacheCreationInputTokens, cacheReadInputTokens: facts.cacheReadInputTokens };
  }
  const sum = (key: "inputTokens" | "outputTokens" | "cacheCreationInputTokens" | "cacheReadInputTokens") =>
    Object.values(facts.modelUsage!).reduce((n, m) => n + m[key], 0);
  return { inputTokens: sum("inputTokens"), outputTokens: sum("outputTokens"), cacheCreationInputTokens: sum("cacheCreationInputTokens"), cacheReadInputTokens: sum("cacheReadInputTokens") };
}

/** The transcript's facts and the cost check, in the ledger's field names. */
export function factsToObservation(facts: TranscriptFacts, cost: CostResult): Partial<Observation> {
  return {
    ...tokenCounts(facts),
    model: facts.initModel,
    tools: facts.initTools,
    mcpServers: facts.initMcpServers?.map((s) => ({ ...s })) ?? null,
    toolCallsByName: facts.toolCallsByName,
    toolCalls: facts.toolCalls,
    permissionDenials: facts.permissionDenials.map((d) => ({ toolName: d.toolName, toolUseId: d.toolUseId ?? null })),
    numTurns: facts.numTurns,
    cliSubtype: facts.cliSubtype,
    isError: facts.isError,
    usageComplete: facts.usageComplete,
    toolErrorsByName: facts.toolErrorsByName,
    cliReportedCostUsd: cost.reportedCostUsd,
    computedCostUsd: cost.computedCostUsd,
    costBasis: cost.costBasis ? { ...cost.costBasis } : null,
    setupProblems: facts.setupProblems,
    costProblem: cost.problems.length ? cost.problems.join("; ") : null,
    answer: facts.answer,
  };
}
