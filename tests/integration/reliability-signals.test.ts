/**
 * Signals beyond the one SIGINT that tests/integration/pipeline-signals.test.ts sends (issue 10):
 * SIGTERM ends the run blocked with exit 143, and a second signal exits at once without
 * corrupting the ledger; the next run removes what the hurried exit left behind.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readdir } from "node:fs/promises";
import { dirname } from "node:path";
import { LABELS } from "../../src/runtime/reaper.ts";
import { runCli } from "../support/cli.ts";
import {
  containersOfRun,
  freshLogin,
  ledgerOf,
  leftovers,
  prepareRun,
  preparePipeline,
  runPipeline,
  startPipeline,
  summaryOf,
  waitForAttemptContainer,
  RESERVATION_USD,
  type Pipeline,
} from "../support/pipeline.ts";

let p: Pipeline;
beforeAll(async () => {
  p = await preparePipeline("rel-signals");
}, 300_000);
afterAll(() => p?.cleanup());

const hang = { attempts: { "0": { kind: "sleep" as const, seconds: 120 } } };
const FAST_STALE = ["--test-login-lock-stale-ms", "2000"];

describe("signals", () => {
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
    for (const name of await readdir(dirname(run.output))) expect(name).toMatch(/^(ledger\.json|\.ledger\.json\.\d+\.[0-9a-f]+\.tmp|fake|tmp)$/);

    const next = await runPipeline(p, { loginDir, tmp: run.tmp, args: FAST_STALE });
    expect(next.code, next.stderr).toBe(0);
    expect(await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid) })).toEqual([]);
    expect(await leftovers(run.tmp)).toEqual([]);
  }, 180_000);
});
