/**
 * SIGKILL of the runner at each checkpoint between its ledger writes (issue 10), through the
 * shipped command on the real engine. The test-only hook STUDY_RUNNER_TEST_KILL_AT makes the
 * runner kill itself at an exact point (src/study/run.ts). After each kill: the ledger parses,
 * `ledger check` calls the run interrupted with its arithmetic intact, the spend is never below
 * the truth, and the next run on the same login and TMPDIR removes the container, export and
 * attempt HOME the dead run left behind.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Ledger } from "../../src/ledger/schema.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { runCli } from "../support/cli.ts";
import {
  containersCreatedBy,
  containersOfRun,
  exists,
  freshLogin,
  ledgerOf,
  leftovers,
  prepareRun,
  preparePipeline,
  runPipeline,
  startPipeline,
  RESERVATION_USD,
  type Pipeline,
  type PreparedRun,
} from "../support/pipeline.ts";

let p: Pipeline;
beforeAll(async () => {
  p = await preparePipeline("checkpoints");
}, 300_000);
afterAll(() => p?.cleanup());

/** A dead run's lock is taken over after 2 s instead of 30 s, so the next run does not wait long. */
const FAST_STALE = ["--test-login-lock-stale-ms", "2000"];

interface Killed {
  /** The killed run's command, --output included. */
  run: PreparedRun;
  ledger: Ledger | undefined;
  ledgerText: string | undefined;
  pid: number;
  /** When the killed run was started (Date.now()). */
  startedAt: number;
  tmp: string;
  loginDir: string;
  /** Containers labelled with the dead runner's pid, right after the kill. */
  containers: Array<{ id: string; running: boolean }>;
  leftovers: string[];
  check: { code: number | null; json: Record<string, any> };
}

async function killAt(point: string): Promise<Killed> {
  const loginDir = await freshLogin(p);
  const run = await prepareRun(p, { loginDir, env: { STUDY_RUNNER_TEST_KILL_AT: point }, args: FAST_STALE });
  const startedAt = Date.now();
  const started = startPipeline(run);
  const r = await started.done;
  // Killed by a signal (its own SIGKILL): no exit code, and nothing printed on stdout.
  expect(r.code, r.stderr).toBeNull();
  expect(r.stdout).toBe("");
  const containers = (await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid) })).map((c) => ({ id: c.id, running: c.running }));
  const ledgerText = (await exists(run.output)) ? await readFile(run.output, "utf8") : undefined;
  const ledger = ledgerText === undefined ? undefined : await ledgerOf(run); // readLedger validates schema and arithmetic
  const c = await runCli(["ledger", "check", run.output, "--json"]);
  return {
    run,
    ledger,
    ledgerText,
    pid: started.pid,
    startedAt,
    tmp: run.tmp,
    loginDir,
    containers,
    leftovers: await leftovers(run.tmp, started.pid),
    check: { code: c.code, json: c.stdout ? JSON.parse(c.stdout) : {} },
  };
}

/** The next run on the same login and TMPDIR: it completes and leaves nothing of the dead run. */
async function nextRunCleansUp(k: Killed): Promise<Ledger> {
  const next = await runPipeline(p, { loginDir: k.loginDir, tmp: k.tmp, args: FAST_STALE });
  expect(next.code, next.stderr).toBe(0);
  expect(await p.runtime.listByLabel({ [LABELS.pid]: String(k.pid) })).toEqual([]);
  expect(await leftovers(k.tmp)).toEqual([]);
  expect(await exists(join(k.loginDir, ".credentials.json.lock"))).toBe(false);
  const ledger = await ledgerOf(next.run);
  expect(await containersOfRun(p, ledger.runId)).toEqual([]);
  return ledger;
}

const leftoverKinds = (names: string[]) => names.map((n) => n.replace(/^study-runner-(\w+)-.*$/, "$1")).sort();
/**
 * The dead run's folders besides `own`: once the attempt's container has started, the next
 * attempt's export is being made ahead (src/util/ahead.ts); its folder exists unless the kill
 * came before git had listed the tree. The next run's reaper removes it like the others.
 */
function expectOwnAndMadeAhead(names: string[], own: string[]) {
  const kinds = leftoverKinds(names);
  expect([own, [...own, "export"].sort()].map((k) => JSON.stringify(k))).toContain(JSON.stringify(kinds));
}

function expectInterrupted(k: Killed, open: { phase: string } | null) {
  expect(k.check.code).toBe(4);
  expect(k.check.json).toMatchObject({ state: "interrupted", valid: true, status: "running", arithmetic: { holds: true } });
  expect(k.check.json.openReservation).toEqual(open === null ? null : { index: 0, phase: open.phase, reservationUsd: RESERVATION_USD });
}

describe("the runner killed with SIGKILL at each checkpoint", () => {
  it("before the reservation is written: the ledger is the header only, nothing spent, nothing left", async () => {
    const k = await killAt("before-reserve-write");
    expect(k.ledger).toMatchObject({ status: "running", observations: [], budget: { spentUsd: 0, reservedUsd: 0 } });
    expectInterrupted(k, null);
    expect(k.containers).toEqual([]);
    expect(k.leftovers).toEqual([]);
    await nextRunCleansUp(k);
  }, 180_000);

  it("after the reservation is written, before anything started: the reservation is counted as spent", async () => {
    const k = await killAt("after-reserve-write");
    expect(k.ledger!.observations.map((o) => o.phase)).toEqual(["reserved"]);
    expect(k.ledger!.budget).toMatchObject({ reservedUsd: RESERVATION_USD, spentUsd: RESERVATION_USD });
    expectInterrupted(k, { phase: "reserved" });
    expect(k.containers).toEqual([]);
    expect(k.leftovers).toEqual([]);
    await nextRunCleansUp(k);
  }, 180_000);

  it("after the export and the login copy, before the container starts: the next run removes both", async () => {
    const k = await killAt("before-container-start");
    expect(k.ledger!.observations.map((o) => o.phase)).toEqual(["running"]);
    expect(k.ledger!.budget.spentUsd).toBe(RESERVATION_USD);
    expectInterrupted(k, { phase: "running" });
    expect(k.containers).toEqual([]);
    expect(leftoverKinds(k.leftovers)).toEqual(["export", "home"]);
    await nextRunCleansUp(k);
  }, 180_000);

  it("during the attempt: the container outlives the runner, the reservation covers what it spent, the next run removes it", async () => {
    const k = await killAt("during-attempt");
    expect(k.ledger!.observations.map((o) => o.phase)).toEqual(["running"]);
    expectInterrupted(k, { phase: "running" });
    expect(k.containers).toHaveLength(1);
    expectOwnAndMadeAhead(k.leftovers, ["export", "home"]);
    const next = await nextRunCleansUp(k);
    // The same attempt, run to its end by the next run, cost this much: the dead run's ledger never says less.
    const truth = next.observations[0]!.chargedUsd!;
    expect(truth).toBeGreaterThan(0);
    expect(k.ledger!.budget.spentUsd).toBeGreaterThanOrEqual(truth);
  }, 180_000);

  // contract: R160
  it("during the attempt, then run on the same --output: refused with exit 2, naming the open attempt and pointing to ledger check; the ledger is untouched", async () => {
    const k = await killAt("during-attempt");
    expectInterrupted(k, { phase: "running" });
    const open = k.ledger!.observations[0]!;
    expect(k.check.json.verdict).toContain("observation 0 is unsettled (phase running)");
    // The same command again, without the kill: it refuses before anything starts.
    let againPid = 0;
    const before = Date.now();
    const again = await runCli(k.run.args, {
      env: { ...k.run.env, STUDY_RUNNER_TEST_KILL_AT: undefined },
      timeoutMs: k.run.timeoutMs,
      onSpawn: (pid) => (againPid = pid),
    });
    expect(again.code, again.stderr).toBe(2);
    expect(again.stdout).toBe("");
    expect(again.stderr).toContain(`--output ${k.run.output} already exists; a ledger is never overwritten or reused: choose a new file name. It is the ledger of an interrupted study run`);
    expect(again.stderr).toContain(
      `attempt 0 (task ${open.task}, scenario ${open.scenario}, repetition ${open.repetition}) is open (phase running), its reservation of ${RESERVATION_USD} USD counted as spent`,
    );
    expect(again.stderr).toContain(`\`study-runner ledger check ${k.run.output}\``);
    expect(await readFile(k.run.output, "utf8")).toBe(k.ledgerText);
    expect(againPid).toBeGreaterThan(0);
    // It started nothing: the engine created no container for it. (Not "the dead run's container is
    // still there": another test file's run, side by side on this engine, may have reaped it.)
    expect(await containersCreatedBy(againPid, before, Date.now())).toEqual([]);
    // The check can see a creation: the dead run's image probe and attempt containers are in the same log.
    const dead = await containersCreatedBy(k.pid, k.startedAt, Date.now());
    expect(dead.length).toBeGreaterThanOrEqual(2);
    expect(dead).toEqual(expect.arrayContaining(k.containers.map((c) => c.id)));
    await nextRunCleansUp(k);
  }, 180_000);

  it("after the attempt, before the final write: the container and its folders are already gone, the spend still covers the attempt", async () => {
    const k = await killAt("after-attempt-before-write");
    // The outcome was known in memory only: on disk the attempt is still open with its reservation.
    expect(k.ledger!.observations.map((o) => [o.phase, o.status])).toEqual([["running", null]]);
    expectInterrupted(k, { phase: "running" });
    expect(k.containers).toEqual([]);
    // Of the dead run, only the next attempt's export made ahead may be left.
    expectOwnAndMadeAhead(k.leftovers, []);
    const next = await nextRunCleansUp(k);
    expect(k.ledger!.budget.spentUsd).toBeGreaterThanOrEqual(next.observations[0]!.chargedUsd!);
  }, 180_000);
});
