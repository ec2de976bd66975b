/**
 * Timing marks for the benchmarks (docs/performance.md, "attempt"): when the environment variable
 * STUDY_RUNNER_TIMING_FILE names a file, each mark appends one JSON line `{"mark","at"}` to it
 * (`at`: milliseconds since the epoch, sub-millisecond, comparable across processes), and the bench
 * splits each attempt's time at them. Otherwise a mark is one environment read and nothing else:
 * never printed, never in a ledger.
 */
import { appendFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

export const TIMING_FILE_ENV = "STUDY_RUNNER_TIMING_FILE";

export interface TimingMark {
  mark: string;
  at: number;
}

/** Appends `name` with the time now to the timing file, when there is one. */
export function mark(name: string): void {
  const file = process.env[TIMING_FILE_ENV];
  if (!file) return;
  const line: TimingMark = { mark: name, at: performance.timeOrigin + performance.now() };
  appendFileSync(file, `${JSON.stringify(line)}\n`);
}
