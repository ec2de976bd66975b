import type { Mode, PlannedAttempt } from "../plan/plan.ts";
import type { Ledger } from "../ledger/schema.ts";
import type { SettledDigest } from "../ledger/evidence.ts";
import { extrapolationCaveat, spendLabel, type SpendLabel } from "../cost/labels.ts";
import { pico, roundedUsd } from "../cost/money.ts";

/** What a study run's summary needs of its configuration (study and HTTP runs alike). */
export interface SummaryConfig {
  mode: Mode;
  plan: readonly PlannedAttempt[];
  /** Attempts of the full study, for the pilot's extrapolation. */
  fullPlanSize: number;
  model: string;
  capUsd: number;
}

export interface StudySummary {
  status: Ledger["status"];
  statusReason: string | null;
  mode: Mode;
  transport: Ledger["transport"];
  model: string;
  ledger: string;
  attempts: { planned: number; run: number; byStatus: Record<string, number> };
  usage: { inputTokens: number; outputTokens: number; cacheCreationInputTokens: number; cacheReadInputTokens: number; toolCalls: number };
  usageComplete: boolean;
  spentUsd: number;
  capUsd: number;
  cumulativeCapExceeded: boolean;
  extrapolatedFullRunUsd: number | null;
  extrapolationNote: string;
  /** What the USD figures and the token counts above are (an estimate; harness included). */
  spendLabel: SpendLabel;
  /** cli runs: the evidence digest of each settled state, as printed on stderr (contract R177). */
  evidenceDigests?: SettledDigest[];
  networkCalls?: never;
}

export function summarize(config: SummaryConfig, ledger: Ledger, handle: { path: string }): StudySummary {
  const byStatus: Record<string, number> = {};
  const usage = { inputTokens: 0, outputTokens: 0, cacheCreationInputTokens: 0, cacheReadInputTokens: 0, toolCalls: 0 };
  let usageComplete = ledger.observations.length > 0;
  for (const o of ledger.observations) {
    const key = o.status ?? "unsettled";
    byStatus[key] = (byStatus[key] ?? 0) + 1;
    usage.inputTokens += o.inputTokens ?? 0;
    usage.outputTokens += o.outputTokens ?? 0;
    usage.cacheCreationInputTokens += o.cacheCreationInputTokens ?? 0;
    usage.cacheReadInputTokens += o.cacheReadInputTokens ?? 0;
    usage.toolCalls += o.toolCalls;
    if (!o.usageComplete) usageComplete = false;
  }
  const pilotDone = config.mode === "pilot" && ledger.status === "awaiting-adjudication" && usageComplete;
  const factor = config.fullPlanSize / config.plan.length;
  return {
    status: ledger.status,
    statusReason: ledger.statusReason ?? null,
    mode: config.mode,
    transport: ledger.transport,
    model: config.model,
    ledger: handle.path,
    attempts: { planned: config.plan.length, run: ledger.observations.length, byStatus },
    usage,
    usageComplete,
    spentUsd: ledger.budget.spentUsd,
    capUsd: config.capUsd,
    cumulativeCapExceeded: ledger.budget.cumulativeCapExceeded,
    // Scaled and rounded once in pico-USD (contract R203).
    extrapolatedFullRunUsd: pilotDone ? roundedUsd((pico(ledger.budget.spentUsd) * BigInt(config.fullPlanSize)) / BigInt(config.plan.length), 6) : null,
    extrapolationNote: pilotDone
      ? `pilot spend x ${factor} (${config.fullPlanSize} full-run attempts / ${config.plan.length} pilot attempts); not an upper bound: other tasks may cost more; ${extrapolationCaveat(ledger.transport)}`
      : "no extrapolation: only a pilot that completed with complete usage is extrapolated",
    spendLabel: spendLabel(ledger.transport),
  };
}
