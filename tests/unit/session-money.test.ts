import { describe, expect, it } from "vitest";
import { budgetReached, callShareUsd, sessionSpentUsd } from "../../src/session/money.ts";

/**
 * Session money is integer pico-USD like every other amount of the runner (src/cost/money.ts):
 * sums and differences of USD numbers are exact, where float arithmetic folded back with
 * rounding to 1e-12 drifts.
 */
describe("session money in integer pico-USD", () => {
  it("1,000 calls charged 0.1 USD each have spent exactly 100 USD (a float sum is 99.999999999999 after rounding)", () => {
    const calls = Array.from({ length: 1000 }, () => ({ chargedUsd: 0.1, reservationUsd: 0.5 }));
    expect(sessionSpentUsd(calls)).toBe(100);
  });

  it("an open call counts at its reservation", () => {
    expect(
      sessionSpentUsd([
        { chargedUsd: 0.1, reservationUsd: 0.5 },
        { chargedUsd: null, reservationUsd: 0.2 },
      ]),
    ).toBe(0.3);
    expect(sessionSpentUsd([])).toBe(0);
  });

  it("a session of 500 calls charged 9.99 USD each has spent exactly 4995 USD", () => {
    expect(sessionSpentUsd(Array.from({ length: 500 }, () => ({ chargedUsd: 9.99, reservationUsd: 10 })))).toBe(4995);
  });

  it("a call's share of the session's cumulative cost is the exact difference, never below 0", () => {
    // 5000.3 - 4999.9 is 0.40000000000054570 in floats, 0.400000000001 rounded to 1e-12.
    expect(callShareUsd(5000.3, 4999.9)).toBe(0.4);
    expect(callShareUsd(0.3, 0.1)).toBe(0.2);
    expect(callShareUsd(0.1, 0.3)).toBe(0);
    expect(callShareUsd(null, 0.3)).toBe(null);
  });

  it("a call's share reads the CLI's float sums to the nearest pico-USD: noise past the twelfth decimal is no pico-USD spent", () => {
    // Measured on the pinned CLI (tests/conformance/sessions.test.ts): a cumulative 0.0009150000000000001 after 0.0004575.
    expect(callShareUsd(0.0004575000000000001, 0)).toBe(0.0004575);
    expect(callShareUsd(0.0009150000000000001, 0.0004575)).toBe(0.0004575);
    expect(callShareUsd(0.0004574999999999999, 0)).toBe(0.0004575);
  });

  it("the session's budget is reached when its spend is at least the budget, to the pico-USD", () => {
    expect(budgetReached({ spentUsd: 0.3 }, 0.3)).toBe(true);
    expect(budgetReached({ spentUsd: 0.299999999999 }, 0.3)).toBe(false);
    expect(budgetReached({ spentUsd: 0.31 }, 0.3)).toBe(true);
  });
});
