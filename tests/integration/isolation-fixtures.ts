/**
 * Shared set-up of the isolation tests (issue 9): the demo corpus, indexes, fake claude image and
 * test login (src/demo/setup.ts), a loopback echo server standing in for an allowed host, and
 * the study run through the runner's own orchestrator in this process, so that the egress proxy
 * can be given a test resolver. Everything stays on loopback and unix sockets.
 */
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { prepareDemo, type DemoSetup } from "../../src/demo/setup.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import type { ContainerRuntime, ContainerSpec } from "../../src/sandbox/port.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { runStudy, type StudyConfig } from "../../src/study/run.ts";
import type { TestHooks } from "../../src/transport/test-hooks.ts";
import { readLedger } from "../../src/ledger/store.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import type { Resolve } from "../../src/isolation/policy.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";

export const MODEL = "claude-haiku-5-5";
/** The one name the test resolver knows; it maps to the loopback echo server. */
export const ALLOWED = "allowed.example";

/** One entry of the fake's `connect` behaviour (src/stand-ins/fake-claude/claude.cjs). */
export interface ConnectSpec {
  host: string;
  port: number;
  count?: number;
  concurrency?: number;
  direct?: boolean;
  send?: string;
  holdMs?: number;
  timeoutMs?: number;
}
/** One line of the fake's records/connect-<attempt>-*.jsonl. */
export interface ConnectOutcome {
  host: string;
  port: number;
  via: "proxy" | "direct";
  count: number;
  results: Record<string, number>;
  echo: string | null;
}

export interface Fixture {
  work: string;
  demo: DemoSetup;
  runtime: DockerRuntime;
  echo: { port: number; connections: () => number };
  /** Every host:port the test resolver was asked for. */
  resolved: string[];
  resolve: Resolve;
  cleanup(): Promise<void>;
}

export async function prepareFixture(name: string): Promise<Fixture> {
  const work = await mkdtemp(join(tmpdir(), `sr-iso-${name}-`));
  const runtime = new DockerRuntime();
  const demo = await prepareDemo(join(work, "demo"), runtime);
  let connections = 0;
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    connections++;
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    s.on("error", () => {});
    s.on("data", (d: Buffer) => s.write(Buffer.concat([Buffer.from("echo:"), d])));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  const resolved: string[] = [];
  // Test-only: the allowed name is a loopback server; any other name fails, so nothing is ever
  // looked up in real DNS or dialled off this machine.
  const resolve: Resolve = async (host, p) => {
    resolved.push(`${host}:${p}`);
    if (host === ALLOWED) return { address: "127.0.0.1", port };
    throw new Error(`test resolver: ${host} is unknown`);
  };
  return {
    work,
    demo,
    runtime,
    echo: { port, connections: () => connections },
    resolved,
    resolve,
    cleanup: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
      await rm(work, { recursive: true, force: true });
    },
  };
}

/** Records the specs of the containers a run creates, on the real engine. */
export class SpyRuntime implements ContainerRuntime {
  readonly specs: ContainerSpec[] = [];
  constructor(private readonly inner: ContainerRuntime) {}
  ping() {
    return this.inner.ping();
  }
  buildImage(...a: Parameters<ContainerRuntime["buildImage"]>) {
    return this.inner.buildImage(...a);
  }
  inspectImage(ref: string) {
    return this.inner.inspectImage(ref);
  }
  create(spec: ContainerSpec) {
    // A copy without the workspace's tar function (a function cannot be cloned).
    this.specs.push(JSON.parse(JSON.stringify(spec)) as ContainerSpec);
    return this.inner.create(spec);
  }
  attach(id: string) {
    return this.inner.attach(id);
  }
  start(id: string) {
    return this.inner.start(id);
  }
  wait(id: string) {
    return this.inner.wait(id);
  }
  kill(id: string, signal?: string) {
    return this.inner.kill(id, signal);
  }
  inspect(id: string) {
    return this.inner.inspect(id);
  }
  remove(id: string) {
    return this.inner.remove(id);
  }
  listByLabel(labels: Record<string, string>) {
    return this.inner.listByLabel(labels);
  }
}

/** The parts of the fake's record of its container these tests read. */
export interface FakeContainerRecord {
  networkInterfaces: string[];
  envNames: string[];
  listings: Record<string, { entries: string[] } | { error: string }>;
}

export interface IsolatedRun {
  code: number;
  ledger: Ledger;
  /** The fake's connection outcomes, by attempt index. */
  connects: Map<number, ConnectOutcome[]>;
  /** The fake's records of its container, by attempt index. */
  records: Map<number, FakeContainerRecord>;
  specs: ContainerSpec[];
  stderr: string;
}

let counter = 0;

export async function runIsolated(
  f: Fixture,
  o: {
    isolation: StudyConfig["isolation"];
    behaviour: object;
    plan?: "pilot" | "repository";
    /** The allowlist (the study's `egress`) and the proxy's resolver and bounds (its test hooks). */
    egress?: StudyConfig["egress"] & NonNullable<TestHooks["egress"]>;
    runtime?: string;
    timeoutMs?: number;
  },
): Promise<IsolatedRun> {
  const dir = join(f.work, "runs", String(++counter));
  const fakeDir = join(dir, "fake");
  const recordsDir = join(fakeDir, "records");
  await mkdir(recordsDir, { recursive: true });
  // The fake runs as uid 1000: it reads the behaviour file and writes its records.
  await chmod(fakeDir, 0o755);
  await chmod(recordsDir, 0o777);
  const behaviourFile = join(fakeDir, "behaviour.json");
  await writeFile(behaviourFile, JSON.stringify(o.behaviour), { mode: 0o644 });

  const loaded = await loadManifest(DEMO_MANIFEST);
  const pilot = planStudy(loaded.manifest, "pilot");
  const plan = o.plan === "repository" ? pilot.filter((a) => a.arm === "repository").map((a) => ({ ...a, index: 0 })) : pilot;
  const config: StudyConfig = {
    loaded,
    mode: "pilot",
    plan,
    fullPlanSize: planStudy(loaded.manifest, "full").length,
    roots: new Map(Object.entries(f.demo.roots)),
    model: MODEL,
    capUsd: 1,
    attemptBudgetUsd: 0.1,
    output: join(dir, "ledger.json"),
    image: f.demo.image,
    expectedCliVersion: "2.1.296",
    isolation: o.isolation,
    ...(o.egress ? { egress: { allow: o.egress.allow }, testHooks: { egress: { resolve: o.egress.resolve, limits: o.egress.limits } } } : {}),
    runtime: o.runtime,
    docBridgeCommand: referenceEngineCommand(),
    claudeConfigDir: f.demo.loginDir,
    fake: { behaviourFile, recordsDir },
    timeoutMs: o.timeoutMs ?? 60_000,
    quiet: true,
  };
  const spy = new SpyRuntime(f.runtime);
  let stderr = "";
  const code = await runStudy(config, {
    runtime: spy,
    stdout: () => {},
    stderr: new Writable({
      write(chunk, _enc, cb) {
        stderr += String(chunk);
        cb();
      },
    }),
  });
  const connects = new Map<number, ConnectOutcome[]>();
  const records = new Map<number, FakeContainerRecord>();
  for (const name of (await readdir(recordsDir)).sort()) {
    const text = await readFile(join(recordsDir, name), "utf8");
    const connect = /^connect-(\d+)-/.exec(name);
    if (connect)
      connects.set(
        Number(connect[1]),
        text
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l) as ConnectOutcome),
      );
    const record = /^(\d+)-.*\.json$/.exec(name);
    if (record) records.set(Number(record[1]), JSON.parse(text));
  }
  return { code, ledger: await readLedger(config.output), connects, records, specs: spy.specs.filter((s) => s.labels["study-runner.attempt"] !== "probe"), stderr };
}

/** Outcome counts of one connect entry, e.g. { tunnel: 1 }. */
export function outcomes(list: ConnectOutcome[] | undefined, host: string, port: number, via?: "proxy" | "direct"): Record<string, number> | undefined {
  return list?.find((c) => c.host === host && c.port === port && (via === undefined || c.via === via))?.results;
}
