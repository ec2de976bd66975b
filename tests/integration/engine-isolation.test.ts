import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { prepareDemo, type DemoSetup } from "../../src/demo/setup.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { runCli } from "../support/cli.ts";
import { SECOND_ENGINE_DIR, startSecondEngine } from "../support/second-engine.ts";

/**
 * The isolation flags on an engine that shares no files with the runner (the second dockerd of
 * tests/support/second-engine.ts), where every unit runs on the engine-api channel: gVisor's
 * runsc, which that engine registers as the local one does.
 */

let host: string;
let engine: Docker;
let work: string;
let demo: DemoSetup;

beforeAll(async () => {
  host = await startSecondEngine();
  engine = new Docker({ socketPath: `${SECOND_ENGINE_DIR}/docker.sock` });
  work = await mkdtemp(join(tmpdir(), "sr-engine-isolation-"));
  // The corpus, its indexes and the test login on the runner's side; the fake image built on that engine.
  demo = await prepareDemo(join(work, "demo"), new DockerRuntime({ socketPath: `${SECOND_ENGINE_DIR}/docker.sock` }));
}, 300_000);
afterAll(() => rm(work, { recursive: true, force: true }));

describe("the isolation flags on an engine that shares no files with the runner", () => {
  // contract: R273
  it("`demo --pilot --runtime runsc` on it runs both arms under gVisor over the engine's API; `doctor --runtime runsc` probes it through the relay", async () => {
    expect((await engine.info()).Runtimes).toHaveProperty("runsc");
    const workdir = join(work, "runsc");
    const r = await runCli(["demo", "--pilot", "--quiet", "--runtime", "runsc", "--workdir", workdir], { env: { DOCKER_HOST: host }, timeoutMs: 600_000 });
    expect(r.code, r.stderr).toBe(0);
    const name = (await readdir(join(workdir, "ledgers"))).find((n) => /^run-.*\.json$/.test(n) && !n.includes("adjudication"))!;
    const ledger = JSON.parse(await readFile(join(workdir, "ledgers", name), "utf8"));
    expect(ledger.runtime).toBe("runsc");
    expect(ledger.sandbox).toEqual({ provider: "docker", channel: "engine-api", endpoint: host, os: "linux", arch: expect.any(String) });
    expect(ledger.observations.map((o: { status: string; runtime: string }) => [o.status, o.runtime])).toEqual([
      ["completed", "runsc"],
      ["completed", "runsc"],
    ]);
    // The doc-bridge arm's server reached from inside gVisor through the relay's socket in its volume.
    expect(ledger.observations.find((o: { arm: string }) => o.arm === "mcp").mcp.connections).toBe(1);
    const run = [`${LABELS.run}=${ledger.runId}`];
    expect(await engine.listContainers({ all: true, filters: { label: run } })).toEqual([]);
    expect((await engine.listVolumes({ filters: { label: run } })).Volumes ?? []).toEqual([]);

    // The doctor's probe takes the channel its engine-files line found.
    const doctor = await runCli(["doctor", "--transport", "cli", "--image", demo.image, "--runtime", "runsc"], { env: { DOCKER_HOST: host } });
    const line = doctor.stdout.split("\n").find((l) => /\bruntime\b/.test(l) && l.includes("runsc"));
    expect(line, doctor.stdout).toMatch(/a probe container under it started with network none, saw kernel 4\.4\.0 .*was answered through a unix socket the engine-api relay serves in a volume/);
  }, 900_000);

  // contract: R273
  it("`demo --sessions --runtime runsc` on it runs every call under gVisor over the engine's API, and the tests pass", async () => {
    const workdir = join(work, "sessions-runsc");
    const r = await runCli(["demo", "--sessions", "--quiet", "--runtime", "runsc", "--workdir", workdir], { env: { DOCKER_HOST: host }, timeoutMs: 600_000 });
    expect(r.code, r.stderr).toBe(0);
    const name = (await readdir(join(workdir, "ledgers"))).find((n) => /^sessions-.*\.json$/.test(n))!;
    const ledger = JSON.parse(await readFile(join(workdir, "ledgers", name), "utf8"));
    expect(ledger).toMatchObject({ runtime: "runsc", status: "finished", sandbox: { channel: "engine-api", endpoint: host } });
    const sessions = ledger.sessions as Array<{ state: string; calls: Array<{ runtime: string; resultStatus: string }>; test: { exitCode: number } }>;
    expect(sessions.map((s) => [s.state, s.calls.map((c) => `${c.resultStatus} ${c.runtime}`), s.test.exitCode])).toEqual([
      ["done", ["question runsc", "done runsc"], 0],
      ["done", ["question runsc", "done runsc"], 0],
    ]);
    const run = [`${LABELS.run}=${ledger.runId}`];
    expect(await engine.listContainers({ all: true, filters: { label: run } })).toEqual([]);
    expect((await engine.listVolumes({ filters: { label: run } })).Volumes ?? []).toEqual([]);
  }, 600_000);
});
