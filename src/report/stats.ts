/**
 * Small-sample exploratory intervals for paired differences. With at most 18 pairs (6 tasks x 3
 * repetitions) a Student t interval of the mean difference is simple and says what it assumes
 * (roughly normal differences, independent pairs; repetitions of one task are not independent,
 * so it is narrower than it should be). It is a description, not a test: no correction for the
 * several metrics, and no claim of significance.
 */

export const INTERVAL_LEVEL = 0.95;
export const INTERVAL_METHOD =
  "Student t 95% interval of the mean paired difference (mean ± t(0.975, n-1) · sd/√n); exploratory: small n, repetitions of a task are treated as independent, no correction for multiple metrics; needs n ≥ 2";

/** t quantiles at 0.975 for 1..30 degrees of freedom (standard tables). */
const T975 = [
  12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145, 2.131, 2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069,
  2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/** t(0.975, df): the table up to 30, then the Cornish-Fisher expansion around z = 1.959964. */
export function tQuantile975(df: number): number {
  if (!Number.isInteger(df) || df < 1) throw new RangeError(`degrees of freedom must be a positive integer, got ${df}`);
  if (df <= T975.length) return T975[df - 1]!;
  const z = 1.959964;
  return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2);
}

export interface Summary {
  n: number;
  mean: number | null;
  sd: number | null;
  lower: number | null;
  upper: number | null;
}

export function meanInterval(values: readonly number[]): Summary {
  const n = values.length;
  if (n === 0) return { n, mean: null, sd: null, lower: null, upper: null };
  const mean = values.reduce((s, v) => s + v, 0) / n;
  if (n < 2) return { n, mean, sd: null, lower: null, upper: null };
  const sd = Math.sqrt(values.reduce((s, v) => s + (v - mean) ** 2, 0) / (n - 1));
  const half = (tQuantile975(n - 1) * sd) / Math.sqrt(n);
  return { n, mean, sd, lower: mean - half, upper: mean + half };
}
