import { PICO_PER_MICRO, picoToUsd, usdToPico } from "../../cost/money.ts";
import { cacheWriteTokens, requestTokenBound, type MeteredUsage } from "../../cost/usage.ts";

/**
 * Per-call money of the Messages API transport (contract R29, R30). Prices are the
 * protocol's upper prices in USD per million tokens; amounts are exact integers (pico-USD)
 * inside, USD numbers outside, rounded up: the ledger's spend is never below the truth.
 * The token bound is the gateway's (`requestTokenBound`); only the prices are this transport's.
 */

export interface UpperPrices {
  inputUsdPerMtok: number;
  outputUsdPerMtok: number;
}

/** The protocol's output allowance per turn: `max_tokens` of every request. */
export const MAX_OUTPUT_TOKENS = 1024;

/**
 * A cache write of any TTL is priced at twice the upper input price: the 1-hour rate of the
 * contract's TTL rule (contract R55), the dearest kind of prompt token, so no split is needed.
 */
const CACHE_WRITE_INPUT_MULTIPLIER = 2n;

/** The input ceiling of a request body: every prompt token (input, cache read, cache write) it can bring. */
export function inputCeilingTokens(requestBytes: number): number {
  return requestTokenBound(requestBytes, MAX_OUTPUT_TOKENS).promptTokens;
}

const ceilDiv = (a: bigint, b: bigint) => (a + b - 1n) / b;

function picoPerMtok(usd: number, what: string): bigint {
  if (!Number.isFinite(usd) || usd <= 0) throw new RangeError(`the upper ${what} price must be a positive USD amount per million tokens, got ${usd}`);
  return usdToPico(usd, "ceil");
}

function tokenCount(name: string, n: number): bigint {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`${name} tokens must be a non-negative integer, got ${n}`);
  return BigInt(n);
}

/** Cost in pico-USD of prompt tokens priced as input (`input`), cache writes and output at the upper prices, rounded up. */
function costPico(t: { input: number; cacheWrite: number; output: number }, prices: UpperPrices): bigint {
  const inputRate = picoPerMtok(prices.inputUsdPerMtok, "input");
  const sum =
    tokenCount("input", t.input) * inputRate +
    tokenCount("cache-write", t.cacheWrite) * inputRate * CACHE_WRITE_INPUT_MULTIPLIER +
    tokenCount("output", t.output) * picoPerMtok(prices.outputUsdPerMtok, "output");
  return ceilDiv(sum, 1_000_000n);
}

/**
 * The measured cost of one call at the upper prices, in USD (rounded up to 1e-12). The request
 * asks for no caching, but cache tokens a reply reports are still priced: reads at the upper input
 * price (a read costs less than an input token in every list price), writes at twice it.
 */
export function usageCostUsd(usage: MeteredUsage, prices: UpperPrices): number {
  const input = usage.inputTokens + usage.cacheReadInputTokens;
  return picoToUsd(costPico({ input, cacheWrite: cacheWriteTokens(usage), output: usage.outputTokens }, prices));
}

export interface CallCeiling {
  /** Every prompt token the request can bring (input, cache read and cache write). */
  inputCeilingTokens: number;
  outputCeilingTokens: number;
  /** The ceiling's cost, rounded up to whole micro-USD (the budget module holds micro-USD). */
  reservationUsd: number;
}

/**
 * What to reserve before a call whose body has `requestBytes` UTF-8 bytes: the gateway's token
 * bound for the protocol's `max_tokens`, every prompt token at the upper input price (the request
 * asks for no caching, so the API reads its whole prompt as input) and the output at the upper
 * output price, with no tier (the protocol's prices are already its upper ones).
 */
export function callCeiling(requestBytes: number, prices: UpperPrices): CallCeiling {
  const bound = requestTokenBound(requestBytes, MAX_OUTPUT_TOKENS);
  const pico = costPico({ input: bound.promptTokens, cacheWrite: 0, output: bound.outputTokens }, prices);
  const micro = ceilDiv(pico, PICO_PER_MICRO);
  return { inputCeilingTokens: bound.promptTokens, outputCeilingTokens: bound.outputTokens, reservationUsd: picoToUsd((micro === 0n ? 1n : micro) * PICO_PER_MICRO) };
}
