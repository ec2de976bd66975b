import { initialBudget, reserve, settle, type BudgetState, type Reservation, type SettlementOutcome } from "../budget/budget.ts";
import { picoToUsd, usdToPico } from "../cost/money.ts";
import type { AttemptStatus } from "../terms/terms.ts";
import { errorMessage, ExitCode, RefusalError } from "../util/errors.ts";

/**
 * The bookkeeper: the one loop every kind of paid run goes through (study attempts over the CLI
 * or the Messages API, adjudication items). It owns the order of money and writes:
 *
 *   [take the unit's lock] → reserve → persist → run one → settle → persist → stop policy
 *
 * and every way out of it. A kind hands it one function that runs one unit and returns one
 * outcome; the kind never reserves, settles or decides whether the run goes on.
 *
 * Money rules (docs/contract.md, "Budget and charging"): a unit starts only when its full limit
 * fits under the cap minus the charges and the open reservations; a completed unit is charged the
 * larger of its valid costs; anything else keeps at least its reservation charged. A kind that
 * reserves per call (the http transport) opens and settles each call through the unit's meter,
 * and the unit is charged what its calls were charged.
 */

/** The record fields the loop maintains: the ledger and the adjudication record both carry them. */
export interface Book<Status extends string = string> {
  status: Status;
  statusReason?: string;
  budget: { reservedUsd: number; spentUsd: number; cumulativeCapExceeded: boolean };
}

/** The money fields of one unit's entry (an observation, an adjudicator run). */
export interface Entry {
  phase: "reserved" | "running" | "settled";
  reservationUsd: number;
  status: AttemptStatus | null;
  chargedUsd: number | null;
}

export interface UnitOutcome {
  status: AttemptStatus;
  reason: string;
  /** The costs the settlement compares with the reservation; null when unknown or invalid. */
  reportedCostUsd: number | null;
  computedCostUsd: number | null;
}

/** Per-call money inside one unit, on the run's one budget. */
export interface Meter {
  reserve(amountUsd: number): { ok: true; reservation: Reservation } | { ok: false; reason: string; remainingUsd: number };
  settle(reservation: Reservation, outcome: SettlementOutcome): { chargedUsd: number; status: AttemptStatus; cumulativeCapExceeded: boolean };
}

export interface UnitContext<E extends Entry> {
  entry: E;
  /** Writes the record now (e.g. before the child may spend). */
  persist(): Promise<void>;
  /** Reservations of a kind that pays per call; settled calls count towards the unit's charge. */
  meter: Meter;
  /** The up-front reservation, or null for a kind that reserves per call. */
  reservation: Reservation | null;
}

/** Named points between writes where a test may stop the process (see docs/reliability.md). */
export type Checkpoint =
  | "before-reserve-write"
  | "after-reserve-write"
  | "before-container-start"
  | "during-attempt"
  | "after-attempt-before-write";

export interface RunKind<U, E extends Entry> {
  /** What a unit is called in stop reasons: "attempt", "item". */
  noun: string;
  /** The unit's 1-based number in stop reasons. */
  number(unit: U): number;
  /** The unit in full when it ended without completing, e.g. "attempt 3 (t1, with-docs, repetition 1)". */
  describe(unit: U): string;
  /** The up-front reservation in USD, or null when the kind reserves per call through the meter. */
  limitUsd: number | null;
  /**
   * Records a unit that needs no paid run (an adjudication item the runner decides) and returns
   * true; false when the unit must run.
   */
  recordWithoutRun?(unit: U): boolean;
  /**
   * Taken before the reservation and held until the unit is settled (the CLI login): a unit that
   * never gets it has reserved nothing. A RefusalError stops the run; anything else is a fault.
   */
  acquire?(unit: U): Promise<{ release(): Promise<void> }>;
  /** Creates the unit's entry holding `reservationUsd` and adds it to the record. */
  open(unit: U, reservationUsd: number): E;
  /** Runs one unit. Outcomes are returned; a RefusalError after the reservation is a failed unit; anything else a fault. */
  runOne(unit: U, ctx: UnitContext<E>): Promise<UnitOutcome>;
  /** After settlement: what the kind concludes from it (an adjudicator's verdict). `stopReason` is set when the run stops here. */
  settled?(unit: U, entry: E, stopReason: string | null, outcome: UnitOutcome): void;
  /** A unit the run did not reach because it stopped. */
  notReached?(unit: U, stopReason: string): void;
}

export interface LoopProgress<U, E> {
  start(unit: U): void;
  end(unit: U, entry: E, spentUsd: number): void;
  /** Ends any live line (a terminal spinner) before the unit's result is printed. */
  stopLive(): void;
}

export interface LoopOptions<U, E extends Entry, S extends string> {
  kind: RunKind<U, E>;
  units: readonly U[];
  book: Book<S>;
  capUsd: number;
  /** The record's status when every unit ran and the run was not stopped. */
  doneStatus: S;
  persist(): Promise<void>;
  progress?: LoopProgress<U, E>;
  checkpoint?: (point: Checkpoint) => void;
  /** Aborted on SIGINT/SIGTERM: no new unit starts; the running unit is the kind's to stop. */
  signal?: AbortSignal;
}

export interface LoopEnd {
  /** ExitCode.ok, ExitCode.blocked, or the signal's code. */
  exitCode: number;
  stopReason: string | null;
}

const BLOCKED = "blocked";

/** Runs every unit in order under the one budget; returns how the run ended. Faults of the runner propagate after the record says so. */
export async function runLoop<U, E extends Entry, S extends string>(o: LoopOptions<U, E, S>): Promise<LoopEnd> {
  const { kind, book } = o;
  const checkpoint = o.checkpoint ?? (() => {});
  let budget: BudgetState = initialBudget(o.capUsd);
  // What the open unit's settled calls were charged: the record counts them as held by the unit
  // (its entry's reservationUsd) until the unit itself is settled.
  let heldBySettledCalls = 0n;
  const sync = () => {
    // spentUsd counts open reservations too, so a crash at any write never under-counts.
    book.budget.reservedUsd = picoToUsd(usdToPico(budget.reservedUsd, "ceil") + heldBySettledCalls);
    book.budget.spentUsd = picoToUsd(usdToPico(budget.spentUsd, "ceil") + usdToPico(budget.reservedUsd, "ceil"));
  };
  const stop = (reason: string) => {
    book.status = BLOCKED as S;
    book.statusReason = reason;
    return reason;
  };
  const interrupted = () => `interrupted by ${String(o.signal?.reason ?? "a signal")}`;
  const name = (unit: U) => `${kind.noun} ${kind.number(unit)}`;

  let stopReason: string | null = null;
  for (const unit of o.units) {
    if (stopReason !== null) {
      kind.notReached?.(unit, stopReason);
      continue;
    }
    if (kind.recordWithoutRun?.(unit)) {
      await o.persist();
      continue;
    }
    if (o.signal?.aborted) {
      stopReason = stop(`${interrupted()} before ${name(unit)}`);
      kind.notReached?.(unit, stopReason);
      continue;
    }
    let held: { release(): Promise<void> } | undefined;
    try {
      held = await kind.acquire?.(unit);
    } catch (err) {
      if (!(err instanceof RefusalError)) throw err;
      stopReason = stop(`${name(unit)} not started, nothing reserved: ${errorMessage(err)}`);
      kind.notReached?.(unit, stopReason);
      continue;
    }
    try {
      let reservation: Reservation | null = null;
      if (kind.limitUsd !== null) {
        const reserved = reserve(budget, kind.limitUsd);
        if (!reserved.ok) {
          stopReason = stop(`${name(unit)} refused: ${reserved.reason}`);
          kind.notReached?.(unit, stopReason);
          continue;
        }
        budget = reserved.state;
        reservation = reserved.reservation;
      }
      const entry = kind.open(unit, reservation?.reservedUsd ?? 0);
      sync();
      checkpoint("before-reserve-write");
      await o.persist(); // before anything is spent
      checkpoint("after-reserve-write");
      o.progress?.start(unit);

      // Calls the kind opens through the meter: each is settled by the kind, or here if left open.
      const calls: Array<{ reservation: Reservation; chargedUsd: number | null }> = [];
      const meter: Meter = {
        reserve(amountUsd) {
          const reserved = reserve(budget, amountUsd);
          if (!reserved.ok) return reserved;
          budget = reserved.state;
          calls.push({ reservation: reserved.reservation, chargedUsd: null });
          sync();
          return { ok: true, reservation: reserved.reservation };
        },
        settle(callReservation, outcome) {
          const call = calls.find((c) => c.reservation === callReservation && c.chargedUsd === null);
          if (!call) throw new Error("settle of a call that is not open");
          const settled = settle(budget, callReservation, outcome);
          budget = settled.state;
          call.chargedUsd = settled.chargedUsd;
          heldBySettledCalls += usdToPico(settled.chargedUsd, "ceil");
          if (settled.cumulativeCapExceeded) book.budget.cumulativeCapExceeded = true;
          sync();
          return settled;
        },
      };

      let outcome: UnitOutcome;
      try {
        outcome = await kind.runOne(unit, { entry, persist: o.persist, meter, reservation });
      } catch (err) {
        if (!(err instanceof RefusalError)) {
          // The runner's own fault (the engine gone, a full disk): the outcome is unknown, so the
          // unit stays unsettled with its reservation counted as spent, and the record says why.
          // If even this write fails, the file holds the previous write: the same open reservation.
          stop(`${name(unit)} stopped by a fault of the runner: ${errorMessage(err)}; the ${kind.noun} was not settled and its reservation stays charged`);
          await o.persist().catch(() => undefined);
          throw err;
        }
        // Refused after its reservation (the login expired, ...): the unit did not complete.
        outcome = { status: "failed", reason: `refused after its reservation: ${errorMessage(err)}`, reportedCostUsd: null, computedCostUsd: null };
      } finally {
        o.progress?.stopLive();
      }

      // Settle: the up-front reservation by the outcome's costs, calls left open at their reservation.
      let status: AttemptStatus = outcome.status;
      let charged = 0n;
      if (reservation) {
        const settled = settle(budget, reservation, outcome);
        budget = settled.state;
        status = settled.status;
        charged += usdToPico(settled.chargedUsd, "ceil");
        if (settled.cumulativeCapExceeded) book.budget.cumulativeCapExceeded = true;
      }
      for (const call of calls) {
        if (call.chargedUsd === null) meter.settle(call.reservation, { status: "failed", reportedCostUsd: null, computedCostUsd: null });
        charged += usdToPico(call.chargedUsd!, "ceil");
      }
      Object.assign(entry, { phase: "settled", status, chargedUsd: picoToUsd(charged) });
      heldBySettledCalls = 0n;
      sync();
      if (status !== "completed") {
        stopReason = stop(`${kind.describe(unit)} ended ${status}: ${outcome.reason}`);
      } else if (book.budget.cumulativeCapExceeded) {
        stopReason = stop(`the cumulative cap of ${o.capUsd} USD was passed after ${name(unit)}`);
      }
      kind.settled?.(unit, entry, stopReason, outcome);
      checkpoint("after-attempt-before-write");
      await o.persist(); // after the outcome is known
      o.progress?.end(unit, entry, book.budget.spentUsd);
    } finally {
      await held?.release();
    }
  }
  // Every way out ends with a write: a run stopped before a unit started (the cap, the login, a
  // signal) says so on disk too, not only in the summary.
  if (book.status !== BLOCKED) book.status = o.doneStatus;
  await o.persist();
  return { exitCode: exitCodeOf(book.status === BLOCKED, o.signal), stopReason };
}

/** 0 when the run finished, the signal's code when a signal stopped it, 1 when it is blocked. */
export function exitCodeOf(blocked: boolean, signal?: AbortSignal): number {
  if (!blocked) return ExitCode.ok;
  if (signal?.aborted) return signal.reason === "SIGTERM" ? ExitCode.sigterm : ExitCode.sigint;
  return ExitCode.blocked;
}
