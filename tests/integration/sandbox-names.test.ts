/**
 * A sandbox's network `none` with and without names (contract R281), on the real engine over both
 * channels: with names (a session's calls and test command) `localhost` resolves inside; without
 * (a study attempt's CLI, the adjudicator, the runtime probe) the engine sets up no network sandbox
 * at all, so no name resolves, yet loopback and the runner's endpoints work as before. The image's
 * probes (`claude --version` at every preflight, the files probe) go without a network too.
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage, probeVersion, runnerFilesProblem } from "../../src/image/build.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import type { ContainerSpec } from "../../src/sandbox/port.ts";
import { DockerSandbox, type SandboxChannel } from "../../src/sandbox/docker-sandbox.ts";
import type { NetworkSetting } from "../../src/sandbox/port.ts";
import type { Endpoint, SandboxSpec } from "../../src/sandbox/sandbox.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";

/** Looks `localhost` up, talks to a server of its own on 127.0.0.1, and to the runner's endpoint. */
const PROGRAM = `
const net = require("node:net");
const out = {};
require("node:dns").lookup("localhost", { family: 4 }, (err, address) => {
  out.localhost = err ? err.code : address;
  const server = net.createServer((c) => c.end("loop")).listen(0, "127.0.0.1", () => {
    net.connect(server.address().port, "127.0.0.1").on("data", (d) => {
      out.loopback = String(d);
      server.close();
      const s = net.connect(process.env.ENDPOINT);
      s.end("ping");
      let got = "";
      s.on("data", (x) => (got += x)).on("end", () => { out.endpoint = got; process.stdout.write(JSON.stringify(out)); });
    });
  });
});`;

let runtime: DockerRuntime;
let image: string;
let dir: string;
let socket: string;
const server = createServer((s) => s.on("data", () => s.end("pong")));

beforeAll(async () => {
  runtime = new DockerRuntime();
  image = (await buildImage(runtime, await fakeClaudeImageSpec())).id;
  dir = await mkdtemp(join(tmpdir(), "sandbox-names-"));
  await chmod(dir, 0o755);
  socket = join(dir, "api.sock");
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  await chmod(socket, 0o777);
}, 300_000);
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function runWith(channel: SandboxChannel, network: NetworkSetting): Promise<{ seen: Record<string, string>; networkDisabled: boolean | undefined; networkMode: string | undefined }> {
  const sandbox = new DockerSandbox(runtime, { channel, engineApi: { streamRelay: [IMAGE_LAYOUT.node, `${IMAGE_LAYOUT.helpers}/stream-relay.cjs`] } });
  const endpoint: Endpoint = { name: "model-api", socket };
  const spec: SandboxSpec = {
    image,
    entrypoint: [IMAGE_LAYOUT.node, "-e", PROGRAM],
    cmd: [],
    env: { ENDPOINT: sandbox.reach(endpoint) },
    user: "1000:1000",
    memoryVolumes: [{ target: "/tmp", bytes: 8 * 1024 ** 2, mode: "1777" }],
    endpoints: [endpoint],
    limits: { pidsLimit: 64 },
    security: { readOnlyRoot: true, dropAllCapabilities: true, noNewPrivileges: true },
    network,
    labels: { "suite.run": `sandbox-names-${process.pid}` },
  };
  const prepared = await sandbox.prepare(spec);
  try {
    const info = await new Docker().getContainer(prepared.id).inspect();
    const { stdout } = await prepared.run();
    let text = "";
    stdout.on("data", (d: Buffer) => (text += d.toString("utf8")));
    const exit = await prepared.wait();
    await new Promise((r) => setImmediate(r));
    expect(exit.exitCode, text).toBe(0);
    return { seen: JSON.parse(text) as Record<string, string>, networkDisabled: (info.Config as { NetworkDisabled?: boolean }).NetworkDisabled, networkMode: info.HostConfig.NetworkMode };
  } finally {
    await prepared.cleanup();
    await sandbox.settle();
  }
}

describe("network none, with and without names", () => {
  for (const channel of ["host-paths", "engine-api"] as const) {
    // contract: R281
    it(`${channel}: with names localhost resolves; without, the engine sets up no network and no name resolves, yet loopback and the endpoint work`, async () => {
      const kept = await runWith(channel, { mode: "none" });
      expect(kept.seen).toEqual({ localhost: "127.0.0.1", loopback: "loop", endpoint: "pong" });
      expect([kept.networkMode, kept.networkDisabled ?? false]).toEqual(["none", false]);
      const none = await runWith(channel, { mode: "none", names: false });
      expect(none.seen.localhost).toMatch(/^E[A-Z_]+$/);
      expect(none.seen).toMatchObject({ loopback: "loop", endpoint: "pong" });
      expect([none.networkMode, none.networkDisabled]).toEqual(["none", true]);
    }, 120_000);
  }
});

describe("the image's probes", () => {
  // contract: R281
  it("the version probe and the files probe: the engine sets up no network for their containers, and the version is read as before", async () => {
    const seen: Array<{ cmd: string; networkMode: string; networkDisabled: boolean }> = [];
    // The engine's own view of each container the probes create, taken before it is removed.
    const watched = new (class extends DockerRuntime {
      override async create(spec: ContainerSpec): Promise<string> {
        const id = await super.create(spec);
        const info = await new Docker().getContainer(id).inspect();
        seen.push({ cmd: (info.Config.Cmd ?? []).join(" "), networkMode: info.HostConfig.NetworkMode ?? "", networkDisabled: (info.Config as { NetworkDisabled?: boolean }).NetworkDisabled === true });
        return id;
      }
    })();
    const labels = { "suite.run": `sandbox-names-probe-${process.pid}` };
    expect((await probeVersion(watched, image, { labels })).version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(await runnerFilesProblem(watched, image, labels)).toBeNull();
    expect(seen).toEqual([
      { cmd: "--version", networkMode: "none", networkDisabled: true },
      { cmd: "--version", networkMode: "none", networkDisabled: true },
    ]);
    expect(await runtime.listByLabel(labels)).toEqual([]);
  }, 120_000);
});
