/**
 * `ledger check` (issue 10): the schema with its arithmetic, an interrupted run reported for what
 * it is, and the file never touched. Ledgers here are built with the runner's own constructors.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { assertReadableLedger, checkLedger as checkLedgerBytes, LEDGER_CHECK_EXIT } from "../../src/ledger/check.ts";

/** Reads the ledger at `path` and checks it, as `study-runner ledger check` does. */
const checkLedger = async (path: string) => checkLedgerBytes(path, await assertReadableLedger(path));
import type { Ledger } from "../../src/ledger/schema.ts";
import { checkOutputPath } from "../../src/ledger/store.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { completedObservation, reservedObservation, sampleLedger } from "../support/ledger-sample.ts";

const ANSWER = "PRIVATE-ANSWER-7f3a: the limit is in src/limits.ts";

let dir = "";
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "sr-ledger-check-"));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

let n = 0;
async function write(content: Ledger | string): Promise<string> {
  const path = join(dir, `ledger-${++n}.json`);
  await writeFile(path, typeof content === "string" ? content : JSON.stringify(content, null, 2), { mode: 0o600 });
  return path;
}

const finished = () =>
  sampleLedger({
    status: "awaiting-adjudication",
    observations: [completedObservation(0, 0.002, { answer: ANSWER }), completedObservation(1, 0.003, { answer: ANSWER })],
    budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0.005, cumulativeCapExceeded: false },
  });

/** What a runner killed during attempt 2 leaves: attempt 1 settled, attempt 2 running with its reservation open. */
const interrupted = () =>
  sampleLedger({
    status: "running",
    observations: [completedObservation(0, 0.002, { answer: ANSWER }), reservedObservation(1, { phase: "running", startedAt: "2026-11-30T05:02:00.000Z" })],
    budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0.1, spentUsd: 0.102, cumulativeCapExceeded: false },
  });

describe("ledger check", () => {
  it("a finished run: valid, exit 0, spent = settled charges + open reservations", async () => {
    const check = await checkLedger(await write(finished()));
    expect(check).toMatchObject({
      state: "finished",
      valid: true,
      status: "awaiting-adjudication",
      observations: { total: 2, settled: 2, open: 0 },
      openReservation: null,
      problems: [],
    });
    expect(check.arithmetic).toMatchObject({ spentUsd: 0.005, reservedUsd: 0, openReservationsUsd: 0, holds: true });
    expect(check.arithmetic!.settledChargesUsd).toBeCloseTo(0.005, 12);
    expect(LEDGER_CHECK_EXIT[check.state]).toBe(0);
  });

  it("a concurrent run killed with attempts in flight: interrupted, naming every open reservation counted as spent", async () => {
    const ledger = sampleLedger({
      status: "running",
      scheduling: { concurrency: 4, pairs: "together", rateEvents: [] },
      observations: [
        reservedObservation(0, { phase: "running", startedAt: "2026-11-30T05:02:00.000Z" }),
        completedObservation(1, 0.002, { answer: ANSWER }),
        reservedObservation(2, { phase: "running", startedAt: "2026-11-30T05:02:01.000Z" }),
        reservedObservation(3),
      ],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0.3, spentUsd: 0.302, cumulativeCapExceeded: false },
    });
    const check = await checkLedger(await write(ledger));
    expect(check).toMatchObject({ state: "interrupted", valid: true, observations: { total: 4, settled: 1, open: 3 }, problems: [] });
    expect(check.openReservations.map((o) => [o.index, o.phase])).toEqual([
      [0, "running"],
      [2, "running"],
      [3, "reserved"],
    ]);
    expect(check.verdict).toMatch(/observations 0 \(phase running, 0\.1 USD\), 2 \(phase running, 0\.1 USD\), 3 \(phase reserved, 0\.1 USD\) are unsettled; their reservations are counted as spent/);
    expect(check.arithmetic!.holds).toBe(true);
    expect(check.arithmetic!.openReservationsUsd).toBeCloseTo(0.3, 12);
  });

  // contract: R160
  it("run given an interrupted ledger as --output names every open attempt and points to ledger check; a finished one is only 'already exists'", async () => {
    const ledger = sampleLedger({
      status: "running",
      scheduling: { concurrency: 4, pairs: "together", rateEvents: [] },
      observations: [reservedObservation(0, { phase: "running", startedAt: "2026-11-30T05:02:00.000Z" }), completedObservation(1, 0.002, { answer: ANSWER }), reservedObservation(2)],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0.2, spentUsd: 0.202, cumulativeCapExceeded: false },
    });
    const context = { checkouts: [], projectRoot: PROJECT_ROOT };
    const path = await write(ledger);
    const [problem, ...rest] = await checkOutputPath(path, context);
    expect(rest).toEqual([]);
    const [o0, , o2] = ledger.observations;
    expect(problem).toContain(`--output ${path} already exists; a ledger is never overwritten or reused: choose a new file name. It is the ledger of an interrupted study run`);
    expect(problem).toContain(`attempt 0 (task ${o0!.task}, scenario ${o0!.scenario}, repetition ${o0!.repetition}) is open (phase running), its reservation of 0.1 USD counted as spent`);
    expect(problem).toContain(`attempt 2 (task ${o2!.task}, scenario ${o2!.scenario}, repetition ${o2!.repetition}) is open (phase reserved)`);
    expect(problem).toContain(`\`study-runner ledger check ${path}\``);
    expect(problem).not.toContain(ANSWER);
    const done = await write(finished());
    expect(await checkOutputPath(done, context)).toEqual([`--output ${done} already exists; a ledger is never overwritten or reused: choose a new file name`]);
  });

  it("a run killed during an attempt: interrupted (exit 4), naming the open reservation counted as spent", async () => {
    const check = await checkLedger(await write(interrupted()));
    expect(check).toMatchObject({
      state: "interrupted",
      valid: true,
      status: "running",
      observations: { total: 2, settled: 1, open: 1 },
      openReservation: { index: 1, phase: "running", reservationUsd: 0.1 },
      problems: [],
    });
    expect(check.arithmetic).toMatchObject({ spentUsd: 0.102, openReservationsUsd: 0.1, holds: true });
    expect(check.verdict).toMatch(/^interrupted: status running .*observation 1 is unsettled \(phase running\); its reservation of 0\.1 USD is counted as spent/);
    expect(LEDGER_CHECK_EXIT[check.state]).toBe(4);
  });

  it("a run killed before its first reservation (the header only): interrupted with nothing open", async () => {
    const check = await checkLedger(await write(sampleLedger()));
    expect(check).toMatchObject({ state: "interrupted", valid: true, openReservation: null, observations: { total: 0, settled: 0, open: 0 } });
    expect(check.verdict).toMatch(/no attempt was open/);
  });

  it("a run blocked by a runner fault keeps its unsettled attempt charged: finished, and says so", async () => {
    const ledger = { ...interrupted(), status: "blocked" as const, statusReason: "attempt 2 stopped by a fault of the runner: engine gone" };
    const check = await checkLedger(await write(ledger));
    expect(check).toMatchObject({ state: "finished", valid: true, openReservation: { index: 1, reservationUsd: 0.1 } });
    expect(check.verdict).toMatch(/^finished: blocked \(attempt 2 stopped by a fault of the runner: engine gone\); observation 1 is unsettled/);
  });

  it("an under-counted spend is invalid (exit 1): spent below the charges plus the open reservation", async () => {
    const ledger = interrupted();
    ledger.budget.spentUsd = 0.002; // the open reservation left out
    const check = await checkLedger(await write(ledger));
    expect(check.state).toBe("invalid");
    expect(LEDGER_CHECK_EXIT[check.state]).toBe(1);
    expect(check.arithmetic).toMatchObject({ spentUsd: 0.002, holds: false });
    expect(check.problems.join("\n")).toMatch(/^budget\.spentUsd: is 0\.002, but settled charges plus open reservations sum to 0\.102/m);
  });

  it("the arithmetic is still checked when another field breaks the schema first", async () => {
    const ledger = interrupted() as unknown as Record<string, any>;
    ledger.budget.reservedUsd = 0;
    ledger.budget.spentUsd = 0.002;
    ledger.runnerHash = 42; // a type error: zod's cross-field rules then do not run
    const check = await checkLedger(await write(ledger as Ledger));
    expect(check.state).toBe("invalid");
    expect(check.problems.some((p) => p.startsWith("runnerHash:"))).toBe(true);
    expect(check.problems.some((p) => /^budget: spentUsd 0\.002 USD and reservedUsd 0 USD do not equal settled charges 0\.002 USD plus open reservations 0\.1 USD/.test(p))).toBe(true);
  });

  it("a second unsettled observation (two attempts at once) is invalid", async () => {
    const ledger = interrupted();
    ledger.observations[0] = reservedObservation(0);
    ledger.budget = { ...ledger.budget, reservedUsd: 0.2, spentUsd: 0.2 };
    const check = await checkLedger(await write(ledger));
    expect(check.state).toBe("invalid");
    expect(check.problems.join("\n")).toMatch(/observations\[0\]\.phase: only the last observation may be unsettled/);
  });

  it("a torn or empty file is invalid without quoting it (it holds answers)", async () => {
    const text = JSON.stringify(finished(), null, 2);
    const torn = await checkLedger(await write(text.slice(0, text.indexOf(ANSWER) + 20)));
    expect(torn).toMatchObject({ state: "invalid", valid: false, arithmetic: null });
    expect(torn.problems).toEqual([expect.stringMatching(/not valid JSON/)]);
    expect(JSON.stringify(torn)).not.toContain("PRIVATE-ANSWER");
    expect((await checkLedger(await write(""))).problems).toEqual(["the file is empty"]);
    expect((await checkLedger(await write("[1,2]"))).problems).toEqual(["the file is JSON but not an object"]);
  });

  it("never prints an answer, whatever the problems", async () => {
    const ledger = finished() as unknown as Record<string, any>;
    ledger.observations[0].answer = { text: ANSWER }; // wrong type
    ledger.observations[1].unknownField = ANSWER;
    ledger.statusReason = 7;
    const check = await checkLedger(await write(ledger as Ledger));
    expect(check.state).toBe("invalid");
    expect(check.problems.length).toBeGreaterThanOrEqual(3);
    expect(JSON.stringify(check)).not.toContain("PRIVATE-ANSWER");
  });

  it("never writes: bytes, mtime and the folder's entries are unchanged, also for an interrupted or invalid ledger", async () => {
    const sub = await mkdtemp(join(dir, "ro-"));
    const paths = [join(sub, "interrupted.json"), join(sub, "invalid.json")];
    await writeFile(paths[0]!, JSON.stringify(interrupted()), { mode: 0o600 });
    await writeFile(paths[1]!, "{ torn", { mode: 0o600 });
    const before = await Promise.all(paths.map(async (p) => ({ bytes: await readFile(p), mtime: (await stat(p)).mtimeMs, ctime: (await stat(p)).ctimeMs })));
    const entries = await readdir(sub);
    await new Promise((r) => setTimeout(r, 20));
    for (const p of paths) await checkLedger(p);
    const after = await Promise.all(paths.map(async (p) => ({ bytes: await readFile(p), mtime: (await stat(p)).mtimeMs, ctime: (await stat(p)).ctimeMs })));
    expect(after).toEqual(before);
    expect(await readdir(sub)).toEqual(entries);
  });

  it("a path that cannot be read is a usage error naming the path", async () => {
    await expect(checkLedger(join(dir, "missing.json"))).rejects.toThrow(/cannot read ledger .*missing\.json: ENOENT/);
  });
});
