/**
 * Money exact everywhere: every USD amount a record holds is a whole number of pico-USD, checked
 * by the schema; records compare and sum amounts in pico-USD with no tolerance; a report sums in
 * pico-USD and rounds the exact sum once.
 */
import { describe, expect, it } from "vitest";
import type { z } from "zod";
import { AdjudicationRecordSchema } from "../../src/adjudicate/schema.ts";
import { positiveUsdAmount, usdAmount } from "../../src/cost/money.ts";
import { LedgerSchema, type Ledger } from "../../src/ledger/schema.ts";
import { behaviourOf, type BehaviourAttempt } from "../../src/report/behaviour.ts";
import { buildReport } from "../../src/report/build.ts";
import { SessionLedgerSchema } from "../../src/session/schema.ts";
import { positiveDecimal } from "../../src/cli/config/fields.ts";
import { checkAnyLedger } from "../../src/verify/check.ts";
import { DEMO, syntheticLedger, syntheticRecord } from "../support/adjudication-fixtures.ts";
import { completedObservation, reservedObservation, sampleLedger } from "../support/ledger-sample.ts";

/** 0.1 + 0.2 as a float: 0.30000000000000004, the residue of a float sum. */
const FLOAT_SUM = 0.1 + 0.2;

/** Every number-valued field of `schema` whose name says it holds USD (or that sits in a price table), with its path. */
function usdFields(schema: z.ZodType, path: string, inUsd = false): Array<{ path: string; schema: z.ZodType }> {
  const def = (schema as unknown as { _zod: { def: Record<string, unknown> & { type: string } } })._zod.def;
  switch (def.type) {
    case "number":
      return inUsd ? [{ path, schema }] : [];
    case "object":
      return Object.entries(def.shape as Record<string, z.ZodType>).flatMap(([key, field]) => usdFields(field, `${path}.${key}`, /usd|prices/i.test(key)));
    case "optional":
    case "nullable":
    case "default":
    case "readonly":
      return usdFields(def.innerType as z.ZodType, path, inUsd);
    case "array":
      return usdFields(def.element as z.ZodType, `${path}[]`, inUsd);
    case "record":
      return usdFields(def.valueType as z.ZodType, `${path}{}`, inUsd);
    case "union":
      return (def.options as z.ZodType[]).flatMap((o) => usdFields(o, path, inUsd));
    case "pipe":
      return usdFields(def.in as z.ZodType, path, inUsd);
    default:
      return [];
  }
}

const problemsOf = (name: string, ledger: unknown) => checkAnyLedger(name, Buffer.from(JSON.stringify(ledger)));

describe("money in the records", () => {
  // contract: R201
  it("every USD field of the ledger, the adjudication record and the session ledger refuses a float sum's residue such as 0.1 + 0.2 and takes the exact amount", () => {
    const fields = [...usdFields(LedgerSchema, "ledger"), ...usdFields(AdjudicationRecordSchema, "record"), ...usdFields(SessionLedgerSchema, "session-ledger")];
    // The ledger alone has its budget, each observation's money, its gateway requests and http calls.
    expect(fields.length).toBeGreaterThan(40);
    const accepting = fields.filter((f) => f.schema.safeParse(FLOAT_SUM).success).map((f) => f.path);
    expect(accepting).toEqual([]);
    const refusingExact = fields.filter((f) => !f.schema.safeParse(0.3).success).map((f) => f.path);
    expect(refusingExact).toEqual([]);
  });

  // contract: R201
  it("an amount must be finite, non-negative and whole pico-USD; the message says which and gives the number", () => {
    for (const ok of [0, 0.3, 4.6e-6, 0.000602, 1e-12, 0.123456789012, 1234.567890123456]) expect(usdAmount.safeParse(ok).success, String(ok)).toBe(true);
    const message = (v: number) => usdAmount.safeParse(v).error?.issues.map((i) => i.message);
    expect(message(FLOAT_SUM)).toEqual(["is 0.30000000000000004, not an exact amount of USD: money is recorded in whole pico-USD (at most 12 decimals, e.g. 0.3), never a float sum's residue"]);
    expect(message(1e-13)?.[0]).toMatch(/^is 1e-13, not an exact amount of USD/);
    expect(message(-0.5)).toHaveLength(1);
    expect(positiveUsdAmount.safeParse(0).success).toBe(false);
  });

  // contract: R201
  it("`ledger check` refuses a ledger whose cost is 0.1 + 0.2, naming the field (exit 1)", () => {
    const ledger = sampleLedger({
      status: "awaiting-adjudication",
      observations: [completedObservation(0, 0.002), completedObservation(1, 0.3, { cliReportedCostUsd: FLOAT_SUM, computedCostUsd: 0.3 })],
      budget: { capUsd: 1, attemptBudgetUsd: 0.4, reservedUsd: 0, spentUsd: 0.302, cumulativeCapExceeded: false },
    });
    ledger.observations[1]!.reservationUsd = 0.4;
    ledger.observations[1]!.attemptBudgetUsd = 0.4;
    ledger.observations[0]!.attemptBudgetUsd = 0.4;
    const check = problemsOf("float.json", ledger);
    expect(check.state).toBe("invalid");
    expect(check.problems).toContain(
      "observations[1].cliReportedCostUsd: is 0.30000000000000004, not an exact amount of USD: money is recorded in whole pico-USD (at most 12 decimals, e.g. 0.3), never a float sum's residue",
    );
    // The same ledger with the exact amount is whole.
    ledger.observations[1]!.cliReportedCostUsd = 0.3;
    expect(problemsOf("exact.json", ledger)).toMatchObject({ state: "finished", valid: true, problems: [] });
  });

  // contract: R201
  it("a cap, a limit or a price with more than 12 decimals is refused where it is given, naming it", () => {
    expect(positiveDecimal("STUDY_BUDGET_USD").safeParse("0.25").data).toBe(0.25);
    expect(
      positiveDecimal("STUDY_BUDGET_USD")
        .safeParse("0.1234567890123")
        .error?.issues.map((i) => i.message),
    ).toEqual(["STUDY_BUDGET_USD must have at most 12 decimals (a whole number of pico-USD), such as 0.10"]);
  });
});

describe("comparisons and sums of money", () => {
  const onePico = 1e-12;
  const two = (charged: number, overrides: Partial<Ledger["budget"]> = {}): Ledger =>
    sampleLedger({
      status: "running",
      observations: [completedObservation(0, 0.002, { chargedUsd: charged }), reservedObservation(1, { arm: "mcp", scenario: "doc-bridge" })],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0.1, spentUsd: Number((0.1 + charged).toFixed(12)), cumulativeCapExceeded: false, ...overrides },
    });

  // contract: R202
  it("a charge one pico-USD off its cost, or a budget one pico-USD off its entries, is refused: no tolerance", () => {
    expect(problemsOf("exact.json", two(0.002)).problems).toEqual([]);
    // One pico-USD below the cost it must cover: a tolerance of 1e-9 USD let it pass.
    expect(problemsOf("below.json", two(0.002 - onePico)).problems).toContain("observations[0].chargedUsd: is below cliReportedCostUsd; a completed attempt is charged the larger valid cost");
    // One pico-USD above: a completed attempt is charged exactly its larger cost.
    expect(problemsOf("above.json", two(0.002000000001)).problems).toContain(
      "observations[0].chargedUsd: is 0.002000000001 USD, but a completed run is charged the larger of its reported and computed cost, 0.002 USD (R147 charge-by-status)",
    );
    // The budget's spend one pico-USD above what its entries hold.
    expect(problemsOf("spent.json", two(0.002, { spentUsd: 0.102000000001 })).problems).toEqual(["budget.spentUsd: is 0.102000000001, but settled charges plus open reservations sum to 0.102"]);
  });

  // contract: R203
  it("a report sums the charges in pico-USD and rounds the exact sum once", () => {
    // Fifteen charges of 0.0000001 USD: the exact sum 0.0000015 rounds to 0.000002; their float
    // sum, 0.0000014999999999999996, rounded to 0.000001.
    const attempt = (chargedUsd: number): BehaviourAttempt => ({
      arm: "repository",
      status: "completed",
      outcome: "correct",
      inputTokens: 10,
      cacheCreationInputTokens: 0,
      cacheReadInputTokens: 0,
      wallTimeMs: 1000,
      chargedUsd,
      numTurns: 1,
      toolCallsByName: {},
    });
    const behaviour = behaviourOf(Array.from({ length: 15 }, () => attempt(0.0000001)));
    expect(behaviour.arms.repository.chargedUsd).toBe(0.000002);
    expect(behaviour.arms.repository.costPerCorrectUsd).toBe(0.0000015 / 15);

    // The answering and the adjudication spend, 0.0000004 USD each: the total is their exact sum
    // rounded, 0.000001, not the sum of the two rounded parts (0).
    const ledger = syntheticLedger({ mode: "full", failAt: 7 });
    const record = syntheticRecord(ledger, "b".repeat(64));
    ledger.budget.spentUsd = 0.0000004;
    record.budget.spentUsd = 0.0000004;
    const totals = buildReport({ ledger, ledgerSha256: "b".repeat(64), record, manifest: DEMO }).totals;
    expect(totals).toMatchObject({ answeringChargedUsd: 0, adjudicationChargedUsd: 0, totalChargedUsd: 0.000001 });
  });
});
