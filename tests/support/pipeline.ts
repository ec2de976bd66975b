/**
 * End-to-end runs of the `study-runner` command against the real Docker engine, with the demo
 * corpus, its doc-bridge indexes, the fake claude image and a test login (src/demo/setup.ts). The
 * command is started as runCli starts it: the compiled build of today's sources in the integration
 * and conformance tiers, the launcher when a run asks (`launcher`; tests/support/cli.ts).
 * Each run gets its own folder: the ledger path, the fake's behaviour file and records, and the
 * runner's TMPDIR (so its export folders and attempt HOMEs can be looked at after it ended).
 */
import { expectedInit } from "../../src/claude/init-expectation.ts";
import { initEventFrom } from "./init-event.ts";
import { spawn, type ChildProcess } from "node:child_process";
import Docker from "dockerode";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { prepareDemo, writeTestLogin, type DemoSetup } from "../../src/demo/setup.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { readLedger } from "../../src/ledger/store.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { LAUNCHER, runEntry, runnerEntry, type CliResult } from "./cli.ts";
import type { FakeBehaviour, FakeBehaviourFile, FakeRecord } from "./fake-claude.ts";

export const MODEL = "claude-haiku-5-5";
export const RUN_ENV = { STUDY_MODEL: MODEL, STUDY_BUDGET_USD: "1" } as const;
/** Seed 000: the default per-attempt limit, reserved for every attempt. */
export const RESERVATION_USD = 0.1;

/** Options of the fake's "ok" behaviour beyond the shared FakeBehaviour type. */
export interface OkExtras {
  /** A non-JSON line before the init event. */
  malformedFirst?: boolean;
  /** A pause before the answer. */
  delayMs?: number;
  /** Rewrite $HOME/.claude/.credentials.json with new tokens and a later expiresAt. */
  refreshLogin?: boolean;
}
export type Behaviour =
  | FakeBehaviour
  | (Extract<FakeBehaviour, { kind: "ok" }> & OkExtras)
  /** `events` are printed before the flood. */
  | (Extract<FakeBehaviour, { kind: "flood" }> & { events?: unknown[] });

/**
 * The init event the real CLI prints first in the repository arm, as the runner expects it (the
 * measured init, src/claude/init-expectation.ts): for behaviours that hang or flood after starting normally.
 */
export function repositoryInit(): Record<string, unknown> {
  return initEventFrom(expectedInit("attempt-repository", { model: MODEL }), { sessionId: "00000000-0000-4000-8000-000000000000", uuid: "00000000-0000-4000-8000-000000000001", pid: 17 });
}
export interface BehaviourFile extends Omit<FakeBehaviourFile, "default" | "attempts"> {
  default?: Behaviour;
  attempts?: Record<string, Behaviour>;
}
export interface PipelineRecord extends FakeRecord {
  credentialsExpiresAt: number | null;
  at: string;
}

export interface Pipeline {
  work: string;
  demo: DemoSetup;
  runtime: DockerRuntime;
  /** `--root` flags for every demo repository. */
  rootArgs: string[];
  cleanup(): Promise<void>;
}

/** The demo corpus, doc-bridge indexes, fake image and test login in a new temp folder. */
export async function preparePipeline(name: string): Promise<Pipeline> {
  const work = await mkdtemp(join(tmpdir(), `sr-${name}-`));
  const runtime = new DockerRuntime();
  const demo = await prepareDemo(join(work, "demo"), runtime);
  // By id, not by tag: every checkout on this engine builds the same tag from its own helpers and
  // retags it, so a tag can name another checkout's image by the time a run starts.
  demo.image = demo.imageId;
  return {
    work,
    demo,
    runtime,
    rootArgs: Object.entries(demo.roots).flatMap(([n, dir]) => ["--root", `${n}=${dir}`]),
    cleanup: () => rm(work, { recursive: true, force: true }),
  };
}

export interface RunSpec {
  mode?: "pilot" | "run";
  behaviour?: BehaviourFile;
  /** Default: the demo's test login. */
  loginDir?: string;
  /** Extra flags (e.g. --quiet, --cli-version 9.9.9). */
  args?: string[];
  env?: Record<string, string | undefined>;
  /** The runner's TMPDIR; default a new folder of this run. */
  tmp?: string;
  timeoutMs?: number;
  /** Start bin/study-runner.mjs, the launcher a person runs, not the tier's compiled build (runnerEntry). */
  launcher?: boolean;
}

export interface PreparedRun {
  dir: string;
  /** The ledger path (--output); does not exist before the run. */
  output: string;
  tmp: string;
  recordsDir: string;
  args: string[];
  env: Record<string, string | undefined>;
  timeoutMs: number;
  /** The script `node` runs: the launcher or the compiled build (tests/support/cli.ts, runnerEntry). */
  entry: string;
}

let counter = 0;

/**
 * The launcher's compile cache in a run's own TMPDIR (for the runs that start the launcher). tsx keeps the sources it compiled in
 * `$TMPDIR/tsx-<euid>`, so a runner started with a new TMPDIR (every run here, to look at its
 * export folders and attempt HOMEs) compiled every source again, about a third of a second of CPU
 * per start (docs/performance.md, "The test suite"). A link to the cache this process's own CLI
 * starts use makes the start what a person's second start is; the runner's own folders are unchanged.
 */
export async function shareTsxCache(tmp: string): Promise<void> {
  const name = `tsx-${process.geteuid?.() ?? userInfo().username}`;
  const shared = join(tmpdir(), name);
  await mkdir(shared, { recursive: true, mode: 0o700 });
  await symlink(shared, join(tmp, name)).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "EEXIST") throw err;
  });
}

export async function prepareRun(p: Pipeline, spec: RunSpec = {}): Promise<PreparedRun> {
  const dir = join(p.work, "runs", `${++counter}`);
  const fakeDir = join(dir, "fake");
  const recordsDir = join(fakeDir, "records");
  const tmp = spec.tmp ?? join(dir, "tmp");
  await mkdir(recordsDir, { recursive: true });
  await mkdir(tmp, { recursive: true });
  const entry = spec.launcher ? LAUNCHER : await runnerEntry();
  // Only the launcher compiles through tsx; the compiled build has no cache to share.
  if (entry === LAUNCHER) await shareTsxCache(tmp);
  // The fake runs as uid 1000 in its container: it reads the behaviour file and writes records.
  await chmod(fakeDir, 0o755);
  await chmod(recordsDir, 0o777);
  const behaviourFile = join(fakeDir, "behaviour.json");
  await writeFile(behaviourFile, JSON.stringify(spec.behaviour ?? {}), { mode: 0o644 });
  const output = join(dir, "ledger.json");
  const args = [
    spec.mode === "run" ? "--run" : "--pilot",
    "--transport",
    "cli",
    // The fake image makes no model request; these runs exercise the login copy and its write-back.
    "--credentials",
    "login-copy",
    "--isolation",
    "offline",
    "--image",
    p.demo.image,
    "--claude-config-dir",
    spec.loginDir ?? p.demo.loginDir,
    "--approve-budget",
    "--output",
    output,
    ...p.rootArgs,
    "--fake-behaviour",
    behaviourFile,
    "--fake-records",
    recordsDir,
    ...(spec.args ?? []),
  ];
  return { dir, output, tmp, recordsDir, args, env: { ...RUN_ENV, TMPDIR: tmp, ...spec.env }, timeoutMs: spec.timeoutMs ?? 180_000, entry };
}

export interface PipelineResult extends CliResult {
  run: PreparedRun;
}

/** One run of the command, as runCli starts it (the tier's compiled build, or the launcher: `spec.launcher`). */
export async function runPipeline(p: Pipeline, spec: RunSpec = {}): Promise<PipelineResult> {
  const run = await prepareRun(p, spec);
  const r = await runEntry(run.entry, run.args, { env: run.env, timeoutMs: run.timeoutMs });
  return { ...r, run };
}

/**
 * The same command as a child process the test can signal. The environment is built like
 * runCli's: only PATH, HOME, DOCKER_HOST, TMPDIR of this process, then the run's own.
 */
export interface StartedRun {
  child: ChildProcess;
  pid: number;
  done: Promise<CliResult>;
  /** What the runner wrote so far. */
  output(): { stdout: string; stderr: string };
}

export function startPipeline(run: PreparedRun): StartedRun {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, DOCKER_HOST: process.env.DOCKER_HOST };
  for (const [k, v] of Object.entries(run.env)) env[k] = v;
  for (const k of Object.keys(env)) if (env[k] === undefined) delete env[k];
  const child = spawn(process.execPath, [run.entry, ...run.args], {
    cwd: PROJECT_ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
  const done = new Promise<CliResult>((resolvePromise, reject) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), run.timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
  return { child, pid: child.pid!, done, output: () => ({ stdout, stderr }) };
}

/** stdout must be exactly one JSON document: the summary. */
export function summaryOf(stdout: string): Record<string, any> {
  return JSON.parse(stdout) as Record<string, any>;
}

export function stderrLines(stderr: string): string[] {
  return stderr.split("\n").filter((l) => l !== "" && !DIGEST_LINE.test(l));
}

/** The evidence digest the run prints after each settled observation (contract R177). */
export const DIGEST_LINE = /^study-runner: evidence digest after observation \d+ settled: [0-9a-f]{64} /;

/** The observations whose settled state the run printed a digest of, in order. */
export function digestLines(stderr: string): number[] {
  return stderr
    .split("\n")
    .filter((l) => DIGEST_LINE.test(l))
    .map((l) => Number(/observation (\d+)/.exec(l)![1]));
}

/** A progress line: `study-runner: [i/n] task scenario rep r: ...`. */
export const PROGRESS_LINE = /^study-runner: \[\d+\/\d+\] \S+ \S+ rep \d+: /;

export async function ledgerOf(run: PreparedRun): Promise<Ledger> {
  return readLedger(run.output);
}

export async function fileMode(path: string): Promise<number> {
  return (await stat(path)).mode & 0o777;
}

export async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** Records of the fake, by attempt label ("0", "1", ...), in file-name order. */
export async function recordsOf(run: PreparedRun): Promise<Array<{ file: string; text: string; record: PipelineRecord }>> {
  const names = (await readdir(run.recordsDir)).filter((n) => n.endsWith(".json")).sort();
  return Promise.all(
    names.map(async (file) => {
      const text = await readFile(join(run.recordsDir, file), "utf8");
      return { file, text, record: JSON.parse(text) as PipelineRecord };
    }),
  );
}

/** Every record's text, concatenated (for "this string appears nowhere" checks). */
export async function recordsText(run: PreparedRun): Promise<string> {
  return (await recordsOf(run)).map((r) => r.text).join("\n");
}

/** Containers of one run, found by the label every runner container carries. */
export async function containersOfRun(p: Pipeline, runId: string) {
  return p.runtime.listByLabel({ [LABELS.run]: runId });
}

/**
 * Ids of the containers the engine created, between two moments, carrying a runner pid's label.
 * Read from the engine's event log, so it holds even when a container was removed since (a
 * runner's own cleanup, or another run's reaper: every run's preflight removes the containers of
 * runners that are gone, and test files run side by side on one engine).
 */
export async function containersCreatedBy(pid: number, sinceMs: number, untilMs: number, o: { exceptProbes?: boolean } = {}): Promise<string[]> {
  // dockerode reads DOCKER_HOST itself, as the runner's engine port does.
  const stream = (await new Docker().getEvents({
    since: Math.floor(sinceMs / 1000) - 1,
    until: Math.ceil(untilMs / 1000) + 1,
    filters: { type: ["container"], event: ["create"], label: [`${LABELS.pid}=${pid}`] },
  })) as NodeJS.ReadableStream;
  let text = "";
  for await (const chunk of stream) text += chunk.toString();
  return (
    text
      .split("\n")
      .filter((line) => line.trim() !== "")
      .map((line) => JSON.parse(line) as { id: string; Actor?: { Attributes?: Record<string, string> } })
      // The version probe carries the attempt label "probe": no attempt of the run.
      .filter((e) => !o.exceptProbes || e.Actor?.Attributes?.[LABELS.attempt] !== "probe")
      .map((e) => e.id)
  );
}

/** Runner-owned leftovers in a TMPDIR: export folders and attempt HOMEs (which hold a login copy). */
export async function leftovers(tmp: string, pid?: number): Promise<string[]> {
  const names = await readdir(tmp).catch(() => [] as string[]);
  return names.filter((n) => /^study-runner-(export|home|mcp|egress|gateway)-\d+-/.test(n) && (pid === undefined || n.includes(`-${pid}-`)));
}

/** Polls until `check` returns a value other than undefined. */
export async function waitFor<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 60_000, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * Waits until attempt `attempt` of a started runner has a running container; returns its id.
 * Fails at once, with the runner's output, if the runner ends first.
 */
export async function waitForAttemptContainer(p: Pipeline, started: StartedRun, attempt = "0", timeoutMs = 90_000): Promise<string> {
  let ended: CliResult | undefined;
  void started.done.then((r) => (ended = r));
  try {
    return await waitFor(
      `a running container of attempt ${attempt} of pid ${started.pid}`,
      async () => {
        if (ended) throw new Error(`the runner ended (exit ${ended.code}) before attempt ${attempt} had a container`);
        const found = await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid), [LABELS.attempt]: attempt });
        return found.find((c) => c.running)?.id;
      },
      timeoutMs,
    );
  } catch (err) {
    started.child.kill("SIGKILL");
    const { stdout, stderr } = started.output();
    throw new Error(`${(err as Error).message}; runner output so far:\n${stderr}${stdout}`);
  }
}

/** A login folder of its own (so runs that share the demo's login do not wait on each other's lock). */
export async function freshLogin(p: Pipeline, token?: string): Promise<string> {
  const dir = join(p.work, "logins", `${++counter}`);
  await writeTestLogin(dir, token);
  return dir;
}
