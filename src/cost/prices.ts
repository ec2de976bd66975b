/**
 * The CLI's own list prices (its `costBasis: "list"`), USD per million tokens. Measured on
 * Claude Code 2.1.296 by returning fixed usage from a scripted Messages API and reading
 * `total_cost_usd` (facts: "Its own price table"). Re-measure when the CLI pin moves.
 *
 * Only rows the facts fill completely are here. `claude-sonnet-5` (1M in + 1M out = 12.00 USD)
 * and `claude-haiku-4-5` (1M in = 1.00 USD) were seen, but neither the input/output split,
 * nor cache rates, nor tiers were measured; a guessed row would let an unverified cost pass,
 * so those models are missing and their cost is invalid.
 */

export interface TierPrices {
  input: number;
  output: number;
  cacheRead: number;
  /** Cache writes with a 5-minute TTL (1.25x input). */
  cacheWrite5m: number;
  /** Cache writes with a 1-hour TTL (2x input). */
  cacheWrite1h: number;
}

export interface ModelPrices {
  /** Prompt (input + cache read + cache write) of at most `TIER_THRESHOLD_TOKENS`. */
  tier1: TierPrices;
  /** Prompt above `TIER_THRESHOLD_TOKENS`. */
  tier2: TierPrices;
}

/** Measured: a 100,000-token prompt is first tier, 100,001 is second tier. */
export const TIER_THRESHOLD_TOKENS = 100_000;

export const CLI_PRICES: Readonly<Record<string, Readonly<ModelPrices>>> = Object.freeze({
  "claude-haiku-5-5": Object.freeze({
    tier1: Object.freeze({ input: 0.1, output: 0.5, cacheRead: 0.01, cacheWrite5m: 0.125, cacheWrite1h: 0.2 }),
    tier2: Object.freeze({ input: 0.5, output: 2.5, cacheRead: 0.05, cacheWrite5m: 0.625, cacheWrite1h: 1.0 }),
  }),
});

/** The row for `model`, looked up as an own key only (never `constructor` or `__proto__`). */
export function pricesFor(model: string): Readonly<ModelPrices> | undefined {
  return Object.hasOwn(CLI_PRICES, model) ? CLI_PRICES[model] : undefined;
}
