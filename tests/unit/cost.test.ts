import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { computeCost, type CostInput, type MessagePromptUsage, type ModelUsageTokens } from "../../src/cost/compute.ts";
import { picoToUsd, usdToPico } from "../../src/cost/money.ts";
import { cliPrices, pricesFor, tier1MaxPromptTokens } from "../../src/cost/prices.ts";
import { activeProfile } from "../../src/profile/load.ts";

const GENERATED_PRICE_TABLE = activeProfile().prices;
const CLI_PRICES = cliPrices();

const MODEL = "claude-haiku-5-5";

function usage(u: Partial<ModelUsageTokens>): ModelUsageTokens {
  return { inputTokens: 0, outputTokens: 0, cacheReadInputTokens: 0, cacheCreationInputTokens: 0, costBasis: "list", ...u };
}

function input(u: Partial<ModelUsageTokens>, rest: Partial<CostInput> = {}): CostInput {
  return { model: MODEL, modelUsage: { [MODEL]: usage(u) }, cacheCreation: null, perMessageUsage: [], reportedCostUsd: null, ...rest };
}

function msg(id: string, inputTokens: number, cacheReadInputTokens = 0, cacheCreationInputTokens = 0): MessagePromptUsage {
  return { messageId: id, inputTokens, cacheReadInputTokens, cacheCreationInputTokens };
}

/** Computed cost of an input whose reported cost is set to the computed one (so only real problems show). */
function priced(u: Partial<ModelUsageTokens>, rest: Partial<CostInput> = {}) {
  const first = computeCost(input(u, rest));
  return computeCost(input(u, { ...rest, reportedCostUsd: first.computedCostUsd }));
}

describe("CLI_PRICES, generated from the pinned CLI (src/calibrate/prices.ts)", () => {
  it("holds the claude-haiku-5-5 row the facts measured by hand, boundary included", () => {
    expect(CLI_PRICES[MODEL]).toEqual({
      tier1: { input: 0.1, output: 0.5, cacheRead: 0.01, cacheWrite5m: 0.125, cacheWrite1h: 0.2 },
      tier2: { input: 0.5, output: 2.5, cacheRead: 0.05, cacheWrite5m: 0.625, cacheWrite1h: 1.0 },
    });
    expect(tier1MaxPromptTokens(MODEL)).toBe(100_000);
    expect(Object.isFrozen(CLI_PRICES[MODEL]!.tier1)).toBe(true);
  });

  it("holds every measured row, and a model without a second tier never leaves the first", () => {
    expect(Object.keys(CLI_PRICES).sort()).toEqual(Object.keys(GENERATED_PRICE_TABLE.models).sort());
    // The facts: claude-sonnet-5 1M in + 1M out = 12.00 USD; claude-haiku-4-5 1M in = 1.00 USD.
    expect(CLI_PRICES["claude-sonnet-5"]!.tier1.input + CLI_PRICES["claude-sonnet-5"]!.tier1.output).toBeCloseTo(12, 12);
    expect(CLI_PRICES["claude-haiku-4-5"]!.tier1.input).toBe(1);
    expect(tier1MaxPromptTokens("claude-sonnet-5")).toBe(Number.POSITIVE_INFINITY);
    expect(CLI_PRICES["claude-sonnet-5"]!.tier2).toEqual(CLI_PRICES["claude-sonnet-5"]!.tier1);
    for (const name of Object.keys(GENERATED_PRICE_TABLE.notPricedAsList)) expect(pricesFor(name)).toBeUndefined();
  });

  it("looks up own keys only", () => {
    expect(pricesFor("constructor")).toBeUndefined();
    expect(pricesFor("__proto__")).toBeUndefined();
    expect(tier1MaxPromptTokens("constructor")).toBeUndefined();
    expect(pricesFor("claude-3-opus")).toBeUndefined();
  });

  it("a second-tier prompt of a flat model is priced at its one rate", () => {
    const m = "claude-sonnet-5";
    const r = computeCost({ ...input({}), model: m, modelUsage: { [m]: usage({ inputTokens: 500_000, outputTokens: 1_000 }) }, reportedCostUsd: (500_000 * 2 + 1_000 * 10) / 1e6 });
    expect(r.problems).toEqual([]);
    expect(r.costBasis).toMatchObject({ tier: 1, tierPromptTokens: 500_000 });
    expect(r.computedCostUsd).toBeCloseTo(1.01, 12);
  });
});

describe("computeCost reproduces the CLI's measured costs", () => {
  it("11 input + 7 output = 4.6e-06 USD", () => {
    const r = computeCost(input({ inputTokens: 11, outputTokens: 7 }, { reportedCostUsd: 4.6e-6 }));
    expect(r.computedCostUsd).toBe(4.6e-6);
    expect(r.problems).toEqual([]);
    expect(r.costBasis).toMatchObject({ tier: 1, tierSource: "aggregate", tierPromptTokens: 11 });
  });

  it("the two-turn run: 0.000602 USD, tier from per-message usage", () => {
    const r = computeCost(
      input(
        { inputTokens: 5000, outputTokens: 65, cacheReadInputTokens: 700, cacheCreationInputTokens: 500 },
        {
          cacheCreation: { ephemeral5mInputTokens: 500, ephemeral1hInputTokens: 0 },
          perMessageUsage: [msg("msg_1", 2000, 0, 500), msg("msg_2", 3000, 700, 0)],
          reportedCostUsd: 0.000602,
        },
      ),
    );
    expect(r.computedCostUsd).toBe(0.000602);
    expect(r.reportedCostUsd).toBe(0.000602);
    expect(r.problems).toEqual([]);
    expect(r.costBasis).toEqual({
      model: MODEL,
      tier: 1,
      tierSource: "per-message",
      tierPromptTokens: 3700,
      pricesUsdPerMillion: { input: 0.1, output: 0.5, cacheRead: 0.01, cacheWrite5m: 0.125, cacheWrite1h: 0.2 },
      inputTokens: 5000,
      outputTokens: 65,
      cacheReadInputTokens: 700,
      cacheWrite5mTokens: 500,
      cacheWrite1hTokens: 0,
      cacheWriteUnattributedTokens: 0,
    });
  });
});

describe("tier choice", () => {
  it("a 100,000-token prompt is first tier; 100,001 is second tier", () => {
    expect(priced({ inputTokens: 100_000 }).computedCostUsd).toBe(0.01);
    expect(priced({ inputTokens: 100_000 }).costBasis?.tier).toBe(1);
    const over = priced({ inputTokens: 100_001 });
    expect(over.costBasis?.tier).toBe(2);
    expect(over.computedCostUsd).toBe(0.0500005);
  });

  it("the same boundary holds for the largest single message", () => {
    expect(priced({ inputTokens: 100_000 }, { perMessageUsage: [msg("a", 100_000)] }).costBasis).toMatchObject({ tier: 1, tierSource: "per-message" });
    expect(priced({ inputTokens: 100_001 }, { perMessageUsage: [msg("a", 100_001)] }).costBasis).toMatchObject({ tier: 2, tierSource: "per-message" });
  });

  it("1,000 input with 1,000,000 cache-read tokens is second tier (cache reads count in the prompt)", () => {
    const r = priced({ inputTokens: 1000, cacheReadInputTokens: 1_000_000 });
    expect(r.costBasis?.tier).toBe(2);
    expect(r.computedCostUsd).toBe(0.0505);
  });

  it("cache writes count in the prompt", () => {
    expect(priced({ inputTokens: 50_000, cacheCreationInputTokens: 50_001 }).costBasis?.tier).toBe(2);
  });

  it("per-message usage decides when present: two 60k prompts stay first tier, the aggregate alone would not", () => {
    const u = { inputTokens: 120_000 };
    expect(priced(u, { perMessageUsage: [msg("a", 60_000), msg("b", 60_000)] }).costBasis).toMatchObject({ tier: 1, tierSource: "per-message", tierPromptTokens: 60_000 });
    expect(priced(u).costBasis).toMatchObject({ tier: 2, tierSource: "aggregate", tierPromptTokens: 120_000 });
  });

  it("when one prompt is above the bound, every token is priced in the second tier", () => {
    const r = priced({ inputTokens: 100_010, outputTokens: 1000 }, { perMessageUsage: [msg("a", 10), msg("b", 100_000, 0, 0), msg("c", 0)] });
    expect(r.costBasis?.tier).toBe(1);
    const r2 = priced({ inputTokens: 100_011, outputTokens: 1000 }, { perMessageUsage: [msg("a", 10), msg("b", 100_001)] });
    expect(r2.costBasis?.tier).toBe(2);
    expect(r2.computedCostUsd).toBe((100_011 * 0.5 + 1000 * 2.5) / 1e6);
  });

  it("per-message prompt sums must equal modelUsage exactly; output is not compared", () => {
    const u = { inputTokens: 5000, outputTokens: 65, cacheReadInputTokens: 700, cacheCreationInputTokens: 500 };
    const ok = priced(u, { perMessageUsage: [msg("1", 2000, 0, 500), msg("2", 3000, 700, 0)] });
    expect(ok.problems).toEqual([]);
    for (const [per, detail] of [
      [[msg("1", 2000, 0, 500), msg("2", 2999, 700, 0)], "input 4999 vs 5000"],
      [[msg("1", 2000, 0, 500), msg("2", 3000, 701, 0)], "cache read 701 vs 700"],
      [[msg("1", 2000, 0, 499), msg("2", 3000, 700, 0)], "cache write 499 vs 500"],
    ] as const) {
      const r = computeCost(input(u, { perMessageUsage: per, reportedCostUsd: 0.000602 }));
      expect(r.problems).toEqual([`per-message usage does not sum to modelUsage (${detail})`]);
      expect(r.costBasis?.tierSource).toBe("aggregate");
    }
  });

  it("with inconsistent per-message usage, the dearer tier of the two sources is used", () => {
    const r = computeCost(input({ inputTokens: 150_000 }, { perMessageUsage: [msg("a", 50_000)], reportedCostUsd: 0.075 }));
    expect(r.costBasis?.tier).toBe(2);
    expect(r.problems).toHaveLength(1);
  });
});

describe("cache writes by TTL", () => {
  it("5-minute writes at 1.25x input", () => {
    const r = priced({ cacheCreationInputTokens: 1000 }, { cacheCreation: { ephemeral5mInputTokens: 1000, ephemeral1hInputTokens: 0 } });
    expect(r.computedCostUsd).toBe(0.000125);
  });

  it("1-hour writes at 2x input", () => {
    const r = priced({ cacheCreationInputTokens: 1000 }, { cacheCreation: { ephemeral5mInputTokens: 0, ephemeral1hInputTokens: 1000 } });
    expect(r.computedCostUsd).toBe(0.0002);
  });

  it("writes with no split are priced at the 1-hour rate, above the CLI's 5-minute price, which still agrees", () => {
    const r = computeCost(input({ cacheCreationInputTokens: 1000 }, { reportedCostUsd: 0.000125 }));
    expect(r.computedCostUsd).toBe(0.0002);
    expect(r.costBasis?.cacheWriteUnattributedTokens).toBe(1000);
    expect(r.problems).toEqual([]);
  });

  it("the part of the writes the split does not cover is priced at the 1-hour rate", () => {
    const r = priced({ cacheCreationInputTokens: 1000 }, { cacheCreation: { ephemeral5mInputTokens: 600, ephemeral1hInputTokens: 100 } });
    expect(r.costBasis).toMatchObject({ cacheWrite5mTokens: 600, cacheWrite1hTokens: 100, cacheWriteUnattributedTokens: 300 });
    expect(r.computedCostUsd).toBe((600 * 0.125 + 400 * 0.2) / 1e6);
  });

  it("tier-2 writes: 0.625 and 1.00 per million", () => {
    const r = priced({ inputTokens: 100_000, cacheCreationInputTokens: 2000 }, { cacheCreation: { ephemeral5mInputTokens: 1000, ephemeral1hInputTokens: 1000 } });
    expect(r.costBasis?.tier).toBe(2);
    expect(r.computedCostUsd).toBe(0.051625);
  });

  it("a split larger than the writes is a cost problem", () => {
    const r = priced({ cacheCreationInputTokens: 100 }, { cacheCreation: { ephemeral5mInputTokens: 100, ephemeral1hInputTokens: 1 } });
    expect(r.problems).toEqual(["usage.cache_creation splits 101 cache-write tokens, but modelUsage has 100"]);
  });
});

describe("cost problems (-> invalid-cost)", () => {
  const twoTurn = { inputTokens: 5000, outputTokens: 65, cacheReadInputTokens: 700, cacheCreationInputTokens: 500 };
  const split = { cacheCreation: { ephemeral5mInputTokens: 500, ephemeral1hInputTokens: 0 } };

  it("a model in modelUsage other than the requested one", () => {
    const r = computeCost({
      ...input(twoTurn, { ...split, reportedCostUsd: 0.000602 }),
      modelUsage: { [MODEL]: usage(twoTurn), "claude-haiku-4-5": usage({ inputTokens: 10 }) },
    });
    expect(r.problems).toEqual(['modelUsage has model "claude-haiku-4-5" besides the requested "claude-haiku-5-5"']);
    expect(r.computedCostUsd).toBeNull();
    expect(r.reportedCostUsd).toBe(0.000602);
  });

  it("no entry for the requested model", () => {
    const r = computeCost({ ...input({}), modelUsage: {}, reportedCostUsd: 0 });
    expect(r.problems).toEqual(['modelUsage has no entry for the requested model "claude-haiku-5-5"']);
  });

  it("a model missing from CLI_PRICES", () => {
    const r = computeCost({ ...input({}), model: "claude-3-opus", modelUsage: { "claude-3-opus": usage({ inputTokens: 10 }) }, reportedCostUsd: 0.00003 });
    expect(r.problems).toEqual(['CLI_PRICES has no row for "claude-3-opus"']);
    expect(r.computedCostUsd).toBeNull();
  });

  it.each([["unknown"], [undefined]])("a costBasis of %s", (basis) => {
    const r = computeCost(input({ inputTokens: 11, outputTokens: 7, costBasis: basis }, { reportedCostUsd: 4.6e-6 }));
    expect(r.problems).toEqual([`modelUsage "claude-haiku-5-5" has costBasis ${basis === undefined ? "missing" : '"unknown"'}, not "list"`]);
    expect(r.computedCostUsd).toBe(4.6e-6);
  });

  it.each([
    ["missing", null, "total_cost_usd is missing or not a finite number"],
    ["NaN", NaN, "total_cost_usd is missing or not a finite number"],
    ["infinite", Infinity, "total_cost_usd is missing or not a finite number"],
    ["negative", -0.0001, "total_cost_usd is negative (-0.0001)"],
    // Finite, but no amount of pico-USD a record can hold (found by the transcript fuzz test, which threw).
    ["too large", 1e308, "total_cost_usd 1e+308 is larger than any amount a record can hold"],
  ])("a %s total_cost_usd", (_, reported, problem) => {
    const r = computeCost(input({ inputTokens: 11, outputTokens: 7 }, { reportedCostUsd: reported }));
    expect(r.problems).toEqual([problem]);
    expect(r.reportedCostUsd).toBeNull();
    expect(r.computedCostUsd).toBe(4.6e-6);
  });

  it("missing modelUsage", () => {
    expect(computeCost({ ...input({}), modelUsage: null, reportedCostUsd: 0.1 }).problems).toEqual(["modelUsage is missing or malformed"]);
  });

  it("the reported cost must be within a factor of two of the computed one, both ways, bounds included", () => {
    const at = (reported: number) => computeCost(input(twoTurn, { ...split, reportedCostUsd: reported })).problems;
    expect(at(0.001204)).toEqual([]);
    expect(at(0.000301)).toEqual([]);
    expect(at(0.0012041)).toEqual(["total_cost_usd 0.0012041 is not within a factor of two of the list-price cost 0.000602"]);
    expect(at(0.0003009)).toHaveLength(1);
    expect(at(0)).toHaveLength(1);
    // The 2.1.288 run that billed ~60x the estimate (001 amendment).
    expect(at(0.000602 * 60)).toHaveLength(1);
  });

  it("with a computed cost of 0, only a reported 0 agrees", () => {
    expect(computeCost(input({}, { reportedCostUsd: 0 })).problems).toEqual([]);
    expect(computeCost(input({}, { reportedCostUsd: 1e-9 })).problems).toEqual(["total_cost_usd 1e-9 is not within a factor of two of the list-price cost 0"]);
  });
});

describe("exact arithmetic", () => {
  // Independent oracle: the table as integer pico-USD per token, tier 1 and tier 2.
  const PICO = { 1: [100_000n, 500_000n, 10_000n, 125_000n, 200_000n], 2: [500_000n, 2_500_000n, 50_000n, 625_000n, 1_000_000n] } as const;
  const tokens = fc.integer({ min: 0, max: 2_000_000 });

  it("equals the integer-exact cost for any usage, to the nearest double", () => {
    fc.assert(
      fc.property(tokens, tokens, tokens, tokens, tokens, (inp, out, read, w5, w1) => {
        const writes = w5 + w1;
        const r = computeCost(
          input(
            { inputTokens: inp, outputTokens: out, cacheReadInputTokens: read, cacheCreationInputTokens: writes },
            {
              cacheCreation: { ephemeral5mInputTokens: w5, ephemeral1hInputTokens: w1 },
              reportedCostUsd: 0,
            },
          ),
        );
        const tier = inp + read + writes > 100_000 ? 2 : 1;
        const [pi, po, pr, p5, p1] = PICO[tier];
        const exact = BigInt(inp) * pi + BigInt(out) * po + BigInt(read) * pr + BigInt(w5) * p5 + BigInt(w1) * p1;
        expect(r.costBasis?.tier).toBe(tier);
        expect(r.computedCostUsd).toBe(Number(exact) / 1e12);
        expect(Math.abs(r.computedCostUsd! - Number(exact) * 1e-12)).toBeLessThan(1e-9);
      }),
      { numRuns: 500 },
    );
  });

  // contract: R204
  it("reads total_cost_usd to the nearest pico-USD: the noise of the CLI's float sum is not money", () => {
    // 5,000 input + 65 output + 700 cache reads + 500 5-minute writes: 0.000602 USD (facts).
    const u = { inputTokens: 5000, outputTokens: 65, cacheReadInputTokens: 700, cacheCreationInputTokens: 500 };
    const split = { ephemeral5mInputTokens: 500, ephemeral1hInputTokens: 0 };
    const noisy = [0.0004575000000000001, 0.000602 + 1e-19, 0.0006019999999999999];
    expect(noisy.map((r) => computeCost(input(u, { reportedCostUsd: r, cacheCreation: split })).reportedCostUsd)).toEqual([0.0004575, 0.000602, 0.000602]);
    expect(computeCost(input(u, { reportedCostUsd: 0.1 + 0.2, cacheCreation: split })).reportedCostUsd).toBe(0.3);
    // A sub-pico amount is a cost of 0, and an exact figure is kept as it is.
    expect(computeCost(input({}, { reportedCostUsd: 4e-13 })).reportedCostUsd).toBe(0);
    expect(computeCost(input(u, { reportedCostUsd: 0.000602, cacheCreation: split })).reportedCostUsd).toBe(0.000602);
  });

  it("reads USD amounts from their decimal form", () => {
    expect(usdToPico(0.29, "floor")).toBe(290_000_000_000n);
    expect(usdToPico(4.6e-6, "floor")).toBe(4_600_000n);
    expect(usdToPico(1e-13, "floor")).toBe(0n);
    expect(usdToPico(1e-13, "ceil")).toBe(1n);
    expect(usdToPico(1e-13, "nearest")).toBe(0n);
    expect(usdToPico(5e-13, "nearest")).toBe(1n);
    expect(usdToPico(0.0004575000000000001, "nearest")).toBe(457_500_000n);
    expect(usdToPico(0.0004575000000000001, "ceil")).toBe(457_500_001n);
    expect(usdToPico(1.5e21, "floor")).toBe(1_500_000_000_000_000_000_000_000_000_000_000n);
    expect(picoToUsd(602_000_000n)).toBe(0.000602);
    expect(() => usdToPico(-1, "floor")).toThrow(RangeError);
    expect(() => usdToPico(NaN, "floor")).toThrow(RangeError);
  });
});
