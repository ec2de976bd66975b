import { PICO_PER_MICRO, picoToUsd, usdToPico } from "../cost/money.ts";
import { INPUT_CEILING_SLACK_TOKENS } from "../terms/limits.ts";

/**
 * Per-call money of the Messages API transport (contract R29, R30). Prices are the
 * protocol's upper prices in USD per million tokens; amounts are exact integers (pico-USD)
 * inside, USD numbers outside, rounded up: the ledger's spend is never below the truth.
 */

export interface UpperPrices {
  inputUsdPerMtok: number;
  outputUsdPerMtok: number;
}

/** The protocol's output allowance per turn: `max_tokens` of every request. */
export const MAX_OUTPUT_TOKENS = 1024;
export { INPUT_CEILING_SLACK_TOKENS };

/**
 * A conservative input token ceiling for a request body: twice its UTF-8 bytes plus 8,192.
 * A token is at least one byte of text for every tokenizer the API uses, so the bytes alone
 * bound the prompt; the factor and the slack cover whatever the API adds around it.
 */
export function inputCeilingTokens(requestBytes: number): number {
  if (!Number.isSafeInteger(requestBytes) || requestBytes < 0) throw new RangeError(`request size must be a non-negative integer, got ${requestBytes}`);
  return 2 * requestBytes + INPUT_CEILING_SLACK_TOKENS;
}

const ceilDiv = (a: bigint, b: bigint) => (a + b - 1n) / b;

function picoPerMtok(usd: number, what: string): bigint {
  if (!Number.isFinite(usd) || usd <= 0) throw new RangeError(`the upper ${what} price must be a positive USD amount per million tokens, got ${usd}`);
  return usdToPico(usd, "ceil");
}

/** Cost in pico-USD of `input` and `output` tokens at the upper prices, rounded up. */
function costPico(input: number, output: number, prices: UpperPrices): bigint {
  for (const [name, n] of [
    ["input", input],
    ["output", output],
  ] as const) {
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`${name} tokens must be a non-negative integer, got ${n}`);
  }
  const sum = BigInt(input) * picoPerMtok(prices.inputUsdPerMtok, "input") + BigInt(output) * picoPerMtok(prices.outputUsdPerMtok, "output");
  return ceilDiv(sum, 1_000_000n);
}

/** The measured cost of one call at the upper prices, in USD (rounded up to 1e-12). */
export function usageCostUsd(usage: { inputTokens: number; outputTokens: number }, prices: UpperPrices): number {
  return picoToUsd(costPico(usage.inputTokens, usage.outputTokens, prices));
}

export interface CallCeiling {
  inputCeilingTokens: number;
  outputCeilingTokens: number;
  /** The ceiling's cost, rounded up to whole micro-USD (the budget module holds micro-USD). */
  reservationUsd: number;
}

/** What to reserve before a call whose body has `requestBytes` UTF-8 bytes. */
export function callCeiling(requestBytes: number, prices: UpperPrices): CallCeiling {
  const input = inputCeilingTokens(requestBytes);
  const pico = costPico(input, MAX_OUTPUT_TOKENS, prices);
  const micro = ceilDiv(pico, PICO_PER_MICRO);
  return { inputCeilingTokens: input, outputCeilingTokens: MAX_OUTPUT_TOKENS, reservationUsd: picoToUsd((micro === 0n ? 1n : micro) * PICO_PER_MICRO) };
}
