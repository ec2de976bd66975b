import { randomUUID } from "node:crypto";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolveLogin, stageLogin } from "../../src/credentials/login.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { buildImage } from "../../src/image/build.ts";
import type { Resolve } from "../../src/isolation/policy.ts";
import { startEgressProxy } from "../../src/isolation/proxy.ts";
import type { EgressRecord } from "../../src/ledger/schema.ts";
import { runBounded } from "../../src/sandbox/bounded.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { DockerSandbox, type SandboxChannel } from "../../src/sandbox/docker-sandbox.ts";
import { LABELS, runnerLabels } from "../../src/sandbox/reaper.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import { attemptSandboxSpec } from "../../src/transport/cli/spec.ts";
import { runCli } from "../support/cli.ts";

/**
 * The run kinds the engine-api channel carries beyond a study's attempts and the adjudicator, on
 * the local engine forced onto the channel (`--sandbox-channel engine-api`; the second engine's
 * run is in engine-files.test.ts): session calls and their test commands, the strict profile's
 * egress proxy, and attempts under gVisor (`--runtime runsc`, registered on this engine).
 */

const runtime = new DockerRuntime();
const docker = new Docker();
let work: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-engine-api-runs-"));
}, 60_000);
afterAll(() => rm(work, { recursive: true, force: true }));

/** The session ledger a `demo --sessions` wrote in `workdir`. */
async function sessionLedger(workdir: string): Promise<Record<string, unknown>> {
  const name = (await readdir(join(workdir, "ledgers"))).find((n) => /^sessions-.*\.json$/.test(n))!;
  return JSON.parse(await readFile(join(workdir, "ledgers", name), "utf8"));
}

/** Fields that differ between any two runs of the same sessions: times, durations, containers, transcript digests, the run's own paths. */
const VARYING = new Set([
  "createdAt",
  "at",
  "startedAt",
  "askedAt",
  "answeredAt",
  "waited_s",
  "durationMs",
  "duration_ms",
  "wallTimeMs",
  "containerId",
  "transcriptSha256",
  "storageDir",
  "manifestPath",
  "roots",
]);

/** The ledger with what varies between runs replaced: ids numbered by first appearance, the test output's timings dropped. */
function normalized(ledger: Record<string, unknown>): unknown {
  const ids = [String(ledger.runId), ...(ledger.sessions as Array<{ id: string }>).map((s) => s.id)];
  const walk = (value: unknown, key?: string): unknown => {
    if (key !== undefined && VARYING.has(key)) return "<varies>";
    if (Array.isArray(value)) return value.map((v) => walk(v));
    if (value !== null && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v, k)]));
    if (typeof value !== "string") return value;
    let text = value;
    for (const [i, id] of ids.entries()) text = text.replaceAll(id, `<id ${i}>`);
    return key === "output" ? text.replace(/duration_ms:? [0-9.]+/g, "duration_ms <varies>") : text;
  };
  return walk(ledger);
}

describe("the engine-api channel on the local engine", () => {
  // contract: R245
  it("`demo --sessions --sandbox-channel engine-api` exits 0 with the ledger the host-paths channel writes, apart from times, ids and the sandbox header", async () => {
    const ledgers: Record<SandboxChannel, Record<string, unknown>> = {} as never;
    for (const channel of ["host-paths", "engine-api"] as const) {
      const workdir = join(work, `sessions-${channel}`);
      const r = await runCli(["demo", "--sessions", "--quiet", "--sandbox-channel", channel, "--workdir", workdir], { timeoutMs: 600_000 });
      expect(r.code, r.stderr).toBe(0);
      ledgers[channel] = await sessionLedger(workdir);
    }
    const api = ledgers["engine-api"];
    expect(api.sandbox).toEqual({ provider: "docker", channel: "engine-api", endpoint: expect.stringMatching(/^unix:\/\//), os: "linux", arch: expect.any(String) });
    expect((ledgers["host-paths"].sandbox as { channel: string }).channel).toBe("host-paths");
    // Both sessions asked, were answered, resumed in a fresh container with their session files
    // (the session channel over the stream) and their edits (the worktree copied back), and their
    // tests passed on the worktree copied in again.
    const sessions = api.sessions as Array<{ state: string; calls: Array<{ status: string; resultStatus: string }>; test: { exitCode: number } }>;
    expect(sessions.map((s) => [s.state, s.calls.map((c) => `${c.status} ${c.resultStatus}`), s.test.exitCode])).toEqual([
      ["done", ["completed question", "completed done"], 0],
      ["done", ["completed question", "completed done"], 0],
    ]);
    const { sandbox: _a, ...apiRest } = api;
    const { sandbox: _h, ...hostRest } = ledgers["host-paths"];
    expect(normalized(apiRest)).toEqual(normalized(hostRest));
    // Nothing of the engine-api run is left on the engine: no container, no volume.
    const run = [`${LABELS.run}=${String(api.runId)}`];
    expect(await docker.listContainers({ all: true, filters: { label: run } })).toEqual([]);
    expect((await docker.listVolumes({ filters: { label: run } })).Volumes ?? []).toEqual([]);
  }, 1_300_000);

  // contract: R248
  it("an attempt of the strict profile reaches an allowed name through its proxy over the stream and is refused others, recorded as on host-paths", async () => {
    const image = (await buildImage(runtime, await fakeClaudeImageSpec())).id;
    const echo = await echoServer();
    const ALLOWED = "allowed.example";
    const resolved: string[] = [];
    // Test-only: the allowed name is the loopback echo server; any other name fails, so nothing is looked up or dialled off this machine.
    const resolve: Resolve = async (host, port) => {
      resolved.push(`${host}:${port}`);
      if (host === ALLOWED) return { address: "127.0.0.1", port: echo.port };
      throw new Error(`test resolver: ${host} is unknown`);
    };
    const probes = [
      { host: ALLOWED, port: 443, send: "hello" },
      { host: "denied.example", port: 443 },
      { host: "127.0.0.1", port: 443 },
      { host: ALLOWED, port: 80 },
    ];
    const seen: Record<string, { egress: EgressRecord; connects: unknown[]; exitCode: number | null }> = {};
    try {
      for (const channel of ["host-paths", "engine-api"] as const) seen[channel] = await strictAttempt(channel, image, { allow: [ALLOWED], resolve, probes });
    } finally {
      await echo.close();
    }
    const api = seen["engine-api"]!;
    const host = seen["host-paths"]!;
    expect(api.exitCode).toBe(0);
    expect(api.egress).toMatchObject({ requests: 4, allowed: 1, refused: 3, bytesUp: 5, bytesDown: 10, droppedConnections: 0 });
    expect(api.egress.entries.map((e) => [e.host, e.port, e.allowed, e.error ?? null])).toEqual([
      [ALLOWED, 443, true, null],
      ["denied.example", 443, false, "not on the allowlist"],
      ["127.0.0.1", 443, false, expect.stringMatching(/raw IP/)],
      [ALLOWED, 80, false, "port 80 is not 443"],
    ]);
    // The same record and the same outcomes inside as through the bound socket folder.
    const shape = (r: EgressRecord) => ({ ...r, entries: r.entries.map(({ host, port, allowed, error, bytesUp, bytesDown }) => ({ host, port, allowed, error, bytesUp, bytesDown })) });
    expect(shape(api.egress)).toEqual(shape(host.egress));
    expect(api.connects).toEqual(host.connects);
    expect(api.connects).toContainEqual(expect.objectContaining({ host: ALLOWED, port: 443, via: "proxy", results: { tunnel: 1 }, echo: "echo:hello" }));
    expect([...new Set(resolved)]).toEqual([`${ALLOWED}:443`]);
  }, 300_000);

  // contract: R246
  it("`demo --pilot --runtime runsc --sandbox-channel engine-api` runs both arms under gVisor, the doc-bridge reached through the relay's socket", async () => {
    const workdir = join(work, "runsc");
    const r = await runCli(["demo", "--pilot", "--quiet", "--runtime", "runsc", "--sandbox-channel", "engine-api", "--workdir", workdir], { timeoutMs: 600_000 });
    expect(r.code, r.stderr).toBe(0);
    const name = (await readdir(join(workdir, "ledgers"))).find((n) => /^run-.*\.json$/.test(n) && !n.includes("adjudication"))!;
    const ledger = JSON.parse(await readFile(join(workdir, "ledgers", name), "utf8"));
    expect(ledger.runtime).toBe("runsc");
    expect(ledger.sandbox.channel).toBe("engine-api");
    expect(ledger.observations.map((o: { status: string; runtime: string }) => [o.status, o.runtime])).toEqual([
      ["completed", "runsc"],
      ["completed", "runsc"],
    ]);
    // The doc-bridge arm's server was reached through the relay's socket from inside gVisor.
    expect(ledger.observations.find((o: { arm: string }) => o.arm === "mcp").mcp.connections).toBe(1);
  }, 600_000);
});

/** A loopback echo server standing in for the allowed host. */
async function echoServer(): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    s.on("error", () => {});
    s.on("data", (d: Buffer) => s.write(Buffer.concat([Buffer.from("echo:"), d])));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    port: (server.address() as AddressInfo).port,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/**
 * One attempt of the strict profile on `channel`: the fake image in a network-less sandbox, its
 * one way out the runner's egress proxy, a read-only staged login (the channel carries no login
 * copy back), the fake's connect probes. Returns the proxy's record and the fake's outcomes.
 */
async function strictAttempt(
  channel: SandboxChannel,
  image: string,
  o: { allow: string[]; resolve: Resolve; probes: object[] },
): Promise<{ egress: EgressRecord; connects: unknown[]; exitCode: number | null }> {
  const dir = join(work, `strict-${channel}`);
  const fake = join(dir, "fake");
  await mkdir(join(fake, "records"), { recursive: true });
  await chmod(fake, 0o755);
  await chmod(join(fake, "records"), 0o777);
  await writeFile(join(fake, "behaviour.json"), JSON.stringify({ default: { kind: "ok", connect: o.probes } }), { mode: 0o644 });
  const exportDir = join(dir, "export");
  await mkdir(exportDir, { mode: 0o755 });
  await writeFile(join(exportDir, "README.md"), "strict\n", { mode: 0o444 });
  const loginDir = join(dir, "login");
  await writeTestLogin(loginDir);
  const homeDir = join(dir, "home");
  await stageLogin(resolveLogin({ configDir: loginDir }), homeDir);
  const proxy = await startEgressProxy({ allow: o.allow, resolve: o.resolve, socketDir: join(dir, "egress") });
  const sandbox = new DockerSandbox(runtime, { channel });
  let raw: Awaited<ReturnType<typeof runBounded>> | undefined;
  let egress: EgressRecord | undefined;
  try {
    const spec = attemptSandboxSpec(
      {
        image,
        argv: ["-p", "--output-format", "stream-json", "--verbose", "--model", "claude-haiku-5-5", "strict probes"],
        exportDir,
        homeDir,
        loginReadOnly: true,
        network: { mode: "none" },
        egressProxySocket: proxy.socketPath,
        labels: runnerLabels(`strict-${randomUUID()}`, "0"),
        attemptIndex: 0,
        fake: { behaviourFile: join(fake, "behaviour.json"), recordsDir: join(fake, "records") },
      },
      (e) => sandbox.reach(e),
    );
    raw = await runBounded(sandbox, spec, () => {}, { timeoutMs: 120_000 });
  } finally {
    egress = await proxy.stop();
  }
  const connects: unknown[] = [];
  for (const name of (await readdir(join(fake, "records"))).filter((n) => n.startsWith("connect-")).sort()) {
    connects.push(
      ...(await readFile(join(fake, "records", name), "utf8"))
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l)),
    );
  }
  return { egress, connects, exitCode: raw.exitCode };
}
