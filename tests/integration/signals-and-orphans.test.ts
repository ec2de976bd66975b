/**
 * What happens around a run rather than inside an attempt: SIGINT and SIGTERM end the run blocked
 * with the reservation charged, a second signal exits at once without corrupting the ledger, a
 * runner killed outright leaves a parseable ledger and the next run cleans up after it, a login the
 * CLI refreshed inside its container is written back, and two runs share one login in turn. All
 * through the shipped command on the real Docker engine.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readdir, readFile, utimes } from "node:fs/promises";
import { dirname, join } from "node:path";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { runCli } from "../support/cli.ts";
import {
  containersOfRun,
  fileMode,
  freshLogin,
  ledgerOf,
  leftovers,
  prepareRun,
  preparePipeline,
  recordsOf,
  runPipeline,
  startPipeline,
  summaryOf,
  waitForAttemptContainer,
  RESERVATION_USD,
  type Pipeline,
} from "../support/pipeline.ts";

let p: Pipeline;
beforeAll(async () => {
  p = await preparePipeline("signals");
}, 300_000);
afterAll(() => p?.cleanup());

const hang = { attempts: { "0": { kind: "sleep" as const, seconds: 120 } } };
const FAST_STALE = ["--test-login-lock-stale-ms", "2000"];

describe("signals and orphans", () => {
  it("SIGINT during an attempt: exit 130, blocked naming the signal, the reservation charged, no container left", async () => {
    const run = await prepareRun(p, { behaviour: hang, loginDir: await freshLogin(p) });
    const started = startPipeline(run);
    const container = await waitForAttemptContainer(p, started);
    started.child.kill("SIGINT");
    const r = await started.done;
    expect(r.code, r.stderr).toBe(130);
    expect(r.stderr).toMatch(/SIGINT received/);
    expect(summaryOf(r.stdout)).toMatchObject({ status: "blocked", attempts: { run: 1 } });

    const ledger = await ledgerOf(run);
    expect(ledger.status).toBe("blocked");
    expect(ledger.statusReason).toMatch(/SIGINT/);
    expect(ledger.observations).toHaveLength(1);
    const o = ledger.observations[0]!;
    expect(o.phase).toBe("settled");
    expect(o.status).not.toBe("completed");
    expect(o.containerId).toBe(container);
    expect(o.chargedUsd).toBeGreaterThanOrEqual(RESERVATION_USD);
    expect(ledger.budget.spentUsd).toBe(o.chargedUsd);
    expect(await p.runtime.inspect(container)).toBeUndefined();
    expect(await containersOfRun(p, ledger.runId)).toEqual([]);
    expect(await leftovers(run.tmp)).toEqual([]);
  }, 120_000);

  it("a runner killed outright leaves a parseable ledger, and the next run removes its container and folders", async () => {
    const loginDir = await freshLogin(p);
    const killed = await prepareRun(p, { behaviour: hang, loginDir });
    const started = startPipeline(killed);
    const pid = started.pid;
    const container = await waitForAttemptContainer(p, started);
    started.child.kill("SIGKILL");
    await started.done;
    try {
      // Nothing cleaned up after the kill: the container still runs; the export and the HOME with the
      // login copy remain, and the next attempt's export made ahead once its git had listed the tree.
      expect((await p.runtime.inspect(container))?.running).toBe(true);
      const left = (await leftovers(killed.tmp, pid)).map((n) => n.replace(/-[^-]+$/, ""));
      expect([new Set(left)]).toEqual([new Set([`study-runner-export-${pid}`, `study-runner-home-${pid}`])]);
      expect(left.filter((n) => n === `study-runner-home-${pid}`)).toHaveLength(1);
      expect(left.length).toBeLessThanOrEqual(3);
      const ledger = await ledgerOf(killed);
      expect(ledger.status).toBe("running");
      expect(ledger.observations.map((o) => o.phase)).toEqual(["running"]);
      // The open reservation is counted as spent, so a crash never under-counts.
      expect(ledger.budget.reservedUsd).toBe(RESERVATION_USD);
      expect(ledger.budget.spentUsd).toBeGreaterThanOrEqual(RESERVATION_USD);

      // The next run, on the same login (whose lock the dead run still holds) and the same TMPDIR.
      // The dead run's lock is kept fresh, as a runner that died a moment ago leaves it, until the next
      // run says it waits for it; then it goes stale, which the next run sees after its 5 s.
      const nextRun = await prepareRun(p, { loginDir, tmp: killed.tmp, args: ["--test-login-lock-stale-ms", "5000"] });
      const nextStarted = startPipeline(nextRun);
      let nextEnded = false;
      void nextStarted.done.then(() => (nextEnded = true));
      const lockDir = join(loginDir, ".credentials.json.lock");
      while (!nextEnded && !nextStarted.output().stderr.includes("waiting for the CLI login")) {
        const now = new Date();
        await utimes(lockDir, now, now);
        await new Promise((r) => setTimeout(r, 250));
      }
      const next = await nextStarted.done;
      expect(next.code, next.stderr).toBe(0);
      // It says what it waits for instead of going silent until the dead run's lock is stale.
      expect(next.stderr).toMatch(/study-runner: waiting for the CLI login \(held by run run-[^,]+, pid \d+/);
      expect(await containersOfRun(p, ledger.runId)).toEqual([]);
      expect(await leftovers(killed.tmp)).toEqual([]);
    } finally {
      await p.runtime.remove(container); // a no-op unless an assertion failed before the reaper ran
    }
  }, 180_000);

  it("SIGTERM during an attempt: exit 143, blocked naming SIGTERM, the reservation charged, nothing left", async () => {
    const run = await prepareRun(p, { behaviour: hang, loginDir: await freshLogin(p) });
    const started = startPipeline(run);
    const container = await waitForAttemptContainer(p, started);
    started.child.kill("SIGTERM");
    const r = await started.done;
    expect(r.code, r.stderr).toBe(143);
    expect(r.stderr).toMatch(/SIGTERM received; stopping the current attempt/);
    expect(summaryOf(r.stdout)).toMatchObject({ status: "blocked", attempts: { run: 1 } });

    const ledger = await ledgerOf(run);
    expect(ledger.status).toBe("blocked");
    expect(ledger.statusReason).toMatch(/^attempt 1 .* ended failed: interrupted by SIGTERM$/);
    const o = ledger.observations[0]!;
    expect(o).toMatchObject({ phase: "settled", status: "failed", containerId: container });
    expect(o.chargedUsd).toBeGreaterThanOrEqual(RESERVATION_USD);
    expect(ledger.budget).toMatchObject({ reservedUsd: 0, spentUsd: o.chargedUsd });
    expect(await p.runtime.inspect(container)).toBeUndefined();
    expect(await containersOfRun(p, ledger.runId)).toEqual([]);
    expect(await leftovers(run.tmp)).toEqual([]);
    const check = await runCli(["ledger", "check", run.output]);
    expect(check.code, check.stdout).toBe(0);
    expect(check.stdout).toMatch(/: finished: blocked \(attempt 1 .*interrupted by SIGTERM\)/);
  }, 120_000);

  it("a second SIGINT exits at once; the ledger still parses with the reservation charged, and the next run cleans up", async () => {
    const loginDir = await freshLogin(p);
    const run = await prepareRun(p, { behaviour: hang, loginDir, args: FAST_STALE });
    const started = startPipeline(run);
    await waitForAttemptContainer(p, started);
    started.child.kill("SIGINT");
    await new Promise((r) => setTimeout(r, 30));
    const second = Date.now();
    started.child.kill("SIGINT");
    const r = await started.done;
    expect(Date.now() - second).toBeLessThan(3_000);
    expect(r.code, r.stderr).toBe(130);
    // Cut short: no summary, and one notice only (the second signal waits for nothing, not even a message).
    expect(r.stdout).toBe("");
    expect(r.stderr.match(/SIGINT received/g)).toHaveLength(1);

    // The ledger is whichever complete atomic write came last: the attempt open (running) or settled (blocked).
    const ledger = await ledgerOf(run);
    expect(["running", "blocked"]).toContain(ledger.status);
    expect(ledger.observations).toHaveLength(1);
    expect(ledger.budget.spentUsd).toBeGreaterThanOrEqual(RESERVATION_USD);
    const check = await runCli(["ledger", "check", run.output, "--json"]);
    expect(JSON.parse(check.stdout)).toMatchObject({ valid: true, arithmetic: { holds: true } });
    expect(check.code).toBe(ledger.status === "running" ? 4 : 0);
    // No torn ledger beside it either: any temp file of an interrupted write is the runner's own name.
    for (const name of await readdir(dirname(run.output))) expect(name).toMatch(/^(ledger\.json|ledger\.json\.transcripts|\.ledger\.json\.\d+\.[0-9a-f]+\.tmp|fake|tmp)$/);

    const next = await runPipeline(p, { loginDir, tmp: run.tmp, args: FAST_STALE });
    expect(next.code, next.stderr).toBe(0);
    expect(await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid) })).toEqual([]);
    expect(await leftovers(run.tmp)).toEqual([]);
  }, 180_000);
});

describe("the CLI login", () => {
  it("a login the CLI refreshed inside the container is written back to the host and used by the next attempt", async () => {
    const loginDir = await freshLogin(p);
    const path = join(loginDir, ".credentials.json");
    const before = JSON.parse(await readFile(path, "utf8")).claudeAiOauth;
    const r = await runPipeline(p, { loginDir, behaviour: { attempts: { "0": { kind: "ok", refreshLogin: true } } } });
    expect(r.code, r.stderr).toBe(0);

    const after = JSON.parse(await readFile(path, "utf8")).claudeAiOauth;
    expect(after.accessToken).not.toBe(before.accessToken);
    expect(after.accessToken).toMatch(/^refreshed-access-/);
    expect(after.refreshToken).toMatch(/^refreshed-refresh-/);
    expect(after.expiresAt).toBeGreaterThan(before.expiresAt);
    expect(await fileMode(path)).toBe(0o600);
    // Attempt 1 was given the original login, attempt 2 the refreshed one.
    const records = await recordsOf(r.run);
    expect(records.map((x) => [x.record.attempt, x.record.credentialsExpiresAt])).toEqual([
      ["0", before.expiresAt],
      ["1", after.expiresAt],
    ]);
    // The refreshed token stays out of what the runner prints.
    expect(r.stdout + r.stderr).not.toContain(after.accessToken);
  }, 120_000);

  it("two runs started at once on one login never run attempts at the same time", async () => {
    const loginDir = await freshLogin(p);
    const slow = { default: { kind: "ok" as const, delayMs: 3000 } };
    const runs = await Promise.all([prepareRun(p, { loginDir, behaviour: slow }), prepareRun(p, { loginDir, behaviour: slow })]);
    const results = await Promise.all(runs.map((run) => startPipeline(run).done));
    for (const r of results) expect(r.code, r.stderr).toBe(0);

    const ledgers = await Promise.all(runs.map((run) => ledgerOf(run)));
    const spans = ledgers.map((l, run) =>
      l.observations.map((o) => {
        const start = Date.parse(o.startedAt!);
        return { run, start, end: start + o.wallTimeMs! };
      }),
    );
    for (const s of spans.flat()) expect(s.end - s.start).toBeGreaterThanOrEqual(3000);
    // Both runs were under way together (each created its ledger before the other's last attempt ended) ...
    const lastEnd = spans.map((s) => Math.max(...s.map((x) => x.end)));
    const created = ledgers.map((l) => Date.parse(l.createdAt));
    expect(Math.max(...created)).toBeLessThan(Math.min(...lastEnd));
    // ... and yet no attempt of one overlapped an attempt of the other.
    for (const a of spans[0]!) {
      for (const b of spans[1]!) expect(a.end <= b.start || b.end <= a.start, JSON.stringify({ a, b })).toBe(true);
    }
  }, 180_000);
});
