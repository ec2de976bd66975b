import { spawn } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, symlink, truncate, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import tar from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage } from "../../src/image/build.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import { runBounded } from "../../src/sandbox/bounded.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { DockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { AHEAD_ATTEMPT, EXPORT_ATTEMPT } from "../../src/sandbox/engine-api.ts";
import { STAGED_LIMIT_BYTES } from "../../src/sandbox/staged-stream.ts";
import { waitFor } from "../support/pipeline.ts";
import { probeOciRuntime } from "../../src/isolation/oci-runtime.ts";
import { LABELS, reapOrphans } from "../../src/sandbox/reaper.ts";
import type { SandboxSpec } from "../../src/sandbox/sandbox.ts";
import { treeFromFolder } from "../../src/sandbox/tree.ts";
import { runCli } from "../support/cli.ts";
import { nodeScriptSpec } from "../support/node-sandbox.ts";
import { demoPilotOnEngineApi, exportFolder } from "../support/engine-api-study.ts";

/**
 * The engine-api channel on the local engine (the second engine's run is in engine-files.test.ts):
 * what the shared sandbox suite (runtime-docker.test.ts) does not show. The tree copied in is held
 * to the export hash, a relay that writes garbage makes the run's stream refused, the volumes are
 * reaped like containers, the demo's pilot runs on the channel end to end, and a run keeps one
 * read-only volume per export for its attempts.
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

/** Everything of a run (this file's unless named) still on the engine. */
async function leftOnEngine(of = run): Promise<{ containers: number; volumes: number }> {
  const filter = { label: [`${LABELS.run}=${of}`] };
  const containers = await docker.listContainers({ all: true, filters: filter });
  const volumes = (await docker.listVolumes({ filters: filter })).Volumes ?? [];
  return { containers: containers.length, volumes: volumes.length };
}

/** The engine under a provider, with the command and attempt of every container, and the labels of every volume, it creates kept. */
function counted(): { runtime: DockerRuntime; created: Array<{ relay: boolean; attempt: string | undefined }>; volumes: Array<Record<string, string>> } {
  const created: Array<{ relay: boolean; attempt: string | undefined }> = [];
  const volumes: Array<Record<string, string>> = [];
  const counting = new Proxy(runtime, {
    get(target, prop, receiver) {
      if (prop === "create")
        return (s: Parameters<DockerRuntime["create"]>[0]) => {
          created.push({ relay: (s.entrypoint ?? []).some((a) => a.endsWith("stream-relay.cjs")), attempt: s.labels[LABELS.attempt] });
          return target.create(s);
        };
      if (prop === "createVolume")
        return (name: string, labels: Record<string, string>) => {
          volumes.push(labels);
          return target.createVolume(name, labels);
        };
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  return { runtime: counting, created, volumes };
}

describe("the engine-api channel on the local engine", () => {
  // contract: R241
  it("copies the export in and holds it to the export hash; a tree that does not match is refused before anything runs", async () => {
    const sandbox = new DockerSandbox(runtime, { channel: "engine-api" });
    const { dir, hash } = await exportFolder(work, { "a.txt": "alpha\n", "src/b.ts": "export const b = 1;\n" });
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
      // The run's last sandbox: nothing is made ahead while it runs, as no sandbox would take it.
      const second = await runBounded(
        sandbox,
        spec(script("b.sock", "a.sock"), { labels: { [LABELS.run]: run, [LABELS.attempt]: "a2" }, endpoints: [{ name: "model-api", socket: b.socket }], last: true }),
        (l) => lines[1]!.push(l),
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
      expect(created).toHaveLength(4);
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
    const sandbox = new DockerSandbox(runtime, { channel: "engine-api", engineApi: { relayCommand: () => [IMAGE_LAYOUT.node, "-e", "setTimeout(() => {}, 3600e3)"], relayReadyMs: 3_000 } });
    const { code, ledger, stderr } = await demoPilotOnEngineApi(join(work, "relay-demo"), runtime, { attempts: 1, sandbox });
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

/** The export volumes of a run still on the engine. */
async function exportsOnEngine(of: string): Promise<number> {
  const volumes = (await docker.listVolumes({ filters: { label: [`${LABELS.run}=${of}`, `${LABELS.attempt}=${EXPORT_ATTEMPT}`] } })).Volumes ?? [];
  return volumes.length;
}

/** Reads a file of the workspace, then tries to write one there, as root of the sandbox: prints what it read and the write's error code. */
const READ_THEN_WRITE = `const fs = require("node:fs");
  console.log(fs.readFileSync("/workspace/src/b.ts", "utf8").trim());
  try { fs.writeFileSync("/workspace/src/b.ts", "changed"); console.log("written"); } catch (e) { console.log(e.code); }
  try { fs.writeFileSync("/workspace/new.txt", "new"); console.log("written"); } catch (e) { console.log(e.code); }`;

describe("the export's volume kept for the run", () => {
  // contract: R275
  // contract: R276
  // contract: R277
  it("two sandboxes of one export at once and one after make one export volume, read-only in each: a write fails; settle leaves nothing", async () => {
    const runId = `export-volume-${randomUUID()}`;
    const { runtime: engine, volumes } = counted();
    const sandbox = new DockerSandbox(engine, { channel: "engine-api", engineApi: { streamRelay: RELAY, ahead: true, keepExports: true } });
    const { dir, hash } = await exportFolder(work, { "a.txt": "alpha\n", "src/b.ts": "export const b = 1;\n" });
    // Root of the sandbox (with no capability) owns the tree's folders: only a read-only mount stops its write.
    const spec = (attempt: string, extra: Partial<SandboxSpec> = {}): SandboxSpec =>
      nodeScriptSpec(image, { [LABELS.run]: runId, [LABELS.attempt]: attempt }, READ_THEN_WRITE, { user: "0:0", workspace: treeFromFolder("/workspace", dir, hash), ...extra });
    const lines: string[][] = [[], [], []];
    // One with an endpoint (its relay carries it), one without (no relay at all), at once.
    const [first, second] = await Promise.all([
      runBounded(sandbox, spec("a1", { endpoints: [{ name: "model-api", socket }] }), (l) => lines[0]!.push(l)),
      runBounded(sandbox, spec("a2"), (l) => lines[1]!.push(l)),
    ]);
    expect([first.exitCode, second.exitCode]).toEqual([0, 0]);
    const third = await runBounded(sandbox, spec("a3"), (l) => lines[2]!.push(l));
    expect(third.exitCode).toBe(0);
    const expected = ["export const b = 1;", "EROFS", "EROFS"];
    expect(lines).toEqual([expected, expected, expected]);
    // One export volume made for the three, carrying the run's owner labels; it is kept until the run settles.
    const exportVolumes = volumes.filter((l) => l[LABELS.attempt] === EXPORT_ATTEMPT);
    expect(exportVolumes).toEqual([{ [LABELS.run]: runId, [LABELS.attempt]: EXPORT_ATTEMPT }]);
    expect(await exportsOnEngine(runId)).toBe(1);
    await sandbox.settle();
    expect(await leftOnEngine(runId)).toEqual({ containers: 0, volumes: 0 });
  }, 120_000);

  // contract: R241
  // contract: R275
  it("an export whose tree does not match its hash fails every sandbox that claims it, each time: the failed fill is never kept", async () => {
    const runId = `export-volume-${randomUUID()}`;
    const { runtime: engine, volumes } = counted();
    const sandbox = new DockerSandbox(engine, { channel: "engine-api", engineApi: { streamRelay: RELAY, ahead: true, keepExports: true } });
    const { dir, hash } = await exportFolder(work, { "src/b.ts": "export const b = 1;\n" });
    const wrong = "0".repeat(64);
    const spec = (claimed: string, attempt: string): SandboxSpec =>
      nodeScriptSpec(image, { [LABELS.run]: runId, [LABELS.attempt]: attempt }, `console.log("ran")`, { workspace: treeFromFolder("/workspace", dir, claimed) });
    const refused = new RegExp(`has hash ${hash}, not the export's ${wrong}`);
    const ran: string[] = [];
    // Two at once wait for one fill and fail with it; the next fills again and fails the same way.
    const together = await Promise.allSettled([runBounded(sandbox, spec(wrong, "w1"), (l) => ran.push(l)), runBounded(sandbox, spec(wrong, "w2"), (l) => ran.push(l))]);
    for (const r of together) expect(r.status === "rejected" && String(r.reason)).toMatch(refused);
    await expect(runBounded(sandbox, spec(wrong, "w3"), (l) => ran.push(l))).rejects.toThrow(refused);
    expect(ran).toEqual([]);
    expect(await exportsOnEngine(runId)).toBe(0);
    // The tree under its own hash is filled, checked and runs.
    const good = await runBounded(sandbox, spec(hash, "g1"), (l) => ran.push(l));
    expect(good.exitCode).toBe(0);
    expect(ran).toEqual(["ran"]);
    expect(volumes.filter((l) => l[LABELS.attempt] === EXPORT_ATTEMPT)).toHaveLength(3);
    await sandbox.settle();
    expect(await leftOnEngine(runId)).toEqual({ containers: 0, volumes: 0 });
  }, 120_000);

  // contract: R275
  // contract: R277
  it("a study's two attempts at one pin on the channel share one export volume, and the run leaves nothing on the engine", async () => {
    const { runtime: engine, volumes } = counted();
    const { code, ledger, plan, stderr } = await demoPilotOnEngineApi(join(work, "demo"), engine);
    expect(new Set(plan.map((a) => `${a.repository}@${a.pin}`)).size).toBe(1);
    expect(code, stderr).toBe(0);
    expect(ledger.observations.map((o) => o.status)).toEqual(["completed", "completed"]);
    expect(new Set(ledger.observations.map((o) => o.exportHash)).size).toBe(1);
    expect(volumes.filter((l) => l[LABELS.attempt] === EXPORT_ATTEMPT && l[LABELS.run] === ledger.runId)).toHaveLength(1);
    expect(await leftOnEngine(ledger.runId)).toEqual({ containers: 0, volumes: 0 });
  }, 300_000);

  // contract: R277
  it("a runner killed while its attempt runs leaves its export volume, and the next run's reaper removes it", async () => {
    const runId = `export-volume-${randomUUID()}`;
    const { dir, hash } = await exportFolder(work, { "src/b.ts": "export const b = 1;\n" });
    const child = spawn(process.execPath, ["--import", "tsx", join(PROJECT_ROOT, "tests", "support", "kept-export-child.ts"), image, runId, dir, hash], {
      cwd: PROJECT_ROOT,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => (out += d.toString("utf8")));
    const exited = new Promise<void>((resolve) => child.on("close", () => resolve()));
    try {
      await waitFor(
        "the child's attempt running",
        async () => {
          if (child.exitCode !== null) throw new Error(`the child ended (exit ${child.exitCode}): ${out}`);
          return out.includes("running") ? true : undefined;
        },
        60_000,
      );
      const kept = await runtime.listVolumesByLabel({ [LABELS.pid]: String(child.pid), [LABELS.attempt]: EXPORT_ATTEMPT });
      expect(kept.map((v) => v.labels[LABELS.run])).toEqual([runId]);
      child.kill("SIGKILL");
      await exited;
      // Nothing was cleaned up by the killed runner: its export volume is still there, in use by its attempt.
      expect(await exportsOnEngine(runId)).toBe(1);
      const reaped = await reapOrphans(runtime);
      expect(reaped.removed).toContain(kept[0]!.name);
      expect(await leftOnEngine(runId)).toEqual({ containers: 0, volumes: 0 });
    } finally {
      child.kill("SIGKILL");
      await exited;
    }
  }, 120_000);
});

describe("a volume mounted with nocopy, as the attempt container mounts them", () => {
  /** The names in a volume, read through a container that mounts it where the image has nothing. */
  async function namesIn(volume: string, labels: Record<string, string>): Promise<string[]> {
    const reader = await runtime.create({ ...neverStarted(labels), mounts: [{ source: volume, volume: true, target: "/study-runner-read", readOnly: true }] });
    try {
      const names: string[] = [];
      const extract = tar.extract();
      await new Promise<void>((resolve, reject) => {
        extract.on("entry", (header, stream, next) => {
          names.push(header.name);
          stream.resume();
          stream.on("end", next);
        });
        extract.on("finish", resolve);
        extract.on("error", reject);
        void runtime.getArchive(reader, "/study-runner-read").then((a) => a.pipe(extract as unknown as NodeJS.WritableStream), reject);
      });
      return names.filter((n) => n !== "study-runner-read/");
    } finally {
      await runtime.remove(reader);
    }
  }

  /** A container spec of the image that is only created, never started. */
  function neverStarted(labels: Record<string, string>) {
    return { image, cmd: ["/never-started"], env: {}, mounts: [], tmpfs: {}, readOnlyRootfs: true, networkMode: "none" as const, capDrop: ["ALL"], securityOpt: [], labels };
  }

  it("takes nothing of the image folder it is mounted on when its container is created before it is filled; without nocopy it does", async () => {
    const runId = `nocopy-${randomUUID()}`;
    const labels = { [LABELS.run]: runId };
    const made: string[] = [];
    try {
      for (const noCopy of [true, false]) {
        const volume = `study-runner-test-${randomUUID().slice(0, 8)}`;
        await runtime.createVolume(volume, labels);
        made.push(volume);
        // Mounted on the image's folder of helpers, which holds files.
        const id = await runtime.create({ ...neverStarted(labels), mounts: [{ source: volume, volume: true, target: IMAGE_LAYOUT.helpers, readOnly: true, noCopy }] });
        await runtime.remove(id);
        const names = await namesIn(volume, labels);
        if (noCopy) expect(names).toEqual([]);
        else expect(names.some((n) => n.endsWith("stream-relay.cjs"))).toBe(true);
      }
    } finally {
      for (const v of made) await runtime.removeVolume(v);
    }
    expect(await leftOnEngine(runId)).toEqual({ containers: 0, volumes: 0 });
  }, 120_000);
});

describe("the staged folder on the relay's stream", () => {
  /**
   * Lists every entry under /staged and /fake (each root as "<root>/."): type, mode, owner, size and
   * a hash of its bytes; then writes a record and tries a write to /staged.
   */
  const LIST_STAGED = `const fs = require("node:fs"); const crypto = require("node:crypto");
    const walk = (root, rel) => { const full = rel === "." ? root : root + "/" + rel; const st = fs.lstatSync(full);
      const bytes = st.isFile() ? crypto.createHash("sha256").update(fs.readFileSync(full)).digest("hex").slice(0, 16) : "-";
      console.log([full === root ? root + "/." : full, st.isDirectory() ? "d" : st.isFile() ? "f" : "?", (st.mode & 0o7777).toString(8), st.uid + ":" + st.gid, st.isFile() ? st.size : 0, bytes].join(" "));
      if (st.isDirectory()) for (const n of fs.readdirSync(full).sort()) walk(root, rel === "." ? n : rel + "/" + n); };
    walk("/staged", "."); walk("/fake", ".");
    fs.writeFileSync("/fake/records/out.txt", "recorded");
    try { fs.writeFileSync("/staged/new.txt", "x"); console.log("written"); } catch (e) { console.log(e.code); }`;

  const CONFIG = '{"hasCompletedOnboarding":true}';
  const CREDENTIALS = '{"claudeAiOauth":{"accessToken":"placeholder"}}';
  const SESSION = Buffer.alloc(200 * 1024, 0x61);
  const BEHAVIOUR = '{"kind":"ok"}';
  const FIXTURE = "fixture\n";

  /** A staged folder as the gateway's placeholder login and a session call make it, a file larger than one frame among them. */
  async function stagedFolder(name: string): Promise<string> {
    const folder = join(work, name);
    await mkdir(join(folder, ".claude", "projects", "p"), { recursive: true, mode: 0o700 });
    await writeFile(join(folder, ".claude.json"), CONFIG, { mode: 0o600 });
    await writeFile(join(folder, ".claude", ".credentials.json"), CREDENTIALS, { mode: 0o600 });
    await writeFile(join(folder, ".claude", "projects", "p", "s.jsonl"), SESSION, { mode: 0o640 });
    await writeFile(join(folder, "prompt.txt"), "", { mode: 0o644 });
    await chmod(join(folder, ".claude", "projects"), 0o755);
    return folder;
  }

  /** The engine under a provider, with the path of every putArchive kept. */
  function archived(): { runtime: DockerRuntime; puts: string[] } {
    const puts: string[] = [];
    const engine = new Proxy(runtime, {
      get(target, prop, receiver) {
        if (prop === "putArchive")
          return (id: string, path: string, archive: NodeJS.ReadableStream) => {
            puts.push(path);
            return target.putArchive(id, path, archive);
          };
        const v = Reflect.get(target, prop, receiver) as unknown;
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    return { runtime: engine, puts };
  }

  // contract: R282
  it("goes to a relay with endpoints on its stream with the test files, not by putArchive, and arrives as putArchive makes it: modes, owners, bytes, read-only", async () => {
    const folder = await stagedFolder("staged-good");
    const fake = join(work, "staged-fake");
    await mkdir(join(fake, "fixtures"), { recursive: true });
    await writeFile(join(fake, "behaviour.json"), BEHAVIOUR);
    await writeFile(join(fake, "fixtures", "a.txt"), FIXTURE, { mode: 0o604 });
    const listings: string[][] = [[], []];
    const { runtime: engine, puts } = archived();
    const sandbox = new DockerSandbox(engine, { channel: "engine-api", engineApi: { streamRelay: RELAY } });
    const content = async (records: string): Promise<Partial<SandboxSpec>> => {
      await mkdir(join(fake, records));
      return {
        staged: { folder, target: "/staged", readOnly: true },
        testMounts: [
          { folder: join(fake, "behaviour.json"), target: "/fake/behaviour.json", readOnly: true },
          { folder: join(fake, "fixtures"), target: "/fake/fixtures", readOnly: true },
          { folder: join(fake, records), target: "/fake/records", readOnly: false },
        ],
      };
    };
    // With an endpoint, its relay is started and takes the folders on its stream.
    const streamed = await runBounded(sandbox, spec(LIST_STAGED, { ...(await content("records-1")), endpoints: [{ name: "model-api", socket }] }), (l) => listings[0]!.push(l));
    expect(streamed.exitCode, JSON.stringify({ streamed, l: listings[0] })).toBe(0);
    expect(puts).toEqual([]);
    // With none, the never-started helper takes them by putArchive, as before.
    const archivedRun = await runBounded(sandbox, spec(LIST_STAGED, await content("records-2")), (l) => listings[1]!.push(l));
    expect(archivedRun.exitCode).toBe(0);
    expect(puts.sort()).toEqual(["/study-runner-fill/staged", "/study-runner-fill/test"]);
    expect(listings[0]).toEqual(listings[1]);
    const sha = (b: string | Buffer) => createHash("sha256").update(b).digest("hex").slice(0, 16);
    const file = (path: string, mode: string, owner: string, bytes: string | Buffer) => `${path} f ${mode} ${owner} ${Buffer.byteLength(bytes)} ${sha(bytes)}`;
    expect(listings[0]).toEqual([
      // The volumes' roots as the engine made them; the staged files the program's, the test files root's but its records folder.
      "/staged/. d 755 0:0 0 -",
      "/staged/.claude d 700 1000:1000 0 -",
      file("/staged/.claude/.credentials.json", "600", "1000:1000", CREDENTIALS),
      "/staged/.claude/projects d 755 1000:1000 0 -",
      "/staged/.claude/projects/p d 700 1000:1000 0 -",
      file("/staged/.claude/projects/p/s.jsonl", "640", "1000:1000", SESSION),
      file("/staged/.claude.json", "600", "1000:1000", CONFIG),
      file("/staged/prompt.txt", "644", "1000:1000", ""),
      "/fake/. d 755 0:0 0 -",
      file("/fake/behaviour.json", "444", "0:0", BEHAVIOUR),
      "/fake/fixtures d 555 0:0 0 -",
      file("/fake/fixtures/a.txt", "604", "0:0", FIXTURE),
      "/fake/records d 700 1000:1000 0 -",
      "EROFS",
    ]);
    // What the program wrote to its records folder came back either way.
    for (const records of ["records-1", "records-2"]) expect(await readFile(join(fake, records, "out.txt"), "utf8")).toBe("recorded");
    expect(await leftOnEngine()).toEqual({ containers: 0, volumes: 0 });
  }, 120_000);

  /** The real relay, its source changed by `from` -> `to` as it starts (it exits 9 when `from` is not in it). */
  const patchedRelay = (from: string, to: string): string[] => [
    IMAGE_LAYOUT.node,
    "-e",
    `const src = require("node:fs").readFileSync(${JSON.stringify(RELAY[1])}, "utf8"); const out = src.split(${JSON.stringify(from)}).join(${JSON.stringify(to)}); if (out === src) process.exit(9); eval(out);`,
  ];

  // contract: R282
  it("a relay that writes something else, or reports no digest, fails the sandbox's setup: nothing ran and nothing is left", async () => {
    const folder = await stagedFolder("staged-wrong");
    const differs = /^the engine-api relay container [0-9a-f]{64}: the content it wrote from its stream has digest [0-9a-f]{64}, not the [0-9a-f]{64} of what the runner sent$/;
    const relays = [
      // A byte more in every file than was sent, read back and reported as written.
      [
        patchedRelay(
          "fs.writeSync(f.fd, payload, at, payload.length - at);",
          "fs.writeSync(f.fd, payload, at, payload.length - at); if (f.left === payload.length) fs.writeSync(f.fd, Buffer.from('!'));",
        ),
        differs,
      ],
      // The wrong mode on every file.
      [patchedRelay("fs.fchmodSync(f.fd, f.mode);", "fs.fchmodSync(f.fd, f.mode | 0o004);"), differs],
      // Ready with no digest at all, as the relay of an image built before it wrote content.
      [
        patchedRelay("frame(0, KIND.staged,", "void (0, KIND.staged,"),
        /^the engine-api relay container [0-9a-f]{64}: it listened without a digest of the content it was sent to write \(.*: build the image again\)$/,
      ],
    ] as const;
    for (const [command, refused] of relays) {
      const sandbox = new DockerSandbox(runtime, { channel: "engine-api", engineApi: { relayCommand: () => [...command] } });
      const lines: string[] = [];
      const raw = await runBounded(sandbox, spec(`console.log("ran")`, { staged: { folder, target: "/staged", readOnly: true }, endpoints: [{ name: "model-api", socket }] }), (l) => lines.push(l));
      expect(raw).toMatchObject({ containerId: null, exitCode: null, timedOut: false });
      expect(raw.channelFault).toMatch(refused);
      expect(lines).toEqual([]);
      expect(await leftOnEngine()).toEqual({ containers: 0, volumes: 0 });
    }
  }, 120_000);

  // contract: R283
  it("a staged folder holding a link, or more than the bound, is refused before anything is made", async () => {
    const { runtime: engine, created } = counted();
    const sandbox = new DockerSandbox(engine, { channel: "engine-api", engineApi: { streamRelay: RELAY } });
    const linked = await stagedFolder("staged-linked");
    await symlink("/etc/shadow", join(linked, ".claude", "escape"));
    const big = await stagedFolder("staged-big");
    // Sparse: its size is what counts, read before a byte is.
    await truncate(join(big, ".claude", "projects", "p", "s.jsonl"), STAGED_LIMIT_BYTES + 1);
    const ran: string[] = [];
    for (const [folder, refused] of [
      [linked, /the folder \S+ for the engine-api relay holds "\.claude\/escape", a symbolic link: .*use --sandbox-channel host-paths/],
      [big, /the folder \S+ for the engine-api relay holds more than 41943040 bytes: /],
    ] as const) {
      await expect(
        runBounded(sandbox, spec(`console.log("ran")`, { staged: { folder, target: "/staged", readOnly: true }, endpoints: [{ name: "model-api", socket }] }), (l) => ran.push(l)),
      ).rejects.toThrow(refused);
    }
    expect(ran).toEqual([]);
    expect(created).toEqual([]);
    expect(await leftOnEngine()).toEqual({ containers: 0, volumes: 0 });
  }, 120_000);
});
