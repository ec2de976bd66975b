import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { initialBudget, reserve, settle, type BudgetState, type Reservation } from "../../src/budget/budget.ts";
import { formatBudgetUsd } from "../../src/claude/args.ts";
import type { AttemptStatus } from "../../src/terms/terms.ts";

function reserved(state: BudgetState, limit: number): { reservation: Reservation; state: BudgetState } {
  const r = reserve(state, limit);
  if (!r.ok) throw new Error(`refused: ${r.reason}`);
  return r;
}

describe("initialBudget", () => {
  it("starts from what the run already spent: it counts against the cap, nothing is held", () => {
    const state = initialBudget(1, 0.95);
    expect(state).toEqual({ capUsd: 1, spentUsd: 0.95, reservedUsd: 0 });
    expect(reserve(state, 0.1)).toMatchObject({ ok: false, remainingUsd: 0.05 });
    expect(reserved(state, 0.05).state.reservedUsd).toBe(0.05);
  });

  it("refuses a cap that is not positive and a spend that is not a non-negative amount", () => {
    expect(() => initialBudget(0)).toThrow(RangeError);
    expect(() => initialBudget(1, -0.1)).toThrow(/spend so far/);
    expect(() => initialBudget(1, Number.NaN)).toThrow(/spend so far/);
  });
});

describe("reserve (seed 000: the full limit must fit under the remaining cap)", () => {
  it("holds the limit and passes it as --max-budget-usd", () => {
    const r = reserved(initialBudget(1), 0.1);
    expect(r.reservation).toEqual({ reservedUsd: 0.1 });
    expect(r.state).toEqual({ capUsd: 1, spentUsd: 0, reservedUsd: 0.1 });
    expect(formatBudgetUsd(r.reservation.reservedUsd)).toBe("0.1");
  });

  it("rounds the limit down to 6 decimals, exactly", () => {
    expect(reserved(initialBudget(1), 0.1234567).reservation.reservedUsd).toBe(0.123456);
    expect(reserved(initialBudget(1), 0.29).reservation.reservedUsd).toBe(0.29);
    expect(reserved(initialBudget(1), 0.0000019).reservation.reservedUsd).toBe(0.000001);
  });

  it("refuses a limit that rounds to nothing or is not a positive amount", () => {
    for (const limit of [1e-7, 0, -0.1, NaN, Infinity]) {
      const r = reserve(initialBudget(1), limit);
      expect(r.ok).toBe(false);
    }
  });

  it("refuses when the full limit does not fit, and accepts an exact fit", () => {
    // 1 - 0.9 is 0.09999999999999998 in floating point; the budget is exact.
    expect(reserve({ capUsd: 1, spentUsd: 0.9, reservedUsd: 0 }, 0.1).ok).toBe(true);
    const refused = reserve({ capUsd: 1, spentUsd: 0.900001, reservedUsd: 0 }, 0.1);
    expect(refused).toEqual({ ok: false, reason: "the per-attempt limit 0.1 USD does not fit under the remaining budget 0.099999 USD", remainingUsd: 0.099999 });
  });

  it("counts open reservations against the cap", () => {
    let state = initialBudget(1);
    state = reserved(state, 0.5).state;
    state = reserved(state, 0.5).state;
    expect(state.reservedUsd).toBe(1);
    expect(reserve(state, 0.000001).ok).toBe(false);
  });

  it("refuses everything once spend has passed the cap", () => {
    const r = reserve({ capUsd: 1, spentUsd: 1.2, reservedUsd: 0 }, 0.1);
    expect(r).toMatchObject({ ok: false, remainingUsd: 0 });
  });

  it("rejects a corrupt state and a non-positive cap (runner bugs)", () => {
    expect(() => reserve({ capUsd: 1, spentUsd: NaN, reservedUsd: 0 }, 0.1)).toThrow(RangeError);
    expect(() => initialBudget(0)).toThrow(RangeError);
  });
});

describe("settle (seed 000 and the 001 amendment: charging)", () => {
  const open = () => reserved(initialBudget(1), 0.1);
  const outcome = (status: AttemptStatus, reportedCostUsd: number | null, computedCostUsd: number | null) => ({ status, reportedCostUsd, computedCostUsd });

  it("completed: the larger of the reported and computed cost, and the reservation is released", () => {
    const { state, reservation } = open();
    const s = settle(state, reservation, outcome("completed", 0.0005, 0.000602));
    expect(s).toEqual({ chargedUsd: 0.000602, status: "completed", state: { capUsd: 1, spentUsd: 0.000602, reservedUsd: 0 }, cumulativeCapExceeded: false });
    expect(settle(state, reservation, outcome("completed", 0.0007, 0.000602)).chargedUsd).toBe(0.0007);
  });

  it("completed: an invalid reported cost is ignored", () => {
    const { state, reservation } = open();
    expect(settle(state, reservation, outcome("completed", -5, 0.000602)).chargedUsd).toBe(0.000602);
    expect(settle(state, reservation, outcome("completed", NaN, 0.000602)).chargedUsd).toBe(0.000602);
  });

  it("completed without any valid cost is charged the reservation", () => {
    const { state, reservation } = open();
    expect(settle(state, reservation, outcome("completed", null, null)).chargedUsd).toBe(0.1);
  });

  it("a success charged above its reservation is budget-exceeded (the CLI checks after spend)", () => {
    const { state, reservation } = open();
    const s = settle(state, reservation, outcome("completed", 0.13, 0.12));
    expect(s.status).toBe("budget-exceeded");
    expect(s.chargedUsd).toBe(0.13);
    expect(settle(state, reservation, outcome("completed", 0.1, 0.1)).status).toBe("completed");
  });

  it.each(["failed", "timed-out", "budget-exceeded", "invalid-setup", "invalid-cost"] as const)("%s: max(reservation, every valid cost)", (status) => {
    const { state, reservation } = open();
    expect(settle(state, reservation, outcome(status, null, null)).chargedUsd).toBe(0.1);
    expect(settle(state, reservation, outcome(status, 0.01, 0.02)).chargedUsd).toBe(0.1);
    expect(settle(state, reservation, outcome(status, 0.3, 0.02)).chargedUsd).toBe(0.3);
    expect(settle(state, reservation, outcome(status, 0.02, 0.25)).chargedUsd).toBe(0.25);
    expect(settle(state, reservation, outcome(status, -3, Infinity)).chargedUsd).toBe(0.1);
    expect(settle(state, reservation, outcome(status, 0.3, 0.02)).status).toBe(status);
  });

  it("never charges below a reported cost, rounding up at 1e-12 USD", () => {
    const { state, reservation } = open();
    expect(settle(state, reservation, outcome("completed", 1.23456789012345e-7, 0)).chargedUsd).toBe(1.23457e-7);
  });

  it("flags cumulativeCapExceeded only when spend passes the cap", () => {
    const r = reserved(initialBudget(0.15), 0.1);
    expect(settle(r.state, r.reservation, outcome("failed", 0.15, null))).toMatchObject({ cumulativeCapExceeded: false, state: { spentUsd: 0.15 } });
    expect(settle(r.state, r.reservation, outcome("failed", 0.150001, null)).cumulativeCapExceeded).toBe(true);
  });

  it("refuses to settle a reservation that is not open", () => {
    expect(() => settle(initialBudget(1), { reservedUsd: 0.1 }, outcome("completed", 0, 0))).toThrow(/not open/);
  });

  it("over a run: spend is exact, reservations return to zero, and every charge covers its valid costs", () => {
    const cost = fc.option(
      fc.integer({ min: 0, max: 300_000 }).map((m) => m / 1e6),
      { nil: null },
    );
    const attempt = fc.record({
      status: fc.constantFrom<AttemptStatus>("completed", "failed", "timed-out", "budget-exceeded", "invalid-setup", "invalid-cost"),
      reported: cost,
      computed: cost,
    });
    fc.assert(
      fc.property(fc.array(attempt, { maxLength: 20 }), (attempts) => {
        let state = initialBudget(1);
        let spentMicros = 0;
        for (const a of attempts) {
          const r = reserve(state, 0.1);
          if (!r.ok) {
            expect(spentMicros).toBeGreaterThan(900_000);
            break;
          }
          const s = settle(r.state, r.reservation, { status: a.status, reportedCostUsd: a.reported, computedCostUsd: a.computed });
          const valid = [a.reported, a.computed].filter((c): c is number => c !== null);
          for (const c of valid) expect(s.chargedUsd).toBeGreaterThanOrEqual(c);
          if (a.status !== "completed") expect(s.chargedUsd).toBeGreaterThanOrEqual(0.1);
          if (a.status === "completed" && valid.length > 0) expect(s.status).toBe(s.chargedUsd > 0.1 ? "budget-exceeded" : "completed");
          spentMicros += Math.round(s.chargedUsd * 1e6);
          state = s.state;
          expect(state.reservedUsd).toBe(0);
          expect(state.spentUsd).toBe(spentMicros / 1e6);
          expect(s.cumulativeCapExceeded).toBe(spentMicros > 1_000_000);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe("the reservation as --max-budget-usd", () => {
  it.each([
    [0.1, "0.1"],
    [1, "1"],
    [12.5, "12.5"],
    [0.000001, "0.000001"],
    [0.25, "0.25"],
    [100, "100"],
  ])("%s -> %s (plain decimal, never an exponent)", (usd, arg) => {
    expect(formatBudgetUsd(reserved(initialBudget(1000), usd).reservation.reservedUsd)).toBe(arg);
  });
});
