import { describe, expect, it } from "vitest";
import { callCeiling, inputCeilingTokens, MAX_OUTPUT_TOKENS, usageCostUsd } from "../../src/http/pricing.ts";

describe("http per-call pricing", () => {
  it("reserves twice the request's UTF-8 bytes plus 8,192 input tokens and the full 1,024-token output allowance", () => {
    expect(inputCeilingTokens(0)).toBe(8192);
    expect(inputCeilingTokens(2176)).toBe(2 * 2176 + 8192);
    const c = callCeiling(2176, { inputUsdPerMtok: 1, outputUsdPerMtok: 5 });
    expect(c).toEqual({ inputCeilingTokens: 12544, outputCeilingTokens: MAX_OUTPUT_TOKENS, reservationUsd: 0.017664 });
    expect(MAX_OUTPUT_TOKENS).toBe(1024);
  });

  it("rounds a reservation up to the next micro-USD, never down", () => {
    // 8194 x 0.3 + 1024 x 0.7 = 3174.2 micro-USD: held as 3175.
    expect(callCeiling(1, { inputUsdPerMtok: 0.3, outputUsdPerMtok: 0.7 }).reservationUsd).toBe(0.003175);
    // Exactly on a micro-USD: nothing added.
    expect(callCeiling(4, { inputUsdPerMtok: 1, outputUsdPerMtok: 1 }).reservationUsd).toBe((8200 + 1024) / 1e6);
  });

  it("prices measured usage exactly at the upper prices, rounded up to 1e-12 USD", () => {
    expect(usageCostUsd({ inputTokens: 1500, outputTokens: 40 }, { inputUsdPerMtok: 1, outputUsdPerMtok: 5 })).toBe(0.0017);
    expect(usageCostUsd({ inputTokens: 1, outputTokens: 0 }, { inputUsdPerMtok: 0.0000001, outputUsdPerMtok: 1 })).toBe(1e-12);
    expect(usageCostUsd({ inputTokens: 0, outputTokens: 0 }, { inputUsdPerMtok: 3, outputUsdPerMtok: 15 })).toBe(0);
  });

  it("refuses prices that are not positive and token counts that are not counts", () => {
    expect(() => callCeiling(10, { inputUsdPerMtok: 0, outputUsdPerMtok: 5 })).toThrow(/upper input price/);
    expect(() => callCeiling(10, { inputUsdPerMtok: 1, outputUsdPerMtok: Number.NaN })).toThrow(/upper output price/);
    expect(() => usageCostUsd({ inputTokens: -1, outputTokens: 0 }, { inputUsdPerMtok: 1, outputUsdPerMtok: 1 })).toThrow(/input tokens/);
    expect(() => inputCeilingTokens(1.5)).toThrow(RangeError);
  });
});
