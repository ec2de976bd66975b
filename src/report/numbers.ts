/** The report's plain number format, shared by every section and format so they agree character for character. */

/**
 * Below this a variance is a zero: the smallest true variance of a figure the ledger keeps to 6
 * decimals (USD) is about 1e-13, while a float residue of equal values is below 1e-30.
 */
const VARIANCE_ZERO = 1e-20;

/** Plain numbers; p-values and rates with four decimals, so that a reader sees the figure tested. */
export function num(n: number | null | undefined, unit?: string): string {
  if (n === null || n === undefined) return "—";
  if (unit === "USD") return n.toFixed(6);
  if (unit === "p" || unit === "rate") return n.toFixed(4);
  // Variances span many magnitudes (USD² ~ 1e-9, ms² ~ 1e5): four significant digits.
  // A float residue of a zero (e.g. 7e-38 from summing equal charges) is a zero: 0 (contract R193).
  if (unit === "variance") return Math.abs(n) < VARIANCE_ZERO ? "0" : String(Number(n.toPrecision(4)));
  if (Number.isInteger(n)) return String(n);
  return n.toFixed(unit === "points" ? 3 : 1);
}
