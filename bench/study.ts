/**
 * Runs the real orchestrator (`runStudy`) on a plan and times every attempt from its
 * "started" progress line to the next one's (the last: to runStudy's return), so the whole
 * loop body counts: reservation and ledger write, export, login, container, transcript, cost,
 * settlement, ledger write. Preflight (engine ping, reaping, the version probe) is per run.
 */
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Writable } from "node:stream";
import { readLedger } from "../src/ledger/store.ts";
import type { Observation } from "../src/ledger/schema.ts";
import type { ContainerRuntime } from "../src/sandbox/port.ts";
import { runStudy, type StudyConfig } from "../src/study/run.ts";
import { TIMING_FILE_ENV, type TimingMark } from "../src/util/marks.ts";
import { loadManifest, type LoadedManifest } from "../src/manifest/load.ts";
import { planStudy, type PlannedAttempt } from "../src/plan/plan.ts";
import { DockerRuntime } from "../src/sandbox/docker.ts";
import { referenceEngineCommand } from "../src/mcp/preflight.ts";
import { DEMO_MANIFEST } from "../src/util/paths.ts";
import { prepareDemo, type DemoSetup } from "../src/demo/setup.ts";
import { CLAUDE_CODE_VERSION } from "../src/claude/version.ts";
import { median, round } from "./lib.ts";

/** A progress line of runStudy announcing an attempt (Progress.start, not a terminal). */
export const STARTED_LINE = /^study-runner: \[(\d+)\/(\d+)\] .*: started$/;

/** A stderr that keeps the time each line arrived. */
export function timedLines(): { stream: Writable; lines: { at: number; text: string }[] } {
  const lines: { at: number; text: string }[] = [];
  let pending = "";
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      const at = performance.now();
      pending += chunk.toString("utf8");
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        lines.push({ at, text: pending.slice(0, nl) });
        pending = pending.slice(nl + 1);
      }
      done();
    },
  });
  return { stream, lines };
}

/**
 * Per-attempt milliseconds from the times of the "started" lines and the time the run ended:
 * attempt i lasts from its start to attempt i+1's start.
 */
export function attemptDurations(starts: readonly number[], ended: number): number[] {
  return starts.map((t, i) => (starts[i + 1] ?? ended) - t);
}

export interface TimedAttempt {
  ms: number;
  observation: Observation;
  /** Where the attempt's time went, by step (see `splitAttempt`), when the run had a timing file. */
  split?: Record<string, number>;
}

/** Reads the timing marks of a run (src/util/marks.ts); none when the file was not written. */
export async function readMarks(file: string): Promise<TimingMark[]> {
  const text = await readFile(file, "utf8").catch(() => "");
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as TimingMark);
}

/**
 * The milliseconds of one attempt, from `from` to `to` (epoch ms), split at the timing marks
 * between them: each step is named `<mark before> → <mark after>` ("started" is the attempt's
 * start, "next" the end), and a step that occurs several times (the ledger writes) is summed.
 */
export function splitAttempt(marks: readonly TimingMark[], from: number, to: number): Record<string, number> {
  const inside = marks.filter((m) => m.at >= from && m.at < to);
  const points = [{ mark: "started", at: from }, ...inside, { mark: "next", at: to }];
  const split: Record<string, number> = {};
  for (let i = 1; i < points.length; i++) {
    const key = `${points[i - 1]!.mark} → ${points[i]!.mark}`;
    split[key] = (split[key] ?? 0) + points[i]!.at - points[i - 1]!.at;
  }
  return split;
}

/** Per step, the median over attempts (a step an attempt did not have counts 0 for it), 1 decimal, in the order first seen. */
export function medianSplit(splits: readonly Record<string, number>[]): Record<string, number> {
  const keys = [...new Set(splits.flatMap((s) => Object.keys(s)))];
  return Object.fromEntries(keys.map((k) => [k, round(median(splits.map((s) => s[k] ?? 0)), 1)]));
}

/** Runs the study; throws unless it ended awaiting adjudication with every attempt completed. */
export async function runTimedStudy(config: StudyConfig, runtime: ContainerRuntime): Promise<TimedAttempt[]> {
  const progress = timedLines();
  let summary = "";
  const timing = process.env[TIMING_FILE_ENV];
  const marksBefore = timing ? (await readMarks(timing)).length : 0;
  const code = await runStudy(config, { runtime, stdout: (t) => (summary += t), stderr: progress.stream });
  const ended = performance.now();
  const marks = timing ? (await readMarks(timing)).slice(marksBefore) : [];
  const ledger = await readLedger(config.output);
  if (code !== 0) throw new Error(`runStudy exited ${code}: ${ledger.statusReason ?? summary.slice(0, 1000)}`);
  const starts = progress.lines.filter((l) => STARTED_LINE.test(l.text)).map((l) => l.at);
  if (starts.length !== config.plan.length || ledger.observations.length !== config.plan.length) {
    throw new Error(`expected ${config.plan.length} attempts, saw ${starts.length} started and ${ledger.observations.length} in the ledger`);
  }
  const durations = attemptDurations(starts, ended);
  // The progress lines' times on the marks' clock (epoch milliseconds).
  const epoch = (t: number) => performance.timeOrigin + t;
  return ledger.observations.map((observation, i) => {
    // A failed attempt takes another path (and may be cut short): it is no overhead figure.
    if (observation.status !== "completed") throw new Error(`attempt ${i} ended ${observation.status}`);
    const split = timing ? splitAttempt(marks, epoch(starts[i]!), epoch(starts[i + 1] ?? ended)) : undefined;
    return { ms: durations[i]!, observation, ...(split ? { split } : {}) };
  });
}

/** What a benchmark of demo attempts through runStudy needs: the demo's corpus, image and login, its full plan, a ledger folder. */
export interface DemoBench {
  runtime: DockerRuntime;
  setup: DemoSetup;
  /** The image's id, not its tag: a test rebuilding the tag meanwhile cannot swap the image mid-run. */
  image: string;
  loaded: LoadedManifest;
  full: PlannedAttempt[];
  ledgers: string;
}

/** Prepares the demo in `work` and a private ledger folder; the runner's timing marks go to `work/marks.jsonl`. */
export async function prepareDemoBench(work: string): Promise<DemoBench> {
  const runtime = new DockerRuntime();
  const setup = await prepareDemo(join(work, "demo"), runtime);
  const image = (await runtime.inspectImage(setup.image))!.id;
  const loaded = await loadManifest(DEMO_MANIFEST);
  const full = planStudy(loaded.manifest, "full");
  const ledgers = join(work, "ledgers");
  await mkdir(ledgers, { mode: 0o700 });
  process.env[TIMING_FILE_ENV] = join(work, "marks.jsonl");
  return { runtime, setup, image, loaded, full, ledgers };
}

/** The study config of a benchmark run of `plan` (indices already the run order), ledger `name` in the ledger folder. */
export function demoBenchConfig(b: DemoBench, plan: PlannedAttempt[], name: string, ociRuntime?: string, extra: Partial<StudyConfig> = {}): StudyConfig {
  return {
    loaded: b.loaded,
    mode: "full",
    plan,
    fullPlanSize: b.full.length,
    roots: new Map(Object.entries(b.setup.roots)),
    model: "claude-haiku-5-5",
    capUsd: 1,
    attemptBudgetUsd: 0.1,
    output: join(b.ledgers, `${name}.json`),
    image: b.image,
    expectedCliVersion: CLAUDE_CODE_VERSION,
    isolation: "offline",
    docBridgeCommand: referenceEngineCommand(),
    claudeConfigDir: b.setup.loginDir,
    ...(ociRuntime ? { runtime: ociRuntime } : {}),
    ...extra,
  };
}
