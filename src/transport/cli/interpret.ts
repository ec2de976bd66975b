import { TranscriptReader, type TranscriptFacts } from "../../transcript/reader.ts";
import { classifyAttempt } from "../../transcript/classify.ts";
import { computeCost, type CostResult, type MessagePromptUsage } from "../../cost/compute.ts";
import type { RunFacts } from "../../ledger/schema.ts";
import type { AttemptStatus, Arm } from "../../terms/terms.ts";
import { expectedInitTools } from "../../claude/args.ts";
import type { ExpectedInit } from "../../claude/init-expectation.ts";
import { runFactsFrom } from "./record.ts";
import type { GatewayRecord } from "../../gateway/gateway.ts";

/**
 * What a finished CLI run means, from its transcript and how its container ended: the facts, the
 * cost check, the shared record fields and the status with its reason. The one interpretation of a
 * run: the container stage applies it as the run ends, and `ledger verify` applies it again to the
 * stored transcript, so the two cannot drift apart.
 */

export interface RunEnding {
  exitCode: number | null;
  /** Killed by the runner after the result event and its grace period: not a CLI failure. */
  killedAfterResult?: boolean;
  timedOut: boolean;
  truncated: boolean;
  /** The stdout bound that applied. */
  stdoutLimitBytes: number;
  oomKilled?: boolean;
  /** The tmpfs HOME was full when the CLI exited. */
  homeFull?: boolean;
  /** The run was stopped by a signal: failed, whatever the transcript says. */
  interruptedBy?: string;
  /**
   * A resumed session's earlier messages: its `modelUsage` covers the whole session while its
   * stream shows only this call's messages, so the per-message sums need them to add up.
   */
  priorMessageUsage?: readonly MessagePromptUsage[];
  /**
   * Why the host refused one of the run's requests before sending it because its worst-case cost
   * would pass the attempt's limit (the gateway's ceiling): the CLI saw an API error, the attempt
   * is over budget.
   */
  refusedByHost?: string;
}

export interface Interpretation {
  facts: TranscriptFacts;
  cost: CostResult;
  fields: Partial<RunFacts>;
  status: AttemptStatus;
  reason: string;
}

/**
 * A reader for a run of `arm` with `model` under the pinned version; the init tools are the arm's
 * unless given, and the whole init event is held to `init`, the measured init of this kind of run.
 */
export function runReader(arm: Arm, model: string, cliVersion: string | undefined, init: ExpectedInit, expectedTools: readonly string[] = expectedInitTools(arm)): TranscriptReader {
  return new TranscriptReader({ arm, model, expectedTools, cliVersion, init });
}

/** `facts` may carry setup problems found outside the transcript (the doc-bridge record). */
export function interpretRun(facts: TranscriptFacts, model: string, ending: RunEnding): Interpretation {
  const cost = computeCost({ ...facts, perMessageUsage: [...(ending.priorMessageUsage ?? []), ...facts.perMessageUsage], model });
  const fields = runFactsFrom(facts, cost);
  const done = (status: AttemptStatus, reason: string): Interpretation => ({ facts, cost, fields, status, reason });
  if (ending.interruptedBy !== undefined) return done("failed", `interrupted by ${ending.interruptedBy}`);
  const exitCode = ending.killedAfterResult ? 0 : ending.exitCode;
  const verdict = classifyAttempt({ facts, exitCode, timedOut: ending.timedOut, truncated: ending.truncated, stdoutLimitBytes: ending.stdoutLimitBytes, cost });
  if (verdict.status === "invalid-setup" && (fields.setupProblems ?? []).length === 0) fields.setupProblems = [verdict.reason];
  if (ending.refusedByHost !== undefined && verdict.status !== "invalid-setup") {
    return done("budget-exceeded", `the gateway refused a request before sending it: ${ending.refusedByHost}`);
  }
  if (verdict.status === "invalid-cost" && fields.costProblem === null) fields.costProblem = verdict.reason;
  if (verdict.status !== "completed" && ending.oomKilled) return done(verdict.status, `${verdict.reason} (the container was killed by its memory limit)`);
  if (ending.homeFull) {
    const bound = "the attempt's HOME (a size-bounded tmpfs) was full when the CLI exited";
    return verdict.status === "completed" ? done("failed", bound) : done(verdict.status, `${verdict.reason} (${bound})`);
  }
  return done(verdict.status, verdict.reason);
}

/** The reason of the gateway's budget refusal in this attempt, if it refused a request for its cost. */
export function gatewayBudgetRefusal(record: Pick<GatewayRecord, "budgetRefused" | "requests"> | undefined): string | undefined {
  if (!record?.budgetRefused) return undefined;
  return record.requests.find((r) => r.refused?.kind === "budget")?.refused?.reason ?? "its worst-case cost would pass the limit";
}
