/**
 * The attempt container's own bounds, on the real engine through the shipped command: the MCP
 * socket folder read-only, a CPU limit (default one, --cpus, in the ledger), HOME a size-bounded
 * tmpfs whose filling is a clear attempt failure and never touches the host's disk, and a
 * refreshed login still copied back from that tmpfs.
 */
import Docker from "dockerode";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CONTAINER, DEFAULT_HOME_BYTES } from "../../src/transport/cli/spec.ts";
import {
  containersOfRun,
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
  type Pipeline,
} from "../support/pipeline.ts";

const docker = new Docker(process.env.DOCKER_HOST?.startsWith("unix://") ? { socketPath: process.env.DOCKER_HOST.slice(7) } : undefined);

let p: Pipeline;
beforeAll(async () => {
  p = await preparePipeline("container-details");
}, 300_000);
afterAll(() => p?.cleanup());

async function hostConfigWhileRunning(args: string[]) {
  // The pilot's second attempt is the doc-bridge arm (task 0, repetition 0: repository first).
  const run = await prepareRun(p, { behaviour: { attempts: { "1": { kind: "ok", delayMs: 4000 } } }, args });
  const started = startPipeline(run);
  const id = await waitForAttemptContainer(p, started, "1");
  const info = await docker.getContainer(id).inspect();
  const result = await started.done;
  return { info, result, run };
}

describe("the attempt container", () => {
  it("mounts the doc-bridge socket folder read-only, limits the CPU to one by default, and bounds HOME as a tmpfs", async () => {
    const { info, result, run } = await hostConfigWhileRunning([]);
    expect(result.code, result.stderr).toBe(0);
    const mcp = info.Mounts.find((m) => m.Destination === CONTAINER.mcpDir);
    expect(mcp).toBeDefined();
    expect(mcp!.RW).toBe(false);
    // Every bind but the staged login folder (and the fake's records) is read-only.
    for (const m of info.Mounts.filter((m) => m.Type === "bind")) {
      if (m.Destination !== CONTAINER.loginDir && m.Destination !== CONTAINER.fakeRecords) expect(m.RW, m.Destination).toBe(false);
    }
    expect(info.HostConfig.NanoCpus).toBe(1e9);
    expect(info.HostConfig.Tmpfs?.[CONTAINER.home]).toContain(`size=${DEFAULT_HOME_BYTES}`);
    // HOME is not a bind of a host folder any more.
    expect(info.Mounts.some((m) => m.Destination === CONTAINER.home)).toBe(false);
    const ledger = await ledgerOf(run);
    expect(ledger.attemptCpus).toBe(1);
    // The doc-bridge arm completed through the read-only socket folder.
    expect(ledger.observations.map((o) => o.status)).toEqual(["completed", "completed"]);
    expect(ledger.observations[1]!.mcp?.connections).toBeGreaterThan(0);
  });

  it("applies --cpus to every attempt container and records it in the ledger", async () => {
    const { info, result, run } = await hostConfigWhileRunning(["--cpus", "0.5"]);
    expect(result.code, result.stderr).toBe(0);
    expect(info.HostConfig.NanoCpus).toBe(5e8);
    expect((await ledgerOf(run)).attemptCpus).toBe(0.5);
  });

  it("refuses a --cpus that is not a positive number of CPUs, naming the flag, before anything runs", async () => {
    const r = await runPipeline(p, { args: ["--cpus", "0"] });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--cpus must be a number of CPUs/);
  });
});

describe("a CLI that fills its HOME", () => {
  it("fails the attempt naming the full HOME, writes no more than the bound, and leaves nothing on the host", async () => {
    const r = await runPipeline(p, {
      behaviour: { attempts: { "0": { kind: "ok", fillHome: true } as never } },
      args: ["--test-home-size-mb", "4"],
    });
    expect(r.code, r.stderr).toBe(1);
    const ledger = await ledgerOf(r.run);
    expect(ledger.status).toBe("blocked");
    const o = ledger.observations[0]!;
    expect(o.status).toBe("failed");
    expect(ledger.statusReason).toMatch(/HOME \(a size-bounded tmpfs\) was full/);
    const { written } = JSON.parse(await readFile(join(r.run.recordsDir, "fill-home-0.json"), "utf8")) as { written: number };
    expect(written).toBeGreaterThan(0);
    expect(written).toBeLessThanOrEqual(4 * 1024 * 1024);
    expect(summaryOf(r.stdout).attempts.run).toBe(1);
    expect(await containersOfRun(p, ledger.runId)).toEqual([]);
    expect(await leftovers(r.run.tmp)).toEqual([]);
  });

  it("a login refreshed inside the tmpfs HOME still reaches the host login", async () => {
    const loginDir = await freshLogin(p);
    const before = JSON.parse(await readFile(join(loginDir, ".credentials.json"), "utf8")).claudeAiOauth.expiresAt as number;
    const r = await runPipeline(p, { loginDir, behaviour: { attempts: { "0": { kind: "ok", refreshLogin: true } } } });
    expect(r.code, r.stderr).toBe(0);
    const after = JSON.parse(await readFile(join(loginDir, ".credentials.json"), "utf8")).claudeAiOauth.expiresAt as number;
    expect(after).toBeGreaterThan(before);
    // The second attempt was given the refreshed login (its expiry), so the refresh left the tmpfs in time.
    const records = (await recordsOf(r.run)).filter((x) => x.record.attempt === "1");
    expect(records.length).toBeGreaterThan(0);
    expect(records[0]!.record.credentialsExpiresAt).toBe(after);
  });
});
