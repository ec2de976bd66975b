import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { requestBound } from "../../src/gateway/meter.ts";
import { callCeiling, inputCeilingTokens, MAX_OUTPUT_TOKENS, usageCostUsd } from "../../src/transport/http/pricing.ts";

/** A reply's usage without cache tokens. */
const plain = (inputTokens: number, outputTokens: number) => ({ inputTokens, outputTokens, cacheReadInputTokens: 0, cacheWrite5mInputTokens: 0, cacheWrite1hInputTokens: 0 });

/** `tokens` x `milliUsdPerMtok` / 1000 USD per million tokens, in micro-USD, rounded up. */
const microUp = (terms: Array<[number, number]>) => {
  const thousandths = terms.reduce((sum, [tokens, milli]) => sum + BigInt(tokens) * BigInt(milli), 0n);
  return (thousandths + 999n) / 1000n;
};

describe("http per-call pricing", () => {
  it("reserves the request's UTF-8 bytes plus 8,192 prompt tokens and the full 1,024-token output allowance", () => {
    expect(inputCeilingTokens(0)).toBe(8192);
    expect(inputCeilingTokens(2176)).toBe(2176 + 8192);
    const c = callCeiling(2176, { inputUsdPerMtok: 1, outputUsdPerMtok: 5 });
    expect(c).toEqual({ inputCeilingTokens: 2176 + 8192, outputCeilingTokens: MAX_OUTPUT_TOKENS, reservationUsd: ((2176 + 8192) * 1 + 1024 * 5) / 1e6 });
    expect(MAX_OUTPUT_TOKENS).toBe(1024);
  });

  it("rounds a reservation up to the next micro-USD, never down", () => {
    // (1 + 8192) x 0.3 + 1024 x 0.7 = 3174.7 micro-USD: held as 3175.
    const held = microUp([
      [1 + 8192, 300],
      [1024, 700],
    ]);
    expect(held).toBe(3175n);
    expect(callCeiling(1, { inputUsdPerMtok: 0.3, outputUsdPerMtok: 0.7 }).reservationUsd).toBe(Number(held) / 1e6);
    // Exactly on a micro-USD: nothing added.
    expect(callCeiling(4, { inputUsdPerMtok: 1, outputUsdPerMtok: 1 }).reservationUsd).toBe((4 + 8192 + 1024) / 1e6);
  });

  it("prices measured usage exactly at the upper prices, rounded up to 1e-12 USD", () => {
    expect(usageCostUsd(plain(1500, 40), { inputUsdPerMtok: 1, outputUsdPerMtok: 5 })).toBe(0.0017);
    expect(usageCostUsd(plain(1, 0), { inputUsdPerMtok: 0.0000001, outputUsdPerMtok: 1 })).toBe(1e-12);
    expect(usageCostUsd(plain(0, 0), { inputUsdPerMtok: 3, outputUsdPerMtok: 15 })).toBe(0);
  });

  // contract: R29
  it("is the gateway's request bound for the protocol's max_tokens, every prompt token at the upper input price", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 20_000_000 }), fc.integer({ min: 1, max: 100_000 }), fc.integer({ min: 1, max: 100_000 }), (bytes, inMilli, outMilli) => {
        const bound = requestBound("claude-haiku-5-5", bytes, MAX_OUTPUT_TOKENS);
        const c = callCeiling(bytes, { inputUsdPerMtok: inMilli / 1000, outputUsdPerMtok: outMilli / 1000 });
        expect(c.inputCeilingTokens).toBe(bound.promptTokens);
        expect(c.outputCeilingTokens).toBe(bound.outputTokens);
        const micro = microUp([
          [bound.promptTokens, inMilli],
          [bound.outputTokens, outMilli],
        ]);
        expect(c.reservationUsd).toBe(Number(micro) / 1e6);
      }),
    );
  });

  // contract: R30
  it("prices a reply's cache tokens: reads at the upper input price, writes of any TTL at twice it", () => {
    const prices = { inputUsdPerMtok: 1, outputUsdPerMtok: 5 };
    const u = { inputTokens: 1000, outputTokens: 10, cacheReadInputTokens: 500, cacheWrite5mInputTokens: 200, cacheWrite1hInputTokens: 100 };
    expect(usageCostUsd(plain(u.inputTokens, u.outputTokens), prices)).toBe(
      Number(
        microUp([
          [u.inputTokens, 1000],
          [u.outputTokens, 5000],
        ]),
      ) / 1e6,
    );
    expect(usageCostUsd(u, prices)).toBe(
      Number(
        microUp([
          [u.inputTokens + u.cacheReadInputTokens, 1000],
          [u.cacheWrite5mInputTokens + u.cacheWrite1hInputTokens, 2000],
          [u.outputTokens, 5000],
        ]),
      ) / 1e6,
    );
  });

  it("refuses prices that are not positive and token counts that are not counts", () => {
    expect(() => callCeiling(10, { inputUsdPerMtok: 0, outputUsdPerMtok: 5 })).toThrow(/upper input price/);
    expect(() => callCeiling(10, { inputUsdPerMtok: 1, outputUsdPerMtok: Number.NaN })).toThrow(/upper output price/);
    expect(() => usageCostUsd(plain(-1, 0), { inputUsdPerMtok: 1, outputUsdPerMtok: 1 })).toThrow(/input tokens/);
    expect(() => inputCeilingTokens(1.5)).toThrow(RangeError);
  });
});
