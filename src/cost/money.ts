import { z } from "zod";

/**
 * Money as integer pico-USD (1e-12 USD). A list-price cost is tokens times a price of at most
 * six decimals per million tokens, so it is an exact integer in this unit; the CLI's
 * `total_cost_usd` (e.g. 4.6e-06, 0.000602) converts exactly as well. Exposed amounts stay
 * plain USD numbers, and every one a record holds is an exact pico-USD amount (contract R201):
 * records compare and sum them in pico-USD, never as floats within a tolerance (contract R202).
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

/**
 * The pico-USD of an amount a record holds. The schemas accept only exact amounts (`usdAmount`),
 * for which this is exact; an amount with digits past 1e-12 USD is rounded up, so a sum of
 * unchecked figures is never below them. A negative amount (which a schema has refused already,
 * while its cross-field checks still run) keeps its sign.
 */
export function pico(usd: number): bigint {
  return usd < 0 ? -usdToPico(-usd, "floor") : usdToPico(usd, "ceil");
}

/** A sum of USD amounts in exact pico-USD (each rounded up), so 0.0019 + 0.0023 is 0.0042 and not one ulp off. */
export function sumPico(amounts: readonly number[]): bigint {
  return amounts.reduce((sum, a) => sum + pico(a), 0n);
}

/** `sumPico` as USD. */
export function sumUsd(amounts: readonly number[]): number {
  return picoToUsd(sumPico(amounts));
}

/**
 * Whether `usd` is an exact pico-USD amount: finite, non-negative, its decimal form has at most
 * 12 fractional digits, and it is the number that pico-USD amount reads back as
 * (0.30000000000000004, the float sum of 0.1 and 0.2, is not).
 */
export function isExactUsd(usd: number): boolean {
  if (!Number.isFinite(usd) || usd < 0) return false;
  const p = usdToPico(usd, "floor");
  return p === usdToPico(usd, "ceil") && picoToUsd(p) === usd;
}

const EXACT_USD_MESSAGE = (usd: number) => `is ${usd}, not an exact amount of USD: money is recorded in whole pico-USD (at most 12 decimals, e.g. 0.3), never a float sum's residue`;

/**
 * A USD amount a record holds (contract R201): finite, non-negative and an exact pico-USD amount.
 * The issue names the field (its path) and says what is wrong with the number.
 */
export const usdAmount = z
  .number()
  .finite()
  .nonnegative()
  .superRefine((usd, ctx) => {
    // A negative or non-finite number already has its own issue.
    if (Number.isFinite(usd) && usd >= 0 && !isExactUsd(usd)) ctx.addIssue({ code: "custom", message: EXACT_USD_MESSAGE(usd) });
  });

/** A cap or limit: a positive `usdAmount`. */
export const positiveUsdAmount = usdAmount.positive();

/**
 * A non-negative pico-USD amount as USD rounded to `decimals` places, half up: a report sums in
 * pico-USD and rounds the exact sum once (contract R203), never a float sum or a sum of rounded parts.
 */
export function roundedUsd(amount: bigint, decimals: number): number {
  const unit = 10n ** BigInt(12 - decimals);
  return picoToUsd(((amount + unit / 2n) / unit) * unit);
}

export function maxBigint(first: bigint, ...rest: bigint[]): bigint {
  return rest.reduce((a, b) => (b > a ? b : a), first);
}
