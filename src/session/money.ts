import { picoToUsd, sumUsd, usdToPico } from "../cost/money.ts";
import type { Session, SessionCall } from "./schema.ts";

/**
 * A session's money in integer pico-USD (src/cost/money.ts), like every other amount of the
 * runner: sums and differences are exact, and only the USD numbers the ledger records are
 * floating point.
 */

/** A session's spend: its calls' charges, an open call at its reservation. */
export function sessionSpentUsd(calls: readonly Pick<SessionCall, "chargedUsd" | "reservationUsd">[]): number {
  return sumUsd(calls.map((c) => c.chargedUsd ?? c.reservationUsd));
}

/**
 * A call's own share of a cumulative figure the CLI reports for the whole session (total_cost_usd,
 * or the list-price cost of modelUsage): this result's less the previous result's, never below 0.
 * Both are read to the nearest pico-USD: they are the CLI's own floating-point sums, whose noise
 * past the twelfth decimal (0.0004575000000000001) is not a pico-USD spent.
 */
export function callShareUsd(cumulativeUsd: number | null, previousUsd: number): number | null {
  if (cumulativeUsd === null) return null;
  const share = usdToPico(cumulativeUsd, "nearest") - usdToPico(previousUsd, "nearest");
  return picoToUsd(share > 0n ? share : 0n);
}

/** The session's calls reached its budget (their charges summed): no further call. */
export function budgetReached(s: Pick<Session, "spentUsd">, budgetUsd: number): boolean {
  return usdToPico(s.spentUsd, "ceil") >= usdToPico(budgetUsd, "floor");
}
