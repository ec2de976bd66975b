import binomialCdf from "@stdlib/stats-base-dists-binomial-cdf";
import tQuantileStdlib from "@stdlib/stats-base-dists-t-quantile";

/**
 * The statistics of the report, with the task as the unit of analysis: the repetitions of one
 * task share the task (its difficulty, its files), so they are averaged within task and arm
 * first and every test and interval works on the task-level paired differences. Distribution
 * functions come from @stdlib (t, normal, binomial); the exact tests enumerate their null
 * distributions here, because they are short and their definitions are what the docs state.
 * docs/report.md states each method and its assumptions; tests/unit/report-stats.test.ts checks
 * every figure against scipy values stored with the command that produced them.
 */

export const INTERVAL_LEVEL = 0.95;
export const POWER = 0.8;
/** Bootstrap resamples; the Monte Carlo error of an endpoint's level is sqrt(0.025·0.975/B) ≈ 0.0016. */
export const BOOTSTRAP_RESAMPLES = 10_000;
export const DEFAULT_BOOTSTRAP_SEED = 20_261_201;
/** Up to this many tasks the sign-flip and Wilcoxon nulls are enumerated exactly (2^n sign patterns). */
export const EXACT_ENUMERATION_MAX = 20;
/** Beyond it, this many seeded random sign patterns (a Monte Carlo p-value, said in the report). */
export const PERMUTATION_SAMPLES = 200_000;
/** Equal statistics in floating point: sums of the same values in another order differ by far less. */
const TIE = 1e-9;

export function tQuantile(p: number, df: number): number {
  if (!(df > 0)) throw new RangeError(`degrees of freedom must be positive, got ${df}`);
  return tQuantileStdlib(p, df);
}

export interface Summary {
  n: number;
  mean: number | null;
  sd: number | null;
  lower: number | null;
  upper: number | null;
}

const mean = (v: readonly number[]) => v.reduce((s, x) => s + x, 0) / v.length;

export function sampleSd(values: readonly number[]): number | null {
  if (values.length < 2) return null;
  const m = mean(values);
  return Math.sqrt(values.reduce((s, v) => s + (v - m) ** 2, 0) / (values.length - 1));
}

/** Student t interval of the mean: mean ± t(0.975, n−1) · sd/√n; none below two values. */
export function meanInterval(values: readonly number[]): Summary {
  const n = values.length;
  if (n === 0) return { n, mean: null, sd: null, lower: null, upper: null };
  const m = mean(values);
  const sd = sampleSd(values);
  if (sd === null) return { n, mean: m, sd: null, lower: null, upper: null };
  const half = (tQuantile(1 - (1 - INTERVAL_LEVEL) / 2, n - 1) * sd) / Math.sqrt(n);
  return { n, mean: m, sd, lower: m - half, upper: m + half };
}

/** mulberry32: a small, well-known 32-bit generator; the same seed gives the same interval everywhere. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Linear interpolation between order statistics (numpy's default, "type 7"). */
export function quantile(sorted: readonly number[], p: number): number {
  const h = (sorted.length - 1) * p;
  const lo = Math.floor(h);
  const hi = Math.min(sorted.length - 1, lo + 1);
  return sorted[lo]! + (h - lo) * (sorted[hi]! - sorted[lo]!);
}

/**
 * Percentile interval of a cluster bootstrap over tasks: each resample draws n tasks with
 * replacement and takes the mean of their task-level differences (a task brings all its
 * repetitions, already averaged). Null below two tasks.
 */
export function clusterBootstrap(taskDiffs: readonly number[], seed: number, resamples = BOOTSTRAP_RESAMPLES): { lower: number; upper: number } | null {
  const n = taskDiffs.length;
  if (n < 2) return null;
  const rand = seededRandom(seed);
  const means = new Float64Array(resamples);
  for (let b = 0; b < resamples; b++) {
    let s = 0;
    for (let i = 0; i < n; i++) s += taskDiffs[Math.floor(rand() * n)]!;
    means[b] = s / n;
  }
  means.sort();
  const sorted = Array.from(means);
  const a = (1 - INTERVAL_LEVEL) / 2;
  return { lower: quantile(sorted, a), upper: quantile(sorted, 1 - a) };
}

/**
 * Two-sided p of a statistic whose null distribution is symmetric under flipping the sign of
 * each value: the share of sign patterns whose |statistic − centre| is at least the observed.
 * Exact (all 2^n patterns) up to EXACT_ENUMERATION_MAX values, seeded Monte Carlo beyond.
 */
function signFlipP(values: readonly number[], stat: (signs: (i: number) => number) => number, centre: number, seed: number): { p: number; exact: boolean } {
  const n = values.length;
  const observed = Math.abs(stat(() => 1) - centre);
  const extreme = (s: number) => Math.abs(s - centre) >= observed - TIE * Math.max(1, observed);
  if (n <= EXACT_ENUMERATION_MAX) {
    let hits = 0;
    const total = 2 ** n;
    for (let mask = 0; mask < total; mask++) if (extreme(stat((i) => ((mask >>> i) & 1 ? -1 : 1)))) hits++;
    return { p: hits / total, exact: true };
  }
  const rand = seededRandom(seed);
  let hits = 0;
  for (let k = 0; k < PERMUTATION_SAMPLES; k++) {
    const signs = values.map(() => (rand() < 0.5 ? -1 : 1));
    if (extreme(stat((i) => signs[i]!))) hits++;
  }
  // The observed pattern counts as one of the draws, so a Monte Carlo p is never 0.
  return { p: (hits + 1) / (PERMUTATION_SAMPLES + 1), exact: false };
}

/** Exact paired permutation test: under no arm effect each task's difference is equally likely ±. */
export function signFlipTest(taskDiffs: readonly number[], seed: number): { p: number; exact: boolean } | null {
  if (taskDiffs.length === 0) return null;
  return signFlipP(taskDiffs, (sign) => taskDiffs.reduce((s, d, i) => s + sign(i) * d, 0) / taskDiffs.length, 0, seed);
}

/** Two-sided exact binomial test of k successes in n at 1/2: min(1, 2·P(X ≤ min(k, n−k))). */
export function binomialTwoSided(k: number, n: number): number {
  if (n === 0) return 1;
  return Math.min(1, 2 * binomialCdf(Math.min(k, n - k), n, 0.5));
}

export interface McNemarResult {
  /** Pairs with both attempts scored. */
  pairs: number;
  /** Repository correct, doc-bridge not. */
  onlyRepository: number;
  /** Doc-bridge correct, repository not. */
  onlyMcp: number;
  bothCorrect: number;
  neitherCorrect: number;
  /** Null without a pair: no statistic without data (contract R195). */
  p: number | null;
}

/** Exact McNemar: the discordant pairs split binomially at 1/2 when the arms do not differ. */
export function mcnemarExact(pairs: ReadonlyArray<{ repositoryCorrect: boolean; mcpCorrect: boolean }>): McNemarResult {
  let onlyRepository = 0;
  let onlyMcp = 0;
  let bothCorrect = 0;
  let neitherCorrect = 0;
  for (const p of pairs) {
    if (p.repositoryCorrect && !p.mcpCorrect) onlyRepository++;
    else if (!p.repositoryCorrect && p.mcpCorrect) onlyMcp++;
    else if (p.repositoryCorrect) bothCorrect++;
    else neitherCorrect++;
  }
  return { pairs: pairs.length, onlyRepository, onlyMcp, bothCorrect, neitherCorrect, p: pairs.length === 0 ? null : binomialTwoSided(onlyMcp, onlyRepository + onlyMcp) };
}

export interface SignTestResult {
  positive: number;
  negative: number;
  zero: number;
  /** Null without a task: no statistic without data (contract R195). */
  p: number | null;
}

/**
 * Exact sign test over task-level differences; zero differences are dropped. A difference within
 * 1e-9 of zero is zero: means of the same scores summed in another order differ by ~1e-16.
 */
export function signTest(diffs: readonly number[]): SignTestResult {
  const positive = diffs.filter((d) => d > TIE).length;
  const negative = diffs.filter((d) => d < -TIE).length;
  return { positive, negative, zero: diffs.length - positive - negative, p: diffs.length === 0 ? null : binomialTwoSided(positive, positive + negative) };
}

/** Average ranks (1-based) of values, ties sharing the mean of their positions. */
export function midranks(values: readonly number[]): number[] {
  const order = values.map((v, i) => [v, i] as const).sort((a, b) => a[0] - b[0]);
  const ranks = new Array<number>(values.length);
  for (let i = 0; i < order.length; ) {
    let j = i;
    while (j + 1 < order.length && Math.abs(order[j + 1]![0] - order[i]![0]) <= TIE) j++;
    for (let k = i; k <= j; k++) ranks[order[k]![1]] = (i + j) / 2 + 1;
    i = j + 1;
  }
  return ranks;
}

export interface WilcoxonResult {
  /** Non-zero differences ranked. */
  n: number;
  zero: number;
  /** Sum of the ranks of the positive differences. */
  wPlus: number;
  p: number | null;
  exact: boolean;
}

/**
 * Wilcoxon signed-rank over task-level differences: zeros dropped (Wilcoxon's rule), ties given
 * midranks (values within 1e-9 are ties), and the p-value from the exact null of W+ given those ranks (each rank's sign ±
 * with probability 1/2), so ties need no normal approximation.
 */
export function wilcoxonSignedRank(diffs: readonly number[], seed: number): WilcoxonResult {
  const nonZero = diffs.filter((d) => Math.abs(d) > TIE);
  const ranks = midranks(nonZero.map(Math.abs));
  const wPlus = ranks.reduce((s, r, i) => s + (nonZero[i]! > 0 ? r : 0), 0);
  if (nonZero.length === 0) return { n: 0, zero: diffs.length, wPlus: 0, p: null, exact: true };
  const centre = ranks.reduce((s, r) => s + r, 0) / 2;
  const signOf = nonZero.map((d) => (d > 0 ? 1 : -1));
  const { p, exact } = signFlipP(ranks, (sign) => ranks.reduce((s, r, i) => s + (sign(i) * signOf[i]! > 0 ? r : 0), 0), centre, seed);
  return { n: nonZero.length, zero: diffs.length - nonZero.length, wPlus, p, exact };
}

/**
 * The smallest mean task-level difference a paired t test at two-sided 5% finds with 80%
 * power, from the observed spread: (t(0.975, n−1) + t(0.80, n−1)) · sd/√n. The usual
 * approximation of the noncentral t; it takes the observed sd as the true one.
 */
export function minimumDetectableEffect(sd: number | null, n: number): number | null {
  if (sd === null || n < 2) return null;
  return ((tQuantile(0.975, n - 1) + tQuantile(POWER, n - 1)) * sd) / Math.sqrt(n);
}

export const MAX_PLANNED_TASKS = 10_000;

/** The fewest tasks (≥ 2) whose MDE at the given sd is at most `effect`; null past MAX_PLANNED_TASKS. */
export function tasksNeeded(effect: number, sd: number): number | null {
  if (!(effect > 0)) throw new RangeError(`the effect must be positive, got ${effect}`);
  if (sd === 0) return 2;
  for (let n = 2; n <= MAX_PLANNED_TASKS; n++) if (minimumDetectableEffect(sd, n)! <= effect) return n;
  return null;
}
