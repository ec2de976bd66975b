import betaQuantile from "@stdlib/stats-base-dists-beta-quantile";
import { GUESSED_ARM, type AdjudicationRecord, type ArmGuess, type Item } from "./schema.ts";
import type { Arm } from "../terms/terms.ts";

/**
 * Blinding is measured, not assumed: once an item's verdict is recorded, a separate call of the
 * grader (its own container, prompt and schema) guesses which arm wrote the answer (a forced
 * choice); the verdict call itself never hears of the arms. A blind grader is right about half
 * the time, so the accuracy is shown with an exact binomial interval, and "blind" reads as an
 * interval that holds 0.5.
 */

export const BLINDING_METHOD =
  "share of arm-guess calls (asked after each verdict was recorded) whose guess of the arm was right, with the exact binomial (Clopper-Pearson) 95% interval; blind means the interval holds 0.5";

/**
 * The Clopper-Pearson interval of k successes in n trials: the beta quantiles
 * B(α/2; k, n-k+1) and B(1-α/2; k+1, n-k), with 0 and 1 at the ends.
 */
export function clopperPearson(k: number, n: number, level = 0.95): [number, number] {
  if (!Number.isInteger(n) || n < 1 || !Number.isInteger(k) || k < 0 || k > n) throw new RangeError(`need whole numbers 0 <= k <= n and n >= 1, got k=${k}, n=${n}`);
  const alpha = 1 - level;
  const lower = k === 0 ? 0 : betaQuantile(alpha / 2, k, n - k + 1);
  const upper = k === n ? 1 : betaQuantile(1 - alpha / 2, k + 1, n - k);
  return [lower, upper];
}

/** The item's record of the guess: what was guessed, the true arm, whether they agree, why there is none, and the call's run. */
export function armGuessOf(guess: ArmGuess | null, arm: Arm, run: NonNullable<Item["armGuess"]>["run"], reason: string | null = null): NonNullable<Item["armGuess"]> {
  return { guess, arm, correct: guess === null ? null : GUESSED_ARM[guess] === arm, reason: guess === null ? reason : null, run };
}

export function blindingSummary(items: readonly Pick<Item, "armGuess">[]): NonNullable<AdjudicationRecord["blinding"]> {
  // A call still open has neither guessed nor failed to.
  const withGuess = items.filter((i) => i.armGuess !== undefined && i.armGuess.run.phase === "settled");
  const guessed = withGuess.filter((i) => i.armGuess!.correct !== null);
  const correct = guessed.filter((i) => i.armGuess!.correct === true).length;
  const n = guessed.length;
  return {
    guesses: n,
    correct,
    missing: withGuess.length - n,
    accuracy: n === 0 ? null : correct / n,
    interval95: n === 0 ? null : clopperPearson(correct, n),
    method: BLINDING_METHOD,
  };
}
