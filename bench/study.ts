/**
 * Runs the real orchestrator (`runStudy`) on a plan and times every attempt from its
 * "started" progress line to the next one's (the last: to runStudy's return), so the whole
 * loop body counts: reservation and ledger write, export, login, container, transcript, cost,
 * settlement, ledger write. Preflight (engine ping, reaping, the version probe) is per run.
 */
import { performance } from "node:perf_hooks";
import { Writable } from "node:stream";
import { readLedger } from "../src/ledger/store.ts";
import type { Observation } from "../src/ledger/schema.ts";
import type { ContainerRuntime } from "../src/sandbox/port.ts";
import { runStudy, type StudyConfig } from "../src/study/run.ts";

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
}

/** Runs the study; throws unless it ended awaiting adjudication with every attempt completed. */
export async function runTimedStudy(config: StudyConfig, runtime: ContainerRuntime): Promise<TimedAttempt[]> {
  const progress = timedLines();
  let summary = "";
  const code = await runStudy(config, { runtime, stdout: (t) => (summary += t), stderr: progress.stream });
  const ended = performance.now();
  const ledger = await readLedger(config.output);
  if (code !== 0) throw new Error(`runStudy exited ${code}: ${ledger.statusReason ?? summary.slice(0, 1000)}`);
  const starts = progress.lines.filter((l) => STARTED_LINE.test(l.text)).map((l) => l.at);
  if (starts.length !== config.plan.length || ledger.observations.length !== config.plan.length) {
    throw new Error(`expected ${config.plan.length} attempts, saw ${starts.length} started and ${ledger.observations.length} in the ledger`);
  }
  const durations = attemptDurations(starts, ended);
  return ledger.observations.map((observation, i) => {
    // A failed attempt takes another path (and may be cut short): it is no overhead figure.
    if (observation.status !== "completed") throw new Error(`attempt ${i} ended ${observation.status}`);
    return { ms: durations[i]!, observation };
  });
}
