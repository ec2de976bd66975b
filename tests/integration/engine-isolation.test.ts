import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { prepareDemo, type DemoSetup } from "../../src/demo/setup.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { EGRESS_RELAY_PORT, MODEL_API_RELAY_PORT } from "../../src/transport/cli/spec.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { runCli } from "../support/cli.ts";
import { SECOND_ENGINE_DIR, startSecondEngine } from "../support/second-engine.ts";

/**
 * The isolation flags on an engine that shares no files with the runner (the second dockerd of
 * tests/support/second-engine.ts), where every unit runs on the engine-api channel: the strict
 * profile, which with the gateway (the only credentials mode that channel carries) is network none
 * with no proxy, and gVisor's runsc, which that engine registers as the local one does.
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

/** What the engine itself says of a container of the run, inspected as it is created. */
interface Inspected {
  labels: Record<string, string>;
  entrypoint: string[];
  networkMode: string;
  mountTypes: string[];
}

/**
 * Inspects every container the runner process `pid()` creates on the engine while the watch is
 * open, by the engine's own events: what a container was given, not what the runner meant to give.
 */
async function watchCreates(pid: () => number | undefined): Promise<{ seen: Inspected[]; stop(): Promise<void> }> {
  const seen: Inspected[] = [];
  const pending: Array<Promise<void>> = [];
  const events = (await engine.getEvents({ filters: { type: ["container"], event: ["create"] } })) as NodeJS.ReadableStream & { destroy(): void };
  let rest = "";
  events.on("data", (chunk: Buffer) => {
    const lines = (rest + chunk.toString("utf8")).split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines.filter((l) => l.trim() !== "")) {
      const event = JSON.parse(line) as { id: string; Actor: { Attributes: Record<string, string> } };
      if (event.Actor.Attributes[LABELS.pid] !== String(pid())) continue;
      pending.push(
        engine
          .getContainer(event.id)
          .inspect()
          .then((c) => {
            seen.push({ labels: c.Config.Labels, entrypoint: [c.Path, ...c.Args], networkMode: c.HostConfig.NetworkMode ?? "", mountTypes: c.Mounts.map((m) => m.Type) });
          }),
      );
    }
  });
  return {
    seen,
    stop: async () => {
      events.destroy();
      await Promise.all(pending);
    },
  };
}

/** A loopback server of the runner's machine that counts who reached it: nothing of an attempt may. */
async function loopbackServer(): Promise<{ port: number; connections: () => number; close(): Promise<void> }> {
  let connections = 0;
  const server = createServer((s) => s.destroy());
  server.on("connection", () => connections++);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return { port, connections: () => connections, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/** One line of the fake's records/connect-<attempt>-*.jsonl (src/stand-ins/fake-claude/claude.cjs). */
interface ConnectOutcome {
  host: string;
  port: number;
  via: string;
  results: Record<string, number>;
  echo: string | null;
}

describe("the isolation flags on an engine that shares no files with the runner", () => {
  // contract: R274
  it("`run --isolation strict` runs over the engine's API with network none and no proxy: the attempts reach the gateway's channel and nothing else", async () => {
    const loopback = await loopbackServer();
    const fake = join(work, "strict-fake");
    await mkdir(join(fake, "records"), { recursive: true });
    await chmod(fake, 0o755);
    await chmod(join(fake, "records"), 0o777);
    const connect = [
      // A name and an address: no resolver, no route.
      { host: "allowed.example", port: 443, timeoutMs: 5000 },
      { host: "192.0.2.1", port: 443, timeoutMs: 5000 },
      // The runner's loopback and the port the strict proxy's relay would use: the container's loopback is its own.
      { host: "127.0.0.1", port: loopback.port, timeoutMs: 5000 },
      { host: "127.0.0.1", port: EGRESS_RELAY_PORT, timeoutMs: 5000 },
      // The gateway's relay: bytes that are no HTTP request reach the runner's gateway over the stream, which answers 400.
      { host: "127.0.0.1", port: MODEL_API_RELAY_PORT, send: "not a request\n", timeoutMs: 5000 },
    ];
    const behaviour = { probePaths: ["/run", "/run/study-runner-egress", "/run/study-runner-api"], default: { kind: "ok", connect } };
    await writeFile(join(fake, "behaviour.json"), JSON.stringify(behaviour), { mode: 0o644 });
    const output = join(work, "strict-ledger.json");
    const roots = Object.entries(demo.roots).flatMap(([name, dir]) => ["--root", `${name}=${dir}`]);
    let pid: number | undefined;
    const watch = await watchCreates(() => pid);
    let r: Awaited<ReturnType<typeof runCli>>;
    try {
      r = await runCli(
        [
          ...["run", "--manifest", DEMO_MANIFEST, "--pilot", "--approve-budget", "--quiet", "--transport", "cli", "--isolation", "strict", "--image", demo.image],
          ...["--claude-config-dir", demo.loginDir, "--output", output, "--fake-behaviour", join(fake, "behaviour.json"), "--fake-records", join(fake, "records"), ...roots],
        ],
        { env: { DOCKER_HOST: host, STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" }, timeoutMs: 600_000, onSpawn: (p) => (pid = p) },
      );
    } finally {
      await watch.stop();
      await loopback.close();
    }
    expect(r.code, r.stderr).toBe(0);

    const ledger = JSON.parse(await readFile(output, "utf8"));
    // The gateway by default, so no allowlist and no proxy: the header says strict, on the engine-api channel.
    expect(ledger).toMatchObject({ isolation: "strict", credentials: "gateway", status: "awaiting-adjudication" });
    expect(ledger.egressAllow).toBeUndefined();
    expect(ledger.sandbox).toEqual({ provider: "docker", channel: "engine-api", endpoint: host, os: "linux", arch: expect.any(String) });
    expect(ledger.observations.map((o: { status: string }) => o.status)).toEqual(["completed", "completed"]);

    const records = await readdir(join(fake, "records"));
    for (const [i, obs] of (ledger.observations as Array<{ egress?: unknown; gateway: { requests: unknown[]; setupProblems: string[] } }>).entries()) {
      // No proxy, so no egress record; the gateway saw no request (the bytes above were no HTTP request) and no problem.
      expect(obs.egress, `attempt ${i}`).toBeUndefined();
      expect(obs.gateway).toMatchObject({ requests: [], setupProblems: [] });
      const name = records.find((n) => n.startsWith(`connect-${i}-`))!;
      const seen = (await readFile(join(fake, "records", name), "utf8"))
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as ConnectOutcome);
      expect(seen.map((c) => [c.host, c.port, c.via, Object.keys(c.results)])).toEqual([
        ["allowed.example", 443, "direct", [expect.stringMatching(/^error (EAI_AGAIN|ENOTFOUND)$/)]],
        ["192.0.2.1", 443, "direct", ["error ENETUNREACH"]],
        ["127.0.0.1", loopback.port, "direct", ["error ECONNREFUSED"]],
        ["127.0.0.1", EGRESS_RELAY_PORT, "direct", ["error ECONNREFUSED"]],
        ["127.0.0.1", MODEL_API_RELAY_PORT, "direct", ["tunnel"]],
      ]);
      expect(seen[4]!.echo).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
      const record = JSON.parse(await readFile(join(fake, "records", records.find((n) => new RegExp(`^${i}-.*\\.json$`).test(n))!), "utf8"));
      expect(record.networkInterfaces).toEqual(["lo"]);
      expect(record.envNames).toContain("ANTHROPIC_BASE_URL");
      expect(record.envNames.filter((n: string) => /proxy/i.test(n))).toEqual([]);
      // The gateway's socket, served by the relay in its volume; no proxy's folder.
      expect(record.listings["/run/study-runner-api"]).toEqual({ entries: ["model-api.sock"] });
      expect(record.listings["/run/study-runner-egress"]).toEqual({ error: "ENOENT" });
      expect(record.listings["/run"].entries).not.toContain("study-runner-egress");
    }
    expect(loopback.connections()).toBe(0);

    // The engine's own view: every container of the run (probes, fill helpers, relays, attempts) had
    // network none and no folder of any host bound in, volumes only.
    const ofRun = watch.seen.filter((c) => c.labels[LABELS.run] === ledger.runId);
    const attempts = ofRun.filter((c) => c.entrypoint.some((a) => a.endsWith("/with-relay.cjs")));
    expect(attempts.map((c) => c.labels[LABELS.attempt]).sort()).toEqual(["0", "1"]);
    expect(ofRun.filter((c) => c.entrypoint.some((a) => a.endsWith("/stream-relay.cjs"))).length).toBeGreaterThan(0);
    for (const c of ofRun) {
      expect(c.networkMode, c.entrypoint.join(" ")).toBe("none");
      expect(c.mountTypes.filter((t) => t !== "volume" && t !== "tmpfs")).toEqual([]);
    }
    // Nothing of the run is left on that engine (other files' runs may share it).
    const run = [`${LABELS.run}=${ledger.runId}`];
    expect(await engine.listContainers({ all: true, filters: { label: run } })).toEqual([]);
    expect((await engine.listVolumes({ filters: { label: run } })).Volumes ?? []).toEqual([]);
  }, 600_000);

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
