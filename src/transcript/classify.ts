import { formatByteBound } from "../terms/limits.ts";
import type { AttemptStatus } from "../terms/terms.ts";
import type { SetupProblemCode, TranscriptFacts } from "./reader.ts";

export interface AttemptClassificationInput {
  facts: TranscriptFacts;
  /** `null` when the process was killed by a signal. */
  exitCode: number | null;
  timedOut: boolean;
  /** stdout reached its bound and was cut. */
  truncated: boolean;
  /** The stdout bound this attempt ran under, so the reason names the one that cut it. */
  stdoutLimitBytes: number;
  /** The cost check's problems (`computeCost(...).problems`). */
  cost: { problems: readonly string[] };
}

export interface AttemptClassification {
  status: AttemptStatus;
  /** Why, in one line; never holds the answer. */
  reason: string;
}

/**
 * Problems that killing the process (timeout) or cutting stdout (its bound) causes by
 * itself: the result never arrives, and the line being written when it stopped is cut short.
 */
const INTERRUPTION_PROBLEMS: ReadonlySet<SetupProblemCode> = new Set(["no-result", "last-line-not-json"]);

/**
 * The status of one attempt. Precedence (contract R41: setup is checked before cost):
 * invalid-setup, timed-out, failed (output cut), invalid-cost (also: usage incomplete),
 * budget-exceeded, failed, completed.
 *
 * A timed-out or truncated transcript usually ends without its result and with a cut last
 * line. Those two problems are what the kill or the bound did, not a broken setup, so alone
 * they do not make it `invalid-setup`: a timeout is timed-out and truncated output is failed
 * (contract R44). Any other setup problem (wrong model or tools, a
 * denial, a garbled earlier line, ...) was there before the kill and still wins.
 */
export function classifyAttempt(input: AttemptClassificationInput): AttemptClassification {
  const { facts, exitCode, timedOut, truncated, stdoutLimitBytes, cost } = input;
  const interrupted = timedOut || truncated;
  // Killed before it wrote anything (e.g. while the CLI still connected to its MCP servers):
  // the missing init is the kill's doing too, as long as nothing but a cut line was written.
  const killedBeforeInit = interrupted && facts.lines <= 1;
  const setupCodes = facts.setupProblemCodes.filter((c) => !(interrupted && INTERRUPTION_PROBLEMS.has(c)) && !(killedBeforeInit && c === "no-init"));
  if (setupCodes.length > 0) {
    return { status: "invalid-setup", reason: facts.setupProblems[0] ?? `setup problem ${setupCodes[0]}` };
  }
  if (timedOut) return { status: "timed-out", reason: "the attempt reached its time limit and was killed" };
  if (truncated) return { status: "failed", reason: `stdout reached the ${formatByteBound(stdoutLimitBytes)} bound and was cut` };
  // Measured on 2.1.296 (docs/claude-cli-observations.md, "Errors from the API"): an API error
  // before any answer ends with is_error, total_cost_usd 0 and an empty modelUsage. The contract
  // calls such an error failed (R43), with usage incomplete and the reservation still charged; it is
  // not a cost the CLI got wrong. Any usage or non-zero cost keeps the cost check below.
  if (facts.resultSeen && facts.isError === true && facts.reportedCostUsd === 0 && facts.modelUsage !== null && Object.keys(facts.modelUsage).length === 0) {
    return { status: "failed", reason: "the CLI ended with an error before any usage was reported (is_error, empty modelUsage)" };
  }
  if (cost.problems.length > 0) return { status: "invalid-cost", reason: cost.problems[0]! };
  // The ledger's token counts come from the result's usage; a missing count is never a zero.
  if (facts.resultSeen && !facts.usageComplete) return { status: "invalid-cost", reason: "the result's usage or modelUsage is missing or malformed" };
  if (facts.cliSubtype === "error_max_budget_usd") {
    return { status: "budget-exceeded", reason: "the CLI stopped at --max-budget-usd (error_max_budget_usd)" };
  }
  if (!facts.resultSeen) return { status: "failed", reason: "no result event" };
  if (facts.cliSubtype !== "success") return { status: "failed", reason: `result subtype ${JSON.stringify(facts.cliSubtype)}` };
  if (facts.isError !== false) return { status: "failed", reason: "the result has is_error: true" };
  if (exitCode !== 0) return { status: "failed", reason: exitCode === null ? "killed by a signal" : `exit code ${exitCode}` };
  // Completed means an answer returned (contract R42), so a success without one is not it.
  if (facts.answer === null) return { status: "failed", reason: "the result has no answer text" };
  return { status: "completed", reason: "success" };
}
