/**
 * Money as integer pico-USD (1e-12 USD). A list-price cost is tokens times a price of at most
 * six decimals per million tokens, so it is an exact integer in this unit; the CLI's
 * `total_cost_usd` (e.g. 4.6e-06, 0.000602) converts exactly as well. Exposed amounts stay
 * plain USD numbers.
 */

export const PICO_PER_MICRO = 10n ** 6n;

const DECIMAL_RE = /^(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$/;

/**
 * A non-negative finite USD amount in pico-USD, read from its shortest decimal form (what
 * `String(x)` prints, i.e. what was written), so 0.29 is 290000000000 and not one below.
 * Digits beyond 1e-12 USD are rounded in the given direction.
 */
export function usdToPico(usd: number, rounding: "floor" | "ceil" | "nearest"): bigint {
  if (!Number.isFinite(usd) || usd < 0) throw new RangeError(`not a non-negative finite USD amount: ${usd}`);
  const m = DECIMAL_RE.exec(String(usd));
  if (!m) throw new RangeError(`cannot read ${usd} as a decimal`);
  const [, whole, frac = "", exp = "0"] = m;
  const digits = BigInt(whole! + frac);
  const shift = Number(exp) - frac.length + 12;
  if (shift >= 0) return digits * 10n ** BigInt(shift);
  const div = 10n ** BigInt(-shift);
  const q = digits / div;
  const rest = digits - q * div;
  if (rest === 0n || rounding === "floor") return q;
  return rounding === "ceil" || 2n * rest >= div ? q + 1n : q;
}

/** The nearest double to `pico` × 1e-12 (exact integer divided once, so correctly rounded). */
export function picoToUsd(pico: bigint): number {
  return Number(pico) / 1e12;
}

/** A sum of USD amounts in exact pico-USD (each rounded up), so 0.0019 + 0.0023 is 0.0042 and not one ulp off. */
export function sumUsd(amounts: readonly number[]): number {
  return picoToUsd(amounts.reduce((sum, a) => sum + usdToPico(a, "ceil"), 0n));
}

export function maxBigint(first: bigint, ...rest: bigint[]): bigint {
  return rest.reduce((a, b) => (b > a ? b : a), first);
}
