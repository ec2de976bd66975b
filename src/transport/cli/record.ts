import type { RunFacts } from "../../ledger/schema.ts";
import type { TranscriptFacts } from "../../transcript/reader.ts";
import type { CostResult } from "../../cost/compute.ts";

/** The shared record of a run whose budget is reserved and which has not started. */
export function emptyRunFacts(reservationUsd: number): RunFacts {
  return {
    phase: "reserved",
    reservationUsd,
    startedAt: null,
    containerId: null,
    exportHash: null,
    model: null,
    tools: null,
    toolCallsByName: {},
    toolCalls: 0,
    inputTokens: null,
    outputTokens: null,
    cacheCreationInputTokens: null,
    cacheReadInputTokens: null,
    numTurns: null,
    cliSubtype: null,
    isError: null,
    usageComplete: false,
    cliReportedCostUsd: null,
    computedCostUsd: null,
    costBasis: null,
    setupProblems: [],
    costProblem: null,
    wallTimeMs: null,
    status: null,
    chargedUsd: null,
  };
}

/**
 * Token counts: the sums over `modelUsage` when it is present, else the result's `usage`.
 * Measured on 2.1.296: on `error_max_budget_usd` the result's `usage` is all zeros while
 * `modelUsage` holds the real counts, and a zero would understate the run.
 */
export function tokenCounts(facts: TranscriptFacts) {
  if (!facts.modelUsage) {
    return { inputTokens: facts.inputTokens, outputTokens: facts.outputTokens, cacheCreationInputTokens: facts.cacheCreationInputTokens, cacheReadInputTokens: facts.cacheReadInputTokens };
  }
  const sum = (key: "inputTokens" | "outputTokens" | "cacheCreationInputTokens" | "cacheReadInputTokens") => Object.values(facts.modelUsage!).reduce((n, m) => n + m[key], 0);
  return { inputTokens: sum("inputTokens"), outputTokens: sum("outputTokens"), cacheCreationInputTokens: sum("cacheCreationInputTokens"), cacheReadInputTokens: sum("cacheReadInputTokens") };
}

/** The transcript's facts and the cost check in the shared record's field names. */
export function runFactsFrom(facts: TranscriptFacts, cost: CostResult): Partial<RunFacts> {
  return {
    ...tokenCounts(facts),
    model: facts.initModel,
    tools: facts.initTools,
    toolCallsByName: facts.toolCallsByName,
    toolCalls: facts.toolCalls,
    numTurns: facts.numTurns,
    cliSubtype: facts.cliSubtype,
    isError: facts.isError,
    usageComplete: facts.usageComplete,
    cliReportedCostUsd: cost.reportedCostUsd,
    computedCostUsd: cost.computedCostUsd,
    costBasis: cost.costBasis ? { ...cost.costBasis } : null,
    setupProblems: facts.setupProblems,
    costProblem: cost.problems.length ? cost.problems.join("; ") : null,
  };
}
