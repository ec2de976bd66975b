/**
 * Attempts in flight through the shipped command on the real engine, with the fake claude image
 * (no login is used, so --concurrency is allowed): a failure in the middle of a concurrent run,
 * with the ledger file read in a loop all along; and SIGKILL of the runner at random moments of
 * concurrent runs, each ledger then checked by `ledger check`, and nothing of the dead runs left
 * after the next run.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { LedgerSchema, type Ledger } from "../../src/ledger/schema.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import type { ContainerSummary } from "../../src/sandbox/port.ts";
import { type CliResult, runCli, runCompiledCli } from "../support/cli.ts";
import {
  exists,
  freshLogin,
  leftovers,
  ledgerOf,
  prepareRun,
  preparePipeline,
  repositoryInit,
  runPipeline,
  startPipeline,
  waitFor,
  RESERVATION_USD,
  type Pipeline,
  type PreparedRun,
} from "../support/pipeline.ts";

let p: Pipeline;
beforeAll(async () => {
  p = await preparePipeline("concurrency");
}, 300_000);
afterAll(() => p?.cleanup());

/** A dead run's lock is taken over after 2 s instead of 30 s. */
const FAST_STALE = ["--test-login-lock-stale-ms", "2000"];
const CAP = 1;

/** A small deterministic generator (mulberry32): the kill moments are random but repeatable. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function holdsUnderCap(l: Ledger): number {
  const open = l.observations.filter((o) => o.phase !== "settled");
  return open.reduce((t, o) => t + o.reservationUsd, 0) + l.observations.reduce((t, o) => t + (o.chargedUsd ?? 0), 0);
}

describe("attempts in flight on the real engine", () => {
  it("an attempt that fails mid-run: no new starts, the attempts in flight settled, blocked, exit 1; the ledger valid and under the cap at every moment", async () => {
    const run = await prepareRun(p, {
      mode: "run",
      behaviour: { default: { kind: "ok", delayMs: 1500 }, attempts: { "4": { kind: "exit", code: 1 } } },
      args: ["--concurrency", "4", "--quiet"],
    });
    const started = startPipeline(run);
    const snapshots: Ledger[] = [];
    const problems: string[] = [];
    let done = false;
    void started.done.then(() => (done = true));
    while (!done) {
      const text = await readFile(run.output, "utf8").catch(() => undefined);
      if (text) {
        try {
          const parsed = LedgerSchema.safeParse(JSON.parse(text));
          if (parsed.success) snapshots.push(parsed.data);
          else problems.push(parsed.error.issues.map((i) => i.message).join("; "));
        } catch {
          // Created empty, then filled: a torn read only before the first complete write.
          if (snapshots.length > 0) problems.push("torn read");
        }
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    const r = await started.done;
    expect(r.code, r.stderr).toBe(1);
    expect(problems).toEqual([]);
    expect(snapshots.length).toBeGreaterThan(5);
    for (const s of snapshots) expect(holdsUnderCap(s)).toBeLessThanOrEqual(CAP + 1e-9);
    expect(Math.max(...snapshots.map((s) => s.observations.filter((o) => o.phase !== "settled").length))).toBeGreaterThan(1);
    const ledger = await ledgerOf(run);
    expect(ledger.status).toBe("blocked");
    expect(ledger.statusReason).toMatch(/^attempt 5 \(.*\) ended /);
    // Attempt 5 (index 4) started with the third pair; whatever ran beside it was settled, nothing after.
    expect(ledger.observations.every((o) => o.phase === "settled")).toBe(true);
    expect(ledger.observations.length).toBeLessThan(36);
    expect(ledger.observations.length % 2).toBe(0); // pairs are never half-run
    expect(ledger.observations.filter((o) => o.status !== "completed").map((o) => o.index)).toEqual([4]);
    const check = await runCompiledCli(["ledger", "check", run.output, "--json"]);
    expect(check.code).toBe(0);
  }, 300_000);

  // contract: R161
  it("attempts that cost more than their reservation at --concurrency 4: the cap flag is set as spend passes the cap in flight, blocked, exit 1 with a summary, never exit 3", async () => {
    // 600,000 input tokens in the first turn: about 0.3 USD at the upper tier, three times the 0.1 USD
    // reservation, yet below the 0.4 USD cap. The first settlement's charge alone stays under the cap
    // while the three reservations still open take the spend past it.
    const turnUsage = [{ input: 600_000 }];
    const run = await prepareRun(p, {
      mode: "run",
      behaviour: { default: { kind: "ok", delayMs: 300, turnUsage } },
      args: ["--concurrency", "4", "--quiet"],
      env: { STUDY_BUDGET_USD: "0.4" },
    });
    const r = await runCli(run.args, { env: run.env, timeoutMs: run.timeoutMs });
    expect(r.stderr).not.toMatch(/internal error/);
    expect(r.code, r.stderr).toBe(1);
    const ledger = await ledgerOf(run);
    expect(ledger.status).toBe("blocked");
    // More than one attempt was in flight when the first one settled above its reservation.
    expect(ledger.observations.length).toBeGreaterThan(1);
    expect(ledger.budget.spentUsd).toBeGreaterThan(ledger.budget.capUsd);
    expect(ledger.budget.cumulativeCapExceeded).toBe(true);
    expect(ledger.observations.some((o) => o.chargedUsd! > o.reservationUsd)).toBe(true);
    // The summary on stdout says how it ended.
    expect(r.stdout).toMatch(/blocked/);
    const check = await runCompiledCli(["ledger", "check", run.output]);
    expect(check.code, check.stdout).toBe(0);
  }, 300_000);

  it("SIGINT with four attempts in flight: no new start, every running container stopped and charged its reservation, exit 130, nothing left", async () => {
    const run = await prepareRun(p, {
      mode: "run",
      loginDir: await freshLogin(p),
      behaviour: { default: { kind: "sleep", seconds: 120, events: [repositoryInit()] } },
      args: ["--concurrency", "4"],
    });
    const started = startPipeline(run);
    // Two pairs in flight: four running containers of this runner.
    await waitFor(
      "four running attempt containers",
      async () => {
        const found = (await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid) })).filter((c) => c.running && c.labels[LABELS.attempt] !== "probe");
        return found.length >= 4 ? found : undefined;
      },
      120_000,
    );
    started.child.kill("SIGINT");
    const r = await started.done;
    expect(r.code, r.stderr).toBe(130);
    const ledger = await ledgerOf(run);
    expect(ledger.status).toBe("blocked");
    expect(ledger.statusReason).toMatch(/SIGINT/);
    expect(ledger.observations).toHaveLength(4);
    for (const o of ledger.observations) {
      expect(o.phase).toBe("settled");
      expect(o.status).not.toBe("completed");
      expect(o.chargedUsd).toBeGreaterThanOrEqual(RESERVATION_USD);
    }
    expect(ledger.budget).toMatchObject({ reservedUsd: 0, spentUsd: 4 * RESERVATION_USD });
    expect(await p.runtime.listByLabel({ [LABELS.run]: ledger.runId })).toEqual([]);
    expect(await leftovers(run.tmp)).toEqual([]);
  }, 300_000);

  it("SIGKILL at random moments of 20 concurrent runs: every ledger passes ledger check, every started attempt's reservation still charged, nothing left after the next run", async () => {
    const next = random(20261201);
    const loginDir = await freshLogin(p);
    const tmp = join(p.work, "kill-tmp");
    const dead: number[] = [];
    const killed: Array<{ trial: number; run: PreparedRun; containers: ContainerSummary[]; check: Promise<CliResult> | undefined }> = [];
    for (let trial = 0; trial < 20; trial++) {
      const run = await prepareRun(p, {
        mode: "run",
        loginDir,
        tmp,
        behaviour: { default: { kind: "ok", delayMs: 400 } },
        args: ["--concurrency", String(2 + (trial % 3) * 2), "--quiet", ...FAST_STALE],
      });
      const started = startPipeline(run);
      // A random moment of the run: after its ledger exists (preflight takes a few seconds on a
      // loaded machine), anywhere from the first reservation to well into the attempts.
      let ended = false;
      void started.done.then(() => (ended = true));
      while (!ended && !(await exists(run.output))) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, Math.floor(next() * 12_000)));
      started.child.kill("SIGKILL");
      await started.done;
      dead.push(started.pid);
      // Listed at once: the next run's preflight removes the containers of runners that are gone.
      const containers = await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid) });
      // The dead run's ledger no longer changes: its `ledger check` runs beside the next trial.
      const check = (await exists(run.output)) ? runCompiledCli(["ledger", "check", run.output, "--json"]) : undefined;
      killed.push({ trial, run, containers, check });
    }
    const states: string[] = [];
    for (const { trial, run, containers, check } of killed) {
      if (check === undefined) {
        states.push("no ledger");
        continue;
      }
      const c = await check;
      const json = JSON.parse(c.stdout) as { state: string; valid: boolean; arithmetic: { holds: boolean } | null; problems: string[] };
      // A kill in the middle of the exclusive create can leave an empty file: the only torn state.
      if (json.state === "invalid" && (await readFile(run.output, "utf8")) === "") {
        states.push("empty");
        continue;
      }
      expect(json.problems, `trial ${trial}`).toEqual([]);
      expect(json.valid).toBe(true);
      expect([0, 4]).toContain(c.code);
      states.push(json.state);
      const ledger = await ledgerOf(run);
      // Every container the dead runner started belongs to an attempt whose reservation is on disk,
      // written before it started, and still counted as spent (settled charges + open reservations).
      for (const container of containers) {
        const o = ledger.observations[Number(container.labels[LABELS.attempt])];
        expect(o, `trial ${trial}: container of attempt ${container.labels[LABELS.attempt]} without its reservation`).toBeDefined();
        expect(o!.phase).not.toBe("reserved");
        expect(o!.chargedUsd ?? o!.reservationUsd).toBeGreaterThan(0);
      }
      for (const o of ledger.observations.filter((x) => x.phase !== "settled")) expect(o.reservationUsd).toBe(RESERVATION_USD);
      expect(holdsUnderCap(ledger)).toBeLessThanOrEqual(CAP + 1e-9);
    }
    // The kills landed at different moments, some with attempts open.
    expect(states.filter((s) => s === "interrupted").length).toBeGreaterThan(10);
    const after = await runPipeline(p, { loginDir, tmp, args: ["--quiet", ...FAST_STALE] });
    expect(after.code, after.stderr).toBe(0);
    for (const pid of dead) expect(await p.runtime.listByLabel({ [LABELS.pid]: String(pid) })).toEqual([]);
    expect(await leftovers(tmp)).toEqual([]);
    expect(await exists(join(loginDir, ".credentials.json.lock"))).toBe(false);
  }, 900_000);
});
