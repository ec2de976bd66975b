import { describe, expect, it } from "vitest";
import { sumUsd } from "../../src/cost/money.ts";
import { LedgerSchema, type HttpCall, type Ledger, type Observation } from "../../src/ledger/schema.ts";
import { reservedObservation } from "../../src/study/observation.ts";
import { formatIssues } from "../../src/util/zod-errors.ts";
import { sampleLedger } from "../support/ledger-sample.ts";

function problems(ledger: unknown): string[] {
  const parsed = LedgerSchema.safeParse(ledger);
  return parsed.success ? [] : formatIssues(parsed.error.issues);
}

const PIN = "b".repeat(40);
const call = (turn: number, reservationUsd: number, chargedUsd: number | null): HttpCall => ({
  turn,
  requestBytes: 2000,
  inputCeilingTokens: 12192,
  outputCeilingTokens: 1024,
  reservationUsd,
  chargedUsd,
  inputTokens: chargedUsd === null ? null : 1500,
  outputTokens: chargedUsd === null ? null : 40,
  usageComplete: chargedUsd !== null,
  outcome: chargedUsd === null ? null : "message",
  httpStatus: chargedUsd === null ? null : 200,
  problem: null,
});

function httpObservation(index: number, calls: HttpCall[], overrides: Partial<Observation> = {}): Observation {
  const planned = { index, taskId: "t1", taskIndex: 0, repository: "ledgerlite", pin: PIN, scenario: "repository-only", arm: "repository" as const, repetition: 1 };
  const hold = sumUsd(calls.map((c) => c.chargedUsd ?? c.reservationUsd));
  return { ...reservedObservation(planned, { transport: "http", cliVersion: null, expectedCliVersion: null, attemptBudgetUsd: null, reservationUsd: hold }), calls, ...overrides };
}

function httpLedger(observations: Observation[], overrides: Partial<Ledger> = {}): Ledger {
  const open = observations.filter((o) => o.phase !== "settled").map((o) => o.reservationUsd);
  const charged = observations.filter((o) => o.phase === "settled").map((o) => o.chargedUsd ?? 0);
  return sampleLedger({
    transport: "http",
    image: null,
    cliVersion: null,
    expectedCliVersion: null,
    isolation: "client-side-tools",
    prices: { "claude-haiku-5-5": { upper: { input: 1, output: 5 } } },
    budget: { capUsd: 1, attemptBudgetUsd: null, reservedUsd: sumUsd(open), spentUsd: sumUsd([...open, ...charged]), cumulativeCapExceeded: false },
    observations,
    ...overrides,
  });
}

const completed = (index: number) =>
  httpObservation(index, [call(1, 0.0177, 0.0017), call(2, 0.0187, 0.0022)], {
    phase: "settled",
    status: "completed",
    chargedUsd: 0.0039,
    computedCostUsd: 0.0039,
    answer: "an answer",
    usageComplete: true,
  });

describe("ledger schema: the http transport", () => {
  it("accepts a run without image or CLI version, with per-call reservations open and settled", () => {
    expect(problems(httpLedger([]))).toEqual([]);
    // One call settled, the next one reserved and open: the attempt holds charge + reservation.
    expect(problems(httpLedger([completed(0), httpObservation(1, [call(1, 0.0177, 0.0017), call(2, 0.0187, null)], { phase: "running" })]))).toEqual([]);
    expect(problems(httpLedger([completed(0), completed(1)], { status: "awaiting-adjudication" }))).toEqual([]);
  });

  it("requires the observation's hold to be its calls' charges plus the open reservation", () => {
    const wrong = httpObservation(0, [call(1, 0.0177, 0.0017), call(2, 0.0187, null)], { phase: "running" });
    wrong.reservationUsd = 0.0187;
    const l = httpLedger([wrong]);
    expect(problems(l).join()).toMatch(/observations\[0\]\.reservationUsd: is 0\.0187, but the calls hold 0\.0204/);
  });

  it("allows only the last call of an unsettled attempt to be open", () => {
    const early = httpObservation(0, [call(1, 0.0177, null), call(2, 0.0187, 0.002)], { phase: "running" });
    expect(problems(httpLedger([early])).join()).toMatch(/observations\[0\]\.calls\[0\]\.chargedUsd: only the last call/);
    const settledOpen = httpObservation(0, [call(1, 0.0177, null)], { phase: "settled", status: "failed", chargedUsd: 0.0177 });
    expect(problems(httpLedger([settledOpen], { status: "blocked", statusReason: "x" })).join()).toMatch(/calls\[0\]\.chargedUsd: only the last call of an unsettled attempt/);
  });

  it("charges a settled attempt exactly what its calls were charged (a lost call keeps its reservation)", () => {
    const lost = { ...call(2, 0.0187, 0.0187), inputTokens: null, outputTokens: null, usageComplete: false, outcome: "lost" as const, httpStatus: null, problem: "reset" };
    const ok = httpObservation(0, [call(1, 0.0177, 0.0017), lost], { phase: "settled", status: "failed", chargedUsd: 0.0204 });
    expect(problems(httpLedger([ok], { status: "blocked", statusReason: "x" }))).toEqual([]);
    const under = httpObservation(0, [call(1, 0.0177, 0.0017), lost], { phase: "settled", status: "failed", chargedUsd: 0.0017 });
    expect(problems(httpLedger([under], { status: "blocked", statusReason: "x" })).join()).toMatch(/chargedUsd: is 0\.0017, but the calls were charged 0\.0204/);
  });

  it("keeps the transports apart: http has no per-attempt limit and records calls; cli the reverse", () => {
    const withLimit = completed(0);
    withLimit.attemptBudgetUsd = 0.1;
    expect(problems(httpLedger([withLimit], { status: "awaiting-adjudication" })).join()).toMatch(/observations\[0\]\.attemptBudgetUsd: must be null for the http transport/);
    const noCalls = completed(0);
    delete noCalls.calls;
    expect(problems(httpLedger([noCalls], { status: "awaiting-adjudication" })).join()).toMatch(/observations\[0\]\.calls: the http transport records every call/);
    expect(problems(httpLedger([], { budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false } })).join()).toMatch(
      /budget\.attemptBudgetUsd: must be null for the http transport/,
    );
    expect(problems(sampleLedger({ budget: { capUsd: 1, attemptBudgetUsd: null, reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false } })).join()).toMatch(
      /budget\.attemptBudgetUsd: the cli transport reserves a per-attempt limit/,
    );
    // The cli transport still needs its version and image.
    expect(problems(sampleLedger({ cliVersion: null })).join()).toMatch(/cliVersion/);
    expect(problems(sampleLedger({ image: null })).join()).toMatch(/image/);
  });
});
