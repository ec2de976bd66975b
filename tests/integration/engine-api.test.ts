import { randomUUID } from "node:crypto";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ExportHasher, FILE_MODE } from "../../src/export/export.ts";
import { buildImage } from "../../src/image/build.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import { runBounded } from "../../src/sandbox/bounded.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { DockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import { AHEAD_ATTEMPT } from "../../src/sandbox/engine-api.ts";
import { prepareDemo } from "../../src/demo/setup.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { runStudy } from "../../src/study/run.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { waitFor } from "../support/pipeline.ts";
import { probeOciRuntime } from "../../src/isolation/oci-runtime.ts";
import { LABELS, reapOrphans } from "../../src/sandbox/reaper.ts";
import type { SandboxSpec } from "../../src/sandbox/sandbox.ts";
import { treeFromFolder } from "../../src/sandbox/tree.ts";
import { runCli } from "../support/cli.ts";
import { nodeScriptSpec } from "../support/node-sandbox.ts";

/**
 * The engine-api channel on the local engine (the second engine's run is in engine-files.test.ts):
 * what the shared sandbox suite (runtime-docker.test.ts) does not show. The tree copied in is held
 * to the export hash, a relay that writes garbage makes the run's stream refused, the volumes are
 * reaped like containers, and the demo's pilot runs on the channel end to end.
 */

const runtime = new DockerRuntime();
const docker = new Docker();
const RELAY = [IMAGE_LAYOUT.node, `${IMAGE_LAYOUT.helpers}/stream-relay.cjs`];
const run = `engine-api-${randomUUID()}`;
let image: string;
let work: string;
let server: Server;
let socket: string;

beforeAll(async () => {
  image = (await buildImage(runtime, await fakeClaudeImageSpec())).id;
  work = await mkdtemp(join(tmpdir(), "sr-engine-api-"));
  await chmod(work, 0o755);
  socket = join(work, "api.sock");
  server = createServer((s) => s.on("data", (d: Buffer) => s.end(`pong:${d}`)));
  await new Promise<void>((resolve) => server.listen(socket, resolve));
}, 300_000);
afterAll(async () => {
  await new Promise((r) => server.close(r));
  await rm(work, { recursive: true, force: true });
});

function spec(script: string, extra: Partial<SandboxSpec> = {}): SandboxSpec {
  return nodeScriptSpec(image, { [LABELS.run]: run }, script, extra);
}

/** Everything of this file's run still on the engine. */
async function leftOnEngine(): Promise<{ containers: number; volumes: number }> {
  const filter = { label: [`${LABELS.run}=${run}`] };
  const containers = await docker.listContainers({ all: true, filters: filter });
  const volumes = (await docker.listVolumes({ filters: filter })).Volumes ?? [];
  return { containers: containers.length, volumes: volumes.length };
}

/** A folder of export-like files (mode 444) and the export hash of what it holds. */
async function exportFolder(files: Record<string, string>): Promise<{ dir: string; hash: string }> {
  const dir = await mkdtemp(join(work, "export-"));
  await chmod(dir, 0o755);
  const hasher = new ExportHasher();
  for (const [path, content] of Object.entries(files).sort(([a], [b]) => Buffer.compare(Buffer.from(a), Buffer.from(b)))) {
    await mkdir(join(dir, path, ".."), { recursive: true, mode: 0o755 });
    await writeFile(join(dir, path), content, { mode: FILE_MODE });
    hasher.add(path, Buffer.from(content));
  }
  return { dir, hash: hasher.digest() };
}

describe("the engine-api channel on the local engine", () => {
  // contract: R241
  it("copies the export in and holds it to the export hash; a tree that does not match is refused before anything runs", async () => {
    const sandbox = new DockerSandbox(runtime, { channel: "engine-api" });
    const { dir, hash } = await exportFolder({ "a.txt": "alpha\n", "src/b.ts": "export const b = 1;\n" });
    const lines: string[] = [];
    const script = `const fs = require("node:fs"); process.stdout.write(fs.readFileSync("/workspace/src/b.ts", "utf8") + (fs.statSync("/workspace/a.txt").mode & 0o777).toString(8) + "\\n");`;
    const good = await runBounded(sandbox, spec(script, { workspace: treeFromFolder("/workspace", dir, hash) }), (line) => lines.push(line));
    expect(good.exitCode).toBe(0);
    expect(lines).toEqual(["export const b = 1;", "444"]);
    const wrong = "0".repeat(64);
    await expect(runBounded(sandbox, spec("0", { workspace: treeFromFolder("/workspace", dir, wrong) }), () => {})).rejects.toThrow(new RegExp(`has hash ${hash}, not the export's ${wrong}`));
    expect(await leftOnEngine()).toEqual({ containers: 0, volumes: 0 });
  }, 120_000);

  // contract: R242
  it("refuses a relay that writes garbage frames: the program is stopped and the fault is the run's", async () => {
    const garbage = `process.stdout.write(Buffer.from([0,0,0,0,4,0,0,0,0])); setTimeout(() => process.stdout.write(Buffer.from("this is no frame at all")), 300); setTimeout(() => {}, 3600e3);`;
    const sandbox = new DockerSandbox(runtime, { channel: "engine-api", engineApi: { relayCommand: () => [IMAGE_LAYOUT.node, "-e", garbage] } });
    const t0 = Date.now();
    const raw = await runBounded(sandbox, spec("setTimeout(() => {}, 3600e3);", { endpoints: [{ name: "model-api", socket }] }), () => {}, { timeoutMs: 60_000 });
    expect(raw.channelFault).toMatch(/the engine-api stream was refused: the relay sent a frame of \d+ bytes, above the 65536-byte bound|unknown kind/);
    expect(raw.timedOut).toBe(false);
    expect(Date.now() - t0).toBeLessThan(30_000);
    // The same stream from the real relay is no fault.
    const honest = await runBounded(
      new DockerSandbox(runtime, { channel: "engine-api", engineApi: { streamRelay: RELAY } }),
      spec(`const s = require("node:net").connect(process.env.ENDPOINT); s.end("ping"); s.pipe(process.stdout);`, {
        env: { ENDPOINT: "/run/study-runner-api/api.sock" },
        endpoints: [{ name: "model-api", socket }],
      }),
      () => {},
    );
    expect(honest.channelFault).toBeUndefined();
    expect(honest.exitCode).toBe(0);
    expect(await leftOnEngine()).toEqual({ containers: 0, volumes: 0 });
  }, 120_000);

  // contract: R243
  it("labels its volumes with the owner, and the reaper removes those a dead runner left", async () => {
    const host = `engine-api-${randomUUID()}`;
    const dead = `study-runner-test-${randomUUID().slice(0, 8)}`;
    const live = `study-runner-test-${randomUUID().slice(0, 8)}`;
    await runtime.createVolume(dead, { [LABELS.run]: run, [LABELS.host]: host, [LABELS.pid]: "999999" });
    await runtime.createVolume(live, { [LABELS.run]: run, [LABELS.host]: host, [LABELS.pid]: String(process.pid) });
    const reaped = await reapOrphans(runtime, { host, isAlive: (pid) => pid === process.pid });
    expect(reaped).toEqual({ removed: [dead], kept: [live] });
    expect((await runtime.listVolumesByLabel({ [LABELS.host]: host })).map((v) => v.name)).toEqual([live]);
    await runtime.removeVolume(live);
  });

  // contract: R244
  // contract: R257
  it("`demo --pilot --sandbox-channel engine-api --concurrency 2` runs both arms at once and the adjudication, and the ledger says the channel", async () => {
    const workdir = join(work, "demo");
    const r = await runCli(["demo", "--pilot", "--quiet", "--sandbox-channel", "engine-api", "--concurrency", "2", "--workdir", workdir], { timeoutMs: 600_000 });
    expect(r.code, r.stderr).toBe(0);
    const ledgers = (await readdir(join(workdir, "ledgers"))).filter((n) => /^run-.*\.json$/.test(n) && !n.includes("adjudication"));
    const ledger = JSON.parse(await readFile(join(workdir, "ledgers", ledgers[0]!), "utf8"));
    expect(ledger.sandbox).toMatchObject({ provider: "docker", channel: "engine-api", endpoint: expect.stringMatching(/^unix:\/\//), os: "linux" });
    expect(ledger.observations.map((o: { status: string }) => o.status)).toEqual(["completed", "completed"]);
    // Both arms of the pair ran at once, each over its own stream.
    expect(ledger.scheduling).toMatchObject({ concurrency: 2, pairs: "together" });
    const [first, second] = ledger.observations as Array<{ startedAt: string; wallTimeMs: number }>;
    expect(Date.parse(second!.startedAt)).toBeLessThan(Date.parse(first!.startedAt) + first!.wallTimeMs);
    // The doc-bridge arm's tool call went through the stream to the runner's bridge.
    const mcp = ledger.observations.find((o: { arm: string }) => o.arm === "mcp");
    expect(mcp.mcp.toolCalls.length).toBeGreaterThan(0);
    const volumes = (await docker.listVolumes({ filters: { label: [`${LABELS.run}=${ledger.runId}`] } })).Volumes ?? [];
    expect(volumes).toEqual([]);
  }, 600_000);
});

describe("the engine-api channel's relay, made ahead and bounded", () => {
  /** A server at `<work>/<dir>/<name>` answering each request with `<tag>:<request>`. */
  async function tagServer(dir: string, name: string, tag: string): Promise<{ socket: string; close: () => Promise<void> }> {
    await mkdir(join(work, dir), { mode: 0o755 });
    const path = join(work, dir, name);
    const s = createServer((c) => c.on("data", (d: Buffer) => c.end(`${tag}:${d}`)));
    await new Promise<void>((resolve) => s.listen(path, resolve));
    return { socket: path, close: () => new Promise<void>((r) => s.close(() => r())) };
  }

  /** The engine under the provider, with the command of every container it creates kept. */
  function counted(): { runtime: DockerRuntime; created: Array<{ relay: boolean; attempt: string | undefined }> } {
    const created: Array<{ relay: boolean; attempt: string | undefined }> = [];
    const counting = new Proxy(runtime, {
      get(target, prop, receiver) {
        if (prop === "create")
          return (s: Parameters<DockerRuntime["create"]>[0]) => {
            created.push({ relay: (s.entrypoint ?? []).some((a) => a.endsWith("stream-relay.cjs")), attempt: s.labels[LABELS.attempt] });
            return target.create(s);
          };
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    return { runtime: counting, created };
  }

  // contract: R257, R280
  it("made ahead, the next sandbox's relay is ready when it is prepared and serves that sandbox alone; settle removes what is left", async () => {
    const a = await tagServer("ahead-a", "a.sock", "from-a");
    const b = await tagServer("ahead-b", "b.sock", "from-b");
    try {
      const { runtime: engine, created } = counted();
      const sandbox = new DockerSandbox(engine, { channel: "engine-api", engineApi: { streamRelay: RELAY, ahead: true } });
      // Prints what its endpoint folder holds, the answer of its own endpoint, and whether the other attempt's socket is there.
      const script = (own: string, other: string) =>
        `const fs = require("node:fs"); const net = require("node:net");
         console.log(fs.readdirSync("/run/study-runner-api").join(","));
         console.log(fs.existsSync("/run/study-runner-api/${other}") ? "other: there" : "other: absent");
         const s = net.connect("/run/study-runner-api/${own}"); s.end("ping"); s.on("data", (d) => console.log(String(d)));`;
      const lines: string[][] = [[], []];
      const first = await runBounded(sandbox, spec(script("a.sock", "b.sock"), { labels: { [LABELS.run]: run, [LABELS.attempt]: "a1" }, endpoints: [{ name: "model-api", socket: a.socket }] }), (l) =>
        lines[0]!.push(l),
      );
      expect(first.exitCode).toBe(0);
      // While the first ran, the next relay was made: on the engine, labelled for no attempt yet.
      const ahead = await waitFor("the relay made ahead", async () => {
        const found = await docker.listContainers({ all: true, filters: { label: [`${LABELS.run}=${run}`, `${LABELS.attempt}=${AHEAD_ATTEMPT}`] } });
        return found.length === 1 ? found[0]!.Id : undefined;
      });
      // The relay reaches nothing by network: the engine set none up for it (no namespace hook,
      // no hosts file); the attempt's container keeps the engine's network none.
      const relayInfo = await docker.getContainer(ahead).inspect();
      expect([relayInfo.HostConfig.NetworkMode, (relayInfo.Config as { NetworkDisabled?: boolean }).NetworkDisabled]).toEqual(["none", true]);
      const second = await runBounded(sandbox, spec(script("b.sock", "a.sock"), { labels: { [LABELS.run]: run, [LABELS.attempt]: "a2" }, endpoints: [{ name: "model-api", socket: b.socket }] }), (l) =>
        lines[1]!.push(l),
      );
      expect(second.exitCode).toBe(0);
      expect(lines).toEqual([
        ["a.sock", "other: absent", "from-a:ping"],
        ["b.sock", "other: absent", "from-b:ping"],
      ]);
      // The first sandbox made its relay; the second took the one made ahead and made only its own container.
      expect(created.slice(0, 3)).toEqual([
        { relay: true, attempt: "a1" },
        { relay: false, attempt: "a1" },
        { relay: true, attempt: AHEAD_ATTEMPT },
      ]);
      expect(created[3]).toEqual({ relay: false, attempt: "a2" });
      await sandbox.settle();
      expect((await docker.listContainers({ all: true, filters: { id: [ahead] } })).length).toBe(0);
      expect(await leftOnEngine()).toEqual({ containers: 0, volumes: 0 });
    } finally {
      await a.close();
      await b.close();
    }
  }, 120_000);

  // contract: R257
  it("the OCI runtime probe on the channel, as the doctor runs it alone, leaves nothing on the engine when it returns", async () => {
    const labels = { [LABELS.run]: run, [LABELS.attempt]: "probe" };
    const seen = await probeOciRuntime(runtime, image, "runc", "none", labels, "engine-api");
    expect(seen.interfaces).toEqual(["lo"]);
    expect(await leftOnEngine()).toEqual({ containers: 0, volumes: 0 });
  }, 120_000);

  // contract: R258
  it("a relay that never listens, and one whose start never returns, fail the sandbox's setup within the bound: nothing ran and nothing is left", async () => {
    const hooks = [{ relayCommand: () => [IMAGE_LAYOUT.node, "-e", "setTimeout(() => {}, 3600e3)"] }, { streamRelay: RELAY, startRelay: () => new Promise<void>(() => {}) }];
    for (const hook of hooks) {
      const sandbox = new DockerSandbox(runtime, { channel: "engine-api", engineApi: { ...hook, relayReadyMs: 3_000 } });
      const lines: string[] = [];
      const t0 = Date.now();
      const raw = await runBounded(sandbox, spec(`console.log("ran")`, { endpoints: [{ name: "model-api", socket }] }), (l) => lines.push(l));
      expect(raw).toMatchObject({ containerId: null, exitCode: null, timedOut: false });
      expect(raw.channelFault).toMatch(/^the engine-api relay container [0-9a-f]{64}: did not listen within 3000 ms$/);
      expect(lines).toEqual([]);
      expect(Date.now() - t0).toBeLessThan(20_000);
      expect(await leftOnEngine()).toEqual({ containers: 0, volumes: 0 });
    }
  }, 120_000);

  // contract: R258
  it("a study attempt whose relay never listens is recorded invalid-setup and charged, not a fault of the runner", async () => {
    const demo = await prepareDemo(join(work, "relay-demo"), runtime);
    const loaded = await loadManifest(DEMO_MANIFEST);
    const plan = planStudy(loaded.manifest, "pilot").slice(0, 1);
    const output = join(work, "relay-demo", "ledger.json");
    const sandbox = new DockerSandbox(runtime, { channel: "engine-api", engineApi: { relayCommand: () => [IMAGE_LAYOUT.node, "-e", "setTimeout(() => {}, 3600e3)"], relayReadyMs: 3_000 } });
    let stderr = "";
    const code = await runStudy(
      {
        loaded,
        mode: "pilot",
        plan,
        fullPlanSize: planStudy(loaded.manifest, "full").length,
        roots: new Map(Object.entries(demo.roots)),
        model: "claude-haiku-5-5",
        capUsd: 1,
        attemptBudgetUsd: 0.1,
        output,
        image: demo.image,
        expectedCliVersion: "2.1.296",
        isolation: "offline",
        credentials: "gateway",
        sandboxChannel: "engine-api",
        docBridgeCommand: referenceEngineCommand(),
        claudeConfigDir: demo.loginDir,
        quiet: true,
      },
      {
        runtime,
        sandbox,
        stdout: () => {},
        stderr: new Writable({
          write(chunk, _enc, cb) {
            stderr += String(chunk);
            cb();
          },
        }),
      },
    );
    const ledger = await readLedger(output);
    expect(code, stderr).toBe(1);
    expect(ledger.status).toBe("blocked");
    expect(ledger.statusReason).not.toMatch(/fault of the runner/);
    const [o] = ledger.observations;
    expect(o).toMatchObject({ status: "invalid-setup", containerId: null, chargedUsd: expect.any(Number) });
    // The relay is named first: the transcript's own problems (no init event) follow from it.
    expect(o!.setupProblems[0]).toMatch(/^the engine-api relay container [0-9a-f]{64}: did not listen within 3000 ms$/);
    expect(ledger.statusReason).toMatch(/did not listen within 3000 ms/);
    expect(await runtime.listByLabel({ [LABELS.run]: ledger.runId })).toEqual([]);
    expect(await runtime.listVolumesByLabel({ [LABELS.run]: ledger.runId })).toEqual([]);
  }, 300_000);
});
