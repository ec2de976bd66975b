import { describe, expect, it } from "vitest";
import { budgetTotalsPico, LedgerSchema, type Ledger } from "../../src/ledger/schema.ts";
import { formatIssues } from "../../src/util/zod-errors.ts";
import { completedObservation, reservedObservation, sampleLedger } from "../support/ledger-sample.ts";

function problems(ledger: unknown): string[] {
  const parsed = LedgerSchema.safeParse(ledger);
  return parsed.success ? [] : formatIssues(parsed.error.issues);
}

/** A run with one settled attempt and one open reservation, budget consistent. */
function twoAttempts(): Ledger {
  const observations = [completedObservation(0, 0.002), reservedObservation(1, { arm: "mcp", scenario: "doc-bridge" })];
  return sampleLedger({ observations, budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0.1, spentUsd: 0.102, cumulativeCapExceeded: false } });
}

describe("ledger schema", () => {
  it("accepts a fresh header, a run in progress and a finished run", () => {
    expect(problems(sampleLedger())).toEqual([]);
    expect(problems(twoAttempts())).toEqual([]);
    const done = sampleLedger({
      status: "awaiting-adjudication",
      observations: [completedObservation(0, 0.002), completedObservation(1, 0.003)],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0.005, cumulativeCapExceeded: false },
    });
    expect(problems(done)).toEqual([]);
  });

  it("refuses unknown fields, so a typo is not silently kept", () => {
    expect(problems({ ...sampleLedger(), extra: 1 }).join()).toMatch(/unknown field 'extra'/);
    const l = twoAttempts();
    (l.observations[0] as Record<string, unknown>).inputTokenz = 5;
    expect(problems(l).join()).toMatch(/observations\[0\]: unknown field 'inputTokenz'/);
  });

  it("keeps a missing usage figure null and never accepts it omitted", () => {
    const l = twoAttempts();
    expect(l.observations[1]!.inputTokens).toBeNull();
    delete (l.observations[1] as Partial<Record<string, unknown>>).inputTokens;
    expect(problems(l).join()).toMatch(/observations\[1\]\.inputTokens: is required/);
  });

  it("fixes adjudication to agent without human review and correctness to null", () => {
    expect(problems({ ...sampleLedger(), adjudication: { method: "agent", humanReview: true } }).join()).toMatch(/adjudication\.humanReview/);
    expect(problems({ ...sampleLedger(), adjudication: { method: "human", humanReview: false } }).join()).toMatch(/adjudication\.method/);
    const l = twoAttempts();
    (l.observations[0] as Record<string, unknown>).correctness = "correct";
    expect(problems(l).join()).toMatch(/observations\[0\]\.correctness/);
    const m = twoAttempts();
    (m.observations[0] as Record<string, unknown>).adjudication = "done";
    expect(problems(m).join()).toMatch(/observations\[0\]\.adjudication/);
  });

  it("requires a status and a charge exactly when an attempt is settled", () => {
    const settledWithoutStatus = twoAttempts();
    settledWithoutStatus.observations[0]!.status = null;
    expect(problems(settledWithoutStatus).join()).toMatch(/observations\[0\]\.status: a settled attempt must have a status/);
    const openWithCharge = twoAttempts();
    openWithCharge.observations[1]!.chargedUsd = 0.1;
    expect(problems(openWithCharge).join()).toMatch(/observations\[1\]\.chargedUsd: must be null until the attempt is settled/);
  });

  it("refuses a failed attempt charged below its reservation", () => {
    const failed = completedObservation(0, 0.05, { status: "failed", cliSubtype: "error_during_execution" });
    const l = sampleLedger({ status: "blocked", statusReason: "attempt 0 failed", observations: [failed] });
    l.budget = { ...l.budget, spentUsd: 0.05 };
    expect(problems(l).join()).toMatch(/chargedUsd: is below the reservation/);
    failed.chargedUsd = 0.1;
    l.budget.spentUsd = 0.1;
    expect(problems(l)).toEqual([]);
  });

  it("refuses a completed attempt charged below a reported or computed cost", () => {
    const l = sampleLedger({ observations: [completedObservation(0, 0.002, { cliReportedCostUsd: 0.003 })] });
    l.budget = { ...l.budget, spentUsd: 0.002 };
    expect(problems(l).join()).toMatch(/chargedUsd: is below cliReportedCostUsd/);
    const m = sampleLedger({ observations: [completedObservation(0, 0.002, { computedCostUsd: 0.004 })] });
    m.budget = { ...m.budget, spentUsd: 0.002 };
    expect(problems(m).join()).toMatch(/chargedUsd: is below computedCostUsd/);
  });

  it("keeps statuses consistent with setup and cost problems", () => {
    const withSetup = sampleLedger({ observations: [completedObservation(0, 0.002, { setupProblems: ["init tools differ"] })] });
    withSetup.budget = { ...withSetup.budget, spentUsd: 0.002 };
    expect(problems(withSetup).join()).toMatch(/completed despite setup problems/);
    const withCost = sampleLedger({ observations: [completedObservation(0, 0.002, { costProblem: "foreign model in modelUsage" })] });
    withCost.budget = { ...withCost.budget, spentUsd: 0.002 };
    expect(problems(withCost).join()).toMatch(/completed despite a cost problem/);
    const noAnswer = sampleLedger({ observations: [completedObservation(0, 0.002, { answer: null })] });
    noAnswer.budget = { ...noAnswer.budget, spentUsd: 0.002 };
    expect(problems(noAnswer).join()).toMatch(/answer: is null; completed means an answer was returned/);
    const silentSetup = sampleLedger({
      status: "blocked",
      statusReason: "setup",
      observations: [completedObservation(0, 0.1, { status: "invalid-setup" })],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0.1, cumulativeCapExceeded: false },
    });
    expect(problems(silentSetup).join()).toMatch(/setupProblems: is empty/);
    const silentCost = sampleLedger({
      status: "blocked",
      statusReason: "cost",
      observations: [completedObservation(0, 0.1, { status: "invalid-cost" })],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0.1, cumulativeCapExceeded: false },
    });
    expect(problems(silentCost).join()).toMatch(/costProblem: is null/);
  });

  it("requires the budget to count open reservations as spent, so a crash never under-counts", () => {
    const l = twoAttempts();
    l.budget.spentUsd = 0.002; // settled charges only: the open reservation is missing
    expect(problems(l).join()).toMatch(/budget\.spentUsd: is 0\.002, but settled charges plus open reservations sum to 0\.102/);
    const m = twoAttempts();
    m.budget.reservedUsd = 0;
    expect(problems(m).join()).toMatch(/budget\.reservedUsd: is 0, but the open reservations sum to 0\.1/);
    expect(budgetTotalsPico(twoAttempts().observations)).toEqual({ reserved: 100_000_000_000n, spent: 102_000_000_000n });
  });

  it("requires cumulativeCapExceeded once the spend passes the cap", () => {
    const over = sampleLedger({
      observations: [completedObservation(0, 1.2)],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 1.2, cumulativeCapExceeded: false },
    });
    expect(problems(over).join()).toMatch(/cumulativeCapExceeded: is false although spentUsd passed capUsd/);
  });

  it("blocks the run once any attempt ends other than completed, and a blocked run says why", () => {
    const failed = completedObservation(0, 0.1, { status: "timed-out" });
    const budget = { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0.1, cumulativeCapExceeded: false };
    expect(problems(sampleLedger({ observations: [failed], budget })).join()).toMatch(/status: is 'running' but observations\[0\] is timed-out/);
    expect(problems(sampleLedger({ status: "blocked", observations: [failed], budget })).join()).toMatch(/statusReason: a blocked run must say why/);
    expect(problems(sampleLedger({ status: "blocked", statusReason: "attempt 0 timed out", observations: [failed], budget }))).toEqual([]);
  });

  it("refuses awaiting-adjudication while a reservation is open", () => {
    const l = twoAttempts();
    l.status = "awaiting-adjudication";
    expect(problems(l).join()).toMatch(/awaiting-adjudication needs every observation settled and completed/);
  });

  it("keeps observations in run order with only the newest unsettled", () => {
    const l = twoAttempts();
    l.observations[1]!.index = 2;
    expect(problems(l).join()).toMatch(/observations\[1\]\.index: is 2, expected 1/);
    const m = sampleLedger({
      observations: [reservedObservation(0), completedObservation(1, 0.002)],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0.1, spentUsd: 0.102, cumulativeCapExceeded: false },
    });
    expect(problems(m).join()).toMatch(/observations\[0\]\.phase: only the last observation may be unsettled/);
  });

  it("with --concurrency N several observations may hold open reservations at once, never more than N, each counted as spent", () => {
    const openFirst = [reservedObservation(0), completedObservation(1, 0.002), reservedObservation(2)];
    const budget = { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0.2, spentUsd: 0.202, cumulativeCapExceeded: false };
    const scheduling = (concurrency: number) => ({ concurrency, pairs: "together" as const, rateEvents: [] });
    expect(problems(sampleLedger({ observations: openFirst, budget, scheduling: scheduling(2) }))).toEqual([]);
    expect(problems(sampleLedger({ observations: openFirst, budget, scheduling: scheduling(4) }))).toEqual([]);
    // Two open at concurrency 1 (or in a ledger without scheduling) is a runner bug.
    expect(problems(sampleLedger({ observations: openFirst, budget, scheduling: scheduling(1) })).join()).toMatch(/2 observations are unsettled, but at most 1 attempts run at once/);
    expect(problems(sampleLedger({ observations: openFirst, budget })).join()).toMatch(/observations\[0\]\.phase: only the last observation may be unsettled/);
    const three = [reservedObservation(0), reservedObservation(1), reservedObservation(2)];
    expect(problems(sampleLedger({ observations: three, budget: { ...budget, reservedUsd: 0.3, spentUsd: 0.3 }, scheduling: scheduling(2) })).join()).toMatch(
      /3 observations are unsettled, but at most 2/,
    );
    // The arithmetic counts every open reservation.
    expect(problems(sampleLedger({ observations: openFirst, budget: { ...budget, reservedUsd: 0.1, spentUsd: 0.102 }, scheduling: scheduling(2) })).join()).toMatch(
      /budget\.reservedUsd: is 0\.1, but the open reservations sum to 0\.2/,
    );
  });

  it("records the cli version check: probed must equal expected, and the image is required", () => {
    expect(problems(sampleLedger({ cliVersion: "2.1.297" })).join()).toMatch(/cliVersion: '2\.1\.297' differs from expectedCliVersion '2\.1\.296'/);
    expect(problems(sampleLedger({ cliVersion: null })).join()).toMatch(/cli transport records the probed and the expected CLI version/);
    expect(problems(sampleLedger({ image: null })).join()).toMatch(/image: the cli transport records the image/);
    const httpBudget = { capUsd: 1, attemptBudgetUsd: null, reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false };
    expect(problems(sampleLedger({ transport: "http", cliVersion: null, expectedCliVersion: null, image: null, budget: httpBudget }))).toEqual([]);
  });

  it("refuses an observation whose transport differs from the run's", () => {
    const l = twoAttempts();
    l.observations[1]!.transport = "http";
    expect(problems(l).join()).toMatch(/observations\[1\]\.transport: differs from the run's transport 'cli'/);
  });

  it("refuses a reservation above the attempt budget and bad hashes", () => {
    const l = twoAttempts();
    l.observations[1]!.reservationUsd = 0.2;
    l.budget = { ...l.budget, reservedUsd: 0.2, spentUsd: 0.202 };
    expect(problems(l).join()).toMatch(/reservationUsd: exceeds attemptBudgetUsd/);
    expect(problems(sampleLedger({ runnerHash: "ABC" })).join()).toMatch(/runnerHash: must be a lowercase hex sha256/);
    expect(problems(sampleLedger({ corpus: [{ repository: "x", pin: "b".repeat(40), root: "relative/path" }] })).join()).toMatch(/corpus\[0\]\.root: must be an absolute path/);
  });
});
