import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { spawn } from "node:child_process";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { text } from "node:stream/consumers";
import type { ContainerRuntime, ContainerSpec, Mount } from "../../src/sandbox/port.ts";
import { FAKE_CLAUDE_SCRIPT } from "../../src/stand-ins/fake-claude/image.ts";
import { activeProfile } from "../../src/profile/load.ts";

const GENERATED_INIT_EVENTS = activeProfile().initEvents;
const GENERATED_PRICE_TABLE = activeProfile().prices;

/** Helpers to drive src/stand-ins/fake-claude/claude.cjs: its behaviour file, its records. */

export interface ToolCall {
  name: string;
  input?: Record<string, unknown>;
  /** Put the call into permission_denials with an error tool_result. */
  denied?: boolean;
}

export interface TurnUsage {
  input?: number;
  output?: number;
  cacheRead?: number;
  cacheWrite5m?: number;
  cacheWrite1h?: number;
}

export type FakeBehaviour =
  | {
      kind: "ok";
      answer?: string;
      twoResults?: boolean;
      foreignModelUsage?: boolean;
      subtype?: string;
      isError?: boolean;
      callTool?: ToolCall | ToolCall[];
      mcpCalls?: Array<{ tool: string; arguments?: Record<string, unknown>; server?: string }>;
      /** Pretend the MCP servers are connected without connecting (default: connect like the real CLI). */
      simulateMcp?: boolean;
      turnUsage?: TurnUsage[];
      reportedCostFactor?: number;
      exitCode?: number;
      version?: string;
      /** Adjudicator: verdict fields by item id, and the arm-guess call's guess by item id. */
      verdicts?: Record<string, Record<string, unknown>>;
      guesses?: Record<string, "files-only" | "files-and-docs-server">;
      /** A pause before the arm-guess call (its --json-schema asks for armGuess alone) answers. */
      guessDelayMs?: number;
      /** Connections opened before the transcript, to host:port or a unix socket `path` (claude.cjs, attemptConnections). */
      connect?: Array<{ host?: string; port?: number; path?: string; count?: number; concurrency?: number; direct?: boolean; send?: string; holdMs?: number; timeoutMs?: number }>;
    }
  | { kind: "events"; events: unknown[]; malformedFirst?: boolean; exitCode?: number; version?: string }
  | { kind: "exit"; events?: unknown[]; code: number; version?: string }
  | { kind: "sleep"; seconds: number; events?: unknown[]; exitCode?: number; version?: string }
  | { kind: "flood"; bytes?: number; exitCode?: number; version?: string }
  | { kind: "garbage"; lines?: number; exitCode?: number; version?: string }
  /** Allocates memory until the container's memory limit kills it (at most maxMb, default 1024). */
  | { kind: "oom"; events?: unknown[]; maxMb?: number; exitCode?: number; version?: string };

export interface FakeBehaviourFile {
  version?: string;
  default?: FakeBehaviour;
  attempts?: Record<string, FakeBehaviour>;
  /** Extra paths whose listing the record includes. */
  probePaths?: string[];
}

/** What the fake wrote about one run of itself. */
export interface FakeRecord {
  argv: string[];
  envNames: string[];
  anthropicApiKeyPresent: boolean;
  attempt: string | null;
  uid: number;
  gid: number;
  cwd: string;
  cwdWritable: boolean;
  rootWritable: boolean;
  home: string | null;
  homeWritable: boolean;
  credentialsPresent: boolean;
  /** fd 0 of the fake's process, as /proc/self/fd/0 names it. */
  stdinTarget?: string;
  networkInterfaces: string[];
  /** `localhost` named in the container's hosts file (contract R281). */
  localhostNamed: boolean;
  listings: Record<string, { entries: string[] } | { error: string }>;
}

export interface FakeDir {
  /** Host directory holding behaviour.json and records/. */
  dir: string;
  /** Mounts for a container: the dir read-only at /fake, records/ writable at /fake/records. */
  mounts: Mount[];
  /** Records sorted by file name (`<attempt|probe>-<pid>-<random>.json`). */
  records(): Promise<Array<{ file: string; record: FakeRecord }>>;
  cleanup(): Promise<void>;
}

/** A behaviour dir; `file` undefined writes no behaviour.json (the fake then acts "ok"). */
export async function makeFakeDir(file?: FakeBehaviourFile): Promise<FakeDir> {
  const dir = await mkdtemp(join(tmpdir(), "fake-claude-"));
  await chmod(dir, 0o755);
  const records = join(dir, "records");
  await mkdir(records);
  // The fake runs as uid 1000 in the image; the test process is usually root.
  await chmod(records, 0o777);
  if (file !== undefined) await writeFile(join(dir, "behaviour.json"), JSON.stringify({ prices: GENERATED_PRICE_TABLE.models, ...file }), { mode: 0o644 });
  return {
    dir,
    mounts: [
      { source: dir, target: "/fake", readOnly: true },
      { source: records, target: "/fake/records", readOnly: false },
    ],
    async records() {
      const names = (await readdir(records)).filter((n) => n.endsWith(".json")).sort();
      return Promise.all(names.map(async (n) => ({ file: n, record: JSON.parse(await readFile(join(records, n), "utf8")) as FakeRecord })));
    },
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}

export interface HostRun {
  stdout: string;
  stderr: string;
  exitCode: number | null;
}

/** Runs the fake directly with this Node (no container): quick checks of its own logic. */
export function runFakeOnHost(
  args: string[],
  opts: { cwd: string; fakeDir?: string; env?: Record<string, string>; timeoutMs?: number /** Written to its stdin (a session's prompt). */; input?: string },
): Promise<HostRun> {
  // The image carries the measured price table; on the host the fake reads the same table from a copy.
  // Outside the workspace: the fake lists the workspace in its transcript and records.
  const dataDir = mkdtempSync(join(tmpdir(), "fake-cli-prices-"));
  const prices = join(dataDir, "prices.json");
  writeFileSync(prices, JSON.stringify(GENERATED_PRICE_TABLE.models));
  // And the measured init events, as the image carries them.
  const init = join(dataDir, "init.json");
  writeFileSync(init, JSON.stringify(GENERATED_INIT_EVENTS));
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [FAKE_CLAUDE_SCRIPT, ...args], {
      cwd: opts.cwd,
      env: {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        HOME: opts.cwd,
        FAKE_CLAUDE_DIR: opts.fakeDir ?? join(opts.cwd, ".no-fake-dir"),
        FAKE_CLAUDE_PRICES: prices,
        FAKE_CLAUDE_INIT: init,
        ...opts.env,
      },
      stdio: [opts.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    if (opts.input !== undefined) child.stdin!.end(opts.input);
    let stdout = "";
    let stderr = "";
    child.stdout!.setEncoding("utf8").on("data", (c: string) => (stdout += c));
    child.stderr!.setEncoding("utf8").on("data", (c: string) => (stderr += c));
    const timer = setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs ?? 20_000);
    child.on("error", (err) => {
      rmSync(dataDir, { recursive: true, force: true });
      reject(err);
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      rmSync(dataDir, { recursive: true, force: true });
      resolve({ stdout, stderr, exitCode: code });
    });
  });
}

/** Stream-json lines as parsed events; throws on a line that is not JSON. */
export function parseEvents(stdout: string): Array<Record<string, any>> {
  return stdout
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, any>);
}

/** The argument shape the runner passes (seed 000), for tests that need a valid call. */
export function streamJsonArgs(opts: { model?: string; tools?: string; allowed?: string[]; mcpConfig?: string; prompt?: string } = {}): string[] {
  const args = ["-p", "--output-format", "stream-json", "--verbose", "--model", opts.model ?? "claude-haiku-5-5"];
  args.push("--tools", opts.tools ?? "Read,Grep,Glob");
  args.push("--allowedTools", ...(opts.allowed ?? ["Read", "Grep", "Glob"]));
  if (opts.mcpConfig !== undefined) args.push("--mcp-config", opts.mcpConfig);
  args.push("--permission-mode", "dontAsk", "--", opts.prompt ?? "What does this repository do?");
  return args;
}

export interface ContainerRun {
  stdout: string;
  stderr: string;
  exitCode: number;
  oomKilled: boolean;
  timedOut: boolean;
}

/** Creates, attaches, starts and waits for a container (killing it after `timeoutMs`), then removes it. */
export async function runToEnd(runtime: ContainerRuntime, spec: ContainerSpec, timeoutMs = 30_000): Promise<ContainerRun> {
  const id = await runtime.create(spec);
  try {
    const { stdout, stderr } = await runtime.attach(id);
    const output = Promise.all([text(stdout), text(stderr)]);
    await runtime.start(id);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      void runtime.kill(id);
    }, timeoutMs);
    const exit = await runtime.wait(id).finally(() => clearTimeout(timer));
    const [out, err] = await output;
    return { stdout: out, stderr: err, ...exit, timedOut };
  } finally {
    await runtime.remove(id);
  }
}
