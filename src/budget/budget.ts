import { maxBigint, picoToUsd, PICO_PER_MICRO, usdToPico } from "../cost/money.ts";
import type { AttemptStatus } from "../terms/terms.ts";

/**
 * Reservation and settlement (contract R21 to R26). Pure: the state
 * goes in, a new state comes out; the caller writes it to the ledger. Amounts are exact
 * integers (pico-USD) inside and USD numbers outside.
 */

export interface BudgetState {
  /** The cumulative cap (STUDY_BUDGET_USD). */
  capUsd: number;
  /** Charged so far by settled attempts. */
  spentUsd: number;
  /** Held by reservations not settled yet. */
  reservedUsd: number;
}

export interface Reservation {
  /** The per-attempt limit rounded down to 6 decimals; also `--max-budget-usd`. */
  reservedUsd: number;
}

export type ReserveResult = { ok: true; reservation: Reservation; state: BudgetState } | { ok: false; reason: string; remainingUsd: number };

export interface SettlementOutcome {
  status: AttemptStatus;
  /** The CLI's `total_cost_usd`, `null` when missing; an invalid value is ignored. */
  reportedCostUsd: number | null;
  /** The list-price cost, `null` when it could not be computed. */
  computedCostUsd: number | null;
}

export interface Settlement {
  chargedUsd: number;
  /** The outcome's status, or `budget-exceeded` for a success charged above its reservation. */
  status: AttemptStatus;
  state: BudgetState;
  /** The cumulative spend passed the cap; the run stops. */
  cumulativeCapExceeded: boolean;
}

/** The state of a run under `capUsd` that has charged `spentUsd` so far (0 for a new run) and holds no reservation. */
export function initialBudget(capUsd: number, spentUsd = 0): BudgetState {
  if (!Number.isFinite(capUsd) || capUsd <= 0) throw new RangeError(`the budget cap must be a positive number of USD, got ${capUsd}`);
  if (!Number.isFinite(spentUsd) || spentUsd < 0) throw new RangeError(`the spend so far must be a non-negative number of USD, got ${spentUsd}`);
  return { capUsd, spentUsd, reservedUsd: 0 };
}

/**
 * Holds the full per-attempt limit, rounded down to 6 decimals (it is passed to the CLI as
 * `--max-budget-usd`), or refuses when it does not fit under cap - spent - open reservations.
 */
export function reserve(state: BudgetState, attemptLimitUsd: number): ReserveResult {
  const s = toPico(state);
  const remaining = s.cap - s.spent - s.reserved;
  const remainingUsd = picoToUsd(remaining > 0n ? remaining : 0n);
  if (!Number.isFinite(attemptLimitUsd) || attemptLimitUsd <= 0) {
    return { ok: false, reason: `the per-attempt limit must be a positive number of USD, got ${attemptLimitUsd}`, remainingUsd };
  }
  const limit = (usdToPico(attemptLimitUsd, "floor") / PICO_PER_MICRO) * PICO_PER_MICRO;
  if (limit === 0n) {
    return { ok: false, reason: `the per-attempt limit ${attemptLimitUsd} USD rounds down to 0 at 6 decimals`, remainingUsd };
  }
  if (limit > remaining) {
    return {
      ok: false,
      reason: `the per-attempt limit ${picoToUsd(limit)} USD does not fit under the remaining budget ${remainingUsd} USD`,
      remainingUsd,
    };
  }
  return {
    ok: true,
    reservation: { reservedUsd: picoToUsd(limit) },
    state: fromPico({ ...s, reserved: s.reserved + limit }),
  };
}

/**
 * Charges a finished attempt and releases its reservation. `completed`: the larger valid cost
 * of reported and computed. Anything else: the larger of the reservation and every valid cost,
 * so a failure is never charged less than a valid reported cost. The CLI checks
 * `--max-budget-usd` only after spend, so a success can cost more than its reservation: that
 * is `budget-exceeded`.
 */
export function settle(state: BudgetState, reservation: Reservation, outcome: SettlementOutcome): Settlement {
  const s = toPico(state);
  const held = reservationPico(reservation);
  if (held > s.reserved) throw new RangeError(`reservation of ${reservation.reservedUsd} USD is not open in this budget state`);

  // Costs are rounded up to 1e-12 USD: the ledger's spend is never below the truth.
  const costs = [outcome.reportedCostUsd, outcome.computedCostUsd].filter((c): c is number => typeof c === "number" && Number.isFinite(c) && c >= 0).map((c) => usdToPico(c, "ceil"));

  let charged: bigint;
  let status = outcome.status;
  if (status === "completed" && costs.length > 0) {
    charged = maxBigint(costs[0]!, ...costs.slice(1));
    if (charged > held) status = "budget-exceeded";
  } else {
    // Includes a `completed` with no valid cost, which cannot be verified: charge the limit.
    charged = maxBigint(held, ...costs);
  }

  const spent = s.spent + charged;
  return {
    chargedUsd: picoToUsd(charged),
    status,
    state: fromPico({ cap: s.cap, spent, reserved: s.reserved - held }),
    cumulativeCapExceeded: spent > s.cap,
  };
}

function reservationPico(reservation: Reservation): bigint {
  const p = usdToPico(reservation.reservedUsd, "floor");
  if (p % PICO_PER_MICRO !== 0n) throw new RangeError(`a reservation has at most 6 decimals, got ${reservation.reservedUsd}`);
  return p;
}

interface PicoState {
  cap: bigint;
  spent: bigint;
  reserved: bigint;
}

function toPico(state: BudgetState): PicoState {
  for (const [name, v] of Object.entries(state)) {
    if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw new RangeError(`budget state ${name} is not a non-negative amount: ${v}`);
  }
  return {
    cap: usdToPico(state.capUsd, "floor"),
    spent: usdToPico(state.spentUsd, "ceil"),
    reserved: usdToPico(state.reservedUsd, "ceil"),
  };
}

function fromPico(s: PicoState): BudgetState {
  return { capUsd: picoToUsd(s.cap), spentUsd: picoToUsd(s.spent), reservedUsd: picoToUsd(s.reserved) };
}
