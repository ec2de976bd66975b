/**
 * Shared helpers of the bench/ scripts: each script measures with `measure` (warm-up runs
 * discarded, then several timed runs), reports medians, and prints exactly one JSON line on
 * stdout through `emit` (progress goes to stderr), which bench/run.mjs collects.
 */
import { performance } from "node:perf_hooks";

/** The middle value (the mean of the two middle values for an even count). */
export function median(samples: readonly number[]): number {
  if (samples.length === 0) throw new Error("median of no samples");
  if (samples.some((s) => !Number.isFinite(s))) throw new Error("median of a non-finite sample");
  const sorted = [...samples].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export interface Stats {
  median: number;
  min: number;
  max: number;
  runs: number;
}

/** Median, min and max of timed samples, rounded to `digits` decimals. */
export function stats(samples: readonly number[], digits = 1): Stats {
  return {
    median: round(median(samples), digits),
    min: round(Math.min(...samples), digits),
    max: round(Math.max(...samples), digits),
    runs: samples.length,
  };
}

export function round(n: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

/** `a / b`, two decimals; the unit of both must be the same. */
export function ratio(a: number, b: number): number {
  if (!(b > 0)) throw new Error(`ratio against a floor of ${b}`);
  return round(a / b, 2);
}

export interface MeasureOptions {
  /** Runs whose times are discarded (caches, JIT, image layers). */
  warmup: number;
  runs: number;
  /** Untimed work after each run (e.g. removing what the run made). */
  after?: () => Promise<unknown> | unknown;
  /** Milliseconds clock; default performance.now (a test passes its own). */
  clock?: () => number;
}

/**
 * Times `fn` `warmup + runs` times, sequentially, and returns the milliseconds of the timed
 * runs only. `after` runs untimed after every run, warm-ups included.
 */
export async function measure(fn: (run: number) => Promise<unknown> | unknown, opts: MeasureOptions): Promise<number[]> {
  const clock = opts.clock ?? (() => performance.now());
  const samples: number[] = [];
  for (let i = 0; i < opts.warmup + opts.runs; i++) {
    const t0 = clock();
    await fn(i);
    const ms = clock() - t0;
    await opts.after?.();
    if (i >= opts.warmup) samples.push(ms);
  }
  return samples;
}

/** The one JSON line a bench script prints. */
export function emit(result: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

/** Progress for humans, on stderr (stdout carries only the JSON line). */
export function note(text: string): void {
  process.stderr.write(`bench: ${text}\n`);
}

/**
 * Runs a bench script's main: prints its JSON line, or `{ bench, error }` and exit code 1
 * when a figure could not be measured.
 */
export function runMain(name: string, main: () => Promise<Record<string, unknown>>): void {
  main().then(
    (result) => {
      emit({ bench: name, ...result });
      process.exitCode = 0;
    },
    (err: unknown) => {
      emit({ bench: name, error: err instanceof Error ? err.message : String(err) });
      process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
