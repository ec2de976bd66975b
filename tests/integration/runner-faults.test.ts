/**
 * Faults the runner must survive with its promise (issue 10): the ledger readable, the spend
 * never under-counted, no container or export left behind. Through the shipped command on the
 * real engine: a container killed by its memory limit, the ledger's file system full (a small
 * tmpfs), two runners on one output path, a login lock held by another run past the timeout.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { execFile } from "node:child_process";
import { mkdir, open, readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { acquireLoginLock, resolveLogin } from "../../src/credentials/login.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { runCli } from "../support/cli.ts";
import {
  containersOfRun,
  exists,
  freshLogin,
  ledgerOf,
  leftovers,
  prepareRun,
  preparePipeline,
  recordsOf,
  repositoryInit,
  runPipeline,
  startPipeline,
  summaryOf,
  waitForAttemptContainer,
  RESERVATION_USD,
  type Pipeline,
} from "../support/pipeline.ts";

const execFileP = promisify(execFile);

let p: Pipeline;
beforeAll(async () => {
  p = await preparePipeline("rel-faults");
}, 300_000);
afterAll(() => p?.cleanup());

/** Attempt labels ("0", "1") the fake recorded: which attempts really started a CLI. */
const attemptsStarted = async (run: Parameters<typeof recordsOf>[0]) => (await recordsOf(run)).map((r) => r.record.attempt).filter((a) => a !== null && a !== "probe");

describe("the container killed by its memory limit", () => {
  it("records oomKilled, ends the attempt not completed with its reservation charged, and names the memory limit", async () => {
    const r = await runPipeline(p, {
      behaviour: { attempts: { "0": { kind: "oom", events: [repositoryInit()] } } },
      args: ["--test-memory-limit-mb", "128"],
    });
    expect(r.code, r.stderr).toBe(1);
    const ledger = await ledgerOf(r.run);
    expect(ledger.status).toBe("blocked");
    expect(ledger.statusReason).toMatch(/^attempt 1 .*\(the container was killed by its memory limit\)$/);
    const o = ledger.observations[0]!;
    expect(o).toMatchObject({ phase: "settled", oomKilled: true, exitCode: 137, timedOut: false, truncated: false });
    expect(o.status).not.toBe("completed");
    expect(o.chargedUsd).toBeGreaterThanOrEqual(RESERVATION_USD);
    expect(summaryOf(r.stdout).attempts).toMatchObject({ run: 1 });
    expect(await containersOfRun(p, ledger.runId)).toEqual([]);
    expect(await leftovers(r.run.tmp)).toEqual([]);
  }, 120_000);
});

describe("the ledger's file system full", () => {
  const mounts: string[] = [];
  afterEach(async () => {
    for (const m of mounts.splice(0)) await execFileP("umount", [m]).catch(() => undefined);
  });

  /** A 64 KiB tmpfs as the ledger's folder (root is available in CI and here). */
  async function smallFs(name: string): Promise<string> {
    const dir = join(p.work, "fs", name);
    await mkdir(dir, { recursive: true });
    await execFileP("mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", dir]);
    mounts.push(dir);
    return dir;
  }

  /** Writes a file until the file system refuses with ENOSPC. */
  async function fill(dir: string): Promise<void> {
    const handle = await open(join(dir, "filler"), "a");
    try {
      for (;;) await handle.write(Buffer.alloc(4096, 0x78));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
    } finally {
      await handle.close();
    }
  }

  it("already full: the run stops with exit 3 before any attempt, with no ledger and nothing left", async () => {
    const fs = await smallFs("full");
    await fill(fs);
    const output = join(fs, "ledger.json");
    const run = await prepareRun(p, { loginDir: await freshLogin(p), args: ["--output", output] });
    const started = startPipeline(run);
    const r = await started.done;
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toMatch(/study-runner: the disk is full \(.*ENOSPC.*\); free space, then read the ledger with `study-runner ledger check PATH`/);
    expect(r.stdout).toBe("");
    expect(await readdir(fs)).toEqual(["filler"]);
    expect(await attemptsStarted(run)).toEqual([]);
    expect(await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid) })).toEqual([]);
    expect(await leftovers(run.tmp)).toEqual([]);
  }, 120_000);

  it("full during an attempt: exit 3, the last complete ledger intact (status running, the reservation charged), nothing left", async () => {
    const fs = await smallFs("filled");
    const output = join(fs, "ledger.json");
    const run = await prepareRun(p, {
      loginDir: await freshLogin(p),
      behaviour: { attempts: { "0": { kind: "ok", delayMs: 6000 } } },
      args: ["--output", output],
    });
    const started = startPipeline(run);
    await waitForAttemptContainer(p, started);
    // The container runs, so the runner has written the attempt as running: that is what must survive.
    const before = await readFile(output);
    await fill(fs);
    const r = await started.done;
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toMatch(/study-runner: the disk is full \(.*ENOSPC.*\); free space, then read the ledger with `study-runner ledger check PATH`/);
    expect(r.stdout).toBe("");

    expect(await readFile(output)).toEqual(before);
    const ledger = await readLedger(output); // parses and passes the schema's arithmetic
    expect(ledger.status).toBe("running");
    expect(ledger.observations.map((o) => o.phase)).toEqual(["running"]);
    expect(ledger.budget.spentUsd).toBe(RESERVATION_USD);
    // No temp file of the failed atomic writes is left beside it; the transcript folder stays private.
    expect((await readdir(fs)).sort()).toEqual(["filler", "ledger.json", "ledger.json.transcripts"]);
    const check = await runCli(["ledger", "check", output]);
    expect(check.code, check.stdout).toBe(4);
    expect(await containersOfRun(p, ledger.runId)).toEqual([]);
    expect(await leftovers(run.tmp)).toEqual([]);
  }, 120_000);
});

describe("two runners on one output path", () => {
  it("exactly one proceeds; the other is refused (exit 2) before any attempt and leaves the ledger alone", async () => {
    const shared = join(p.work, "shared-output.json");
    const runs = await Promise.all([0, 1].map(async () => prepareRun(p, { loginDir: await freshLogin(p), args: ["--output", shared] })));
    const started = runs.map((run) => startPipeline(run));
    const results = await Promise.all(started.map((s) => s.done));
    expect(results.map((r) => r.code).sort()).toEqual([0, 2]);
    const winner = results.findIndex((r) => r.code === 0);
    const loser = 1 - winner;

    expect(results[loser]!.stdout).toBe("");
    expect(results[loser]!.stderr).toMatch(/--output .*shared-output\.json already exists; a ledger is never overwritten or reused/);
    expect(await attemptsStarted(runs[loser]!)).toEqual([]);
    expect(await p.runtime.listByLabel({ [LABELS.pid]: String(started[loser]!.pid) })).toEqual([]);
    expect(await leftovers(runs[loser]!.tmp)).toEqual([]);

    // The file is the winner's complete run.
    expect(summaryOf(results[winner]!.stdout)).toMatchObject({ status: "awaiting-adjudication", ledger: shared });
    expect(await attemptsStarted(runs[winner]!)).toEqual(["0", "1"]);
    const check = await runCli(["ledger", "check", shared, "--json"]);
    expect(check.code).toBe(0);
    expect(JSON.parse(check.stdout)).toMatchObject({ state: "finished", status: "awaiting-adjudication", observations: { total: 2, settled: 2 } });
  }, 180_000);
});

describe("the login lock held by another runner", () => {
  it("past the timeout: a clear refusal naming the holder; no CLI started, nothing reserved; the run ends blocked", async () => {
    const loginDir = await freshLogin(p);
    const held = await acquireLoginLock(resolveLogin({ configDir: loginDir }), { timeoutMs: 1000, holder: "run-held-by-the-test" });
    try {
      const r = await runPipeline(p, { loginDir, args: ["--test-login-lock-timeout-ms", "1500"] });
      expect(r.code, r.stderr).toBe(1);
      expect(r.stdout).toMatch(
        new RegExp(`the Claude login \\S+/\\.credentials\\.json is in use by another run \\(held by run run-held-by-the-test, pid ${process.pid} on \\S+ since [0-9T:.-]+Z\\); waited 1500 ms`),
      );
      expect(await attemptsStarted(r.run)).toEqual([]);
      const ledger = await ledgerOf(r.run);
      expect(ledger.status).toBe("blocked");
      expect(ledger.statusReason).toMatch(/^attempt 1 not started, nothing reserved: the Claude login .* is in use by another run /);
      // The lock is taken before the reservation: an attempt that never got the login spent nothing.
      expect(ledger.observations).toEqual([]);
      expect(ledger.budget.spentUsd).toBe(0);
      expect(await containersOfRun(p, ledger.runId)).toEqual([]);
      expect(await leftovers(r.run.tmp)).toEqual([]);
      // The holder's lock was not taken over.
      expect(held.compromised).toBeUndefined();
      expect(await exists(join(loginDir, ".credentials.json.lock"))).toBe(true);
    } finally {
      await held.release();
    }
  }, 120_000);
});
