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
 * With `concurrency` above 1 several units run at once (contract R108): each holds its whole
 * reservation while it runs, a group (the two arms of a pair) is reserved in one write and
 * started whole, the first unit that does not complete stops new starts while the others finish
 * and settle, and every write goes through one writer. At 1 it is the loop one unit at a time.
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
  /** Writes the record now (e.g. before the child may spend); writes of all units go through one writer. */
  persist(): Promise<void>;
  /** Reservations of a kind that pays per call; settled calls count towards the unit's charge. */
  meter: Meter;
  /** The up-front reservation, or null for a kind that reserves per call. */
  reservation: Reservation | null;
  /**
   * The unit met a rate limit or an overloaded API (HTTP 429 or 529) while it runs: new starts
   * slow down. The runner never retries for it; the CLI's own retries are its business.
   */
  rateLimited(httpStatus: number): void;
}

/** Named points between writes where a test may stop the process (see docs/reliability.md). */
export type Checkpoint = "before-reserve-write" | "after-reserve-write" | "before-container-start" | "during-attempt" | "after-attempt-before-write";

export interface RunKind<U, E extends Entry> {
  /** What a unit is called in stop reasons: "attempt", "item". */
  noun: string;
  /** The unit's short name in stop reasons when "<noun> <number>" would not tell it apart (an item's arm-guess call). */
  name?(unit: U): string;
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

/** A change of how many units may start, because of a rate limit or after one. */
export interface RateEvent<U> {
  event: "backoff" | "recover";
  /** The unit that met the limit (backoff) or whose clean settlement raised the limit again (recover). */
  unit: U;
  /** The API's status (429 or 529) for a backoff. */
  httpStatus: number | null;
  /** How many units may run at once from now on. */
  concurrency: number;
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
  /** Aborted on SIGINT/SIGTERM: no new unit starts; the running units are the kind's to stop. */
  signal?: AbortSignal;
  /** How many units may run at once (default 1: one after another). */
  concurrency?: number;
  /**
   * With concurrency above 1: consecutive units with the same key are dispatched together (both
   * reserved and started before anything else starts), e.g. the two arms of one task and
   * repetition, so a stop never leaves such a group half-run. A group larger than the
   * concurrency runs when nothing else does.
   */
  groupKey?: (unit: U) => string;
  /** Sees every change of the running limit caused by a rate limit (for the record). */
  onRateEvent?: (event: RateEvent<U>) => void;
}

export interface LoopEnd {
  /** ExitCode.ok, ExitCode.blocked, or the signal's code. */
  exitCode: number;
  stopReason: string | null;
}

const BLOCKED = "blocked";

/**
 * Makes every write go after the previous one has finished: units settling at the same time
 * never interleave two writes of the record, and each write serialises the whole record as it
 * is when that write begins, so every file on disk is one complete, consistent record.
 */
export function oneWriter(persist: () => Promise<void>): () => Promise<void> {
  let tail: Promise<void> = Promise.resolve();
  return () => {
    const next = tail.then(() => persist());
    tail = next.catch(() => undefined);
    return next;
  };
}

function reservesAll(state: BudgetState, limitUsd: number, count: number): boolean {
  for (let i = 0; i < count; i++) {
    const reserved = reserve(state, limitUsd);
    if (!reserved.ok) return false;
    state = reserved.state;
  }
  return true;
}

/** Consecutive units with the same key form one group; without a key every unit is its own. */
function groupsOf<U>(units: readonly U[], key?: (unit: U) => string): U[][] {
  const groups: U[][] = [];
  let last: string | undefined;
  for (const unit of units) {
    const k = key?.(unit);
    if (k !== undefined && k === last && groups.length) groups.at(-1)!.push(unit);
    else groups.push([unit]);
    last = k;
  }
  return groups;
}

/**
 * Runs the units in order under the one budget, up to `concurrency` at once; returns how the run
 * ended. Faults of the runner propagate after the record says so and the other running units
 * have been settled.
 */
export async function runLoop<U, E extends Entry, S extends string>(o: LoopOptions<U, E, S>): Promise<LoopEnd> {
  const { kind, book } = o;
  const checkpoint = o.checkpoint ?? (() => {});
  const limit = o.concurrency ?? 1;
  if (!Number.isSafeInteger(limit) || limit < 1) throw new RangeError(`concurrency must be a whole number of at least 1, got ${limit}`);
  const persist = oneWriter(o.persist);
  let budget: BudgetState = initialBudget(o.capUsd);
  // What the open units' settled calls were charged: the record counts them as held by their
  // unit (its entry's reservationUsd) until the unit itself is settled.
  let heldBySettledCalls = 0n;
  const sync = () => {
    // spentUsd counts open reservations too, so a crash at any write never under-counts.
    book.budget.reservedUsd = picoToUsd(usdToPico(budget.reservedUsd, "ceil") + heldBySettledCalls);
    book.budget.spentUsd = picoToUsd(usdToPico(budget.spentUsd, "ceil") + usdToPico(budget.reservedUsd, "ceil"));
    // With units in flight, a charge above its reservation can take the spend (open reservations
    // included) past the cap while the settled charges alone are still under it: that passes the
    // cap too, and the record says so before it is written (contract R161).
    if (usdToPico(book.budget.spentUsd, "ceil") > usdToPico(o.capUsd, "floor")) book.budget.cumulativeCapExceeded = true;
  };
  let stopReason: string | null = null;
  // The first reason wins: with units in flight, later ones settle after the run already stopped.
  const stop = (reason: string) => {
    if (stopReason !== null) return stopReason;
    book.status = BLOCKED as S;
    book.statusReason = reason;
    stopReason = reason;
    return reason;
  };
  const interrupted = () => `interrupted by ${String(o.signal?.reason ?? "a signal")}`;
  const name = (unit: U) => kind.name?.(unit) ?? `${kind.noun} ${kind.number(unit)}`;

  // Rate limits halve how many units may run (at least one) and each clean settlement of a
  // unit started after the last halving adds one back, up to the limit asked for.
  let allowed = limit;
  let rateEpoch = 0;
  let fault: { error: unknown } | undefined;
  const running = new Set<Promise<void>>();

  const runUnit = async (unit: U, entry: E, reservation: Reservation | null, held: { release(): Promise<void> } | undefined) => {
    const startedEpoch = rateEpoch;
    let metLimit = false;
    // Calls the kind opens through the meter: each is settled by the kind, or here if left open.
    const calls: Array<{ reservation: Reservation; chargedUsd: number | null }> = [];
    let ownSettledCalls = 0n;
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
        const pico = usdToPico(settled.chargedUsd, "ceil");
        heldBySettledCalls += pico;
        ownSettledCalls += pico;
        if (settled.cumulativeCapExceeded) book.budget.cumulativeCapExceeded = true;
        sync();
        return settled;
      },
    };
    const rateLimited = (httpStatus: number) => {
      if (metLimit) return; // one unit's retries are one signal
      metLimit = true;
      allowed = Math.max(1, Math.floor(allowed / 2));
      rateEpoch++;
      o.onRateEvent?.({ event: "backoff", unit, httpStatus, concurrency: allowed });
    };
    try {
      let outcome: UnitOutcome;
      try {
        outcome = await kind.runOne(unit, { entry, persist, meter, reservation, rateLimited });
      } catch (err) {
        if (!(err instanceof RefusalError)) {
          // The runner's own fault (the engine gone, a full disk): the outcome is unknown, so the
          // unit stays unsettled with its reservation counted as spent, and the record says why.
          // If even this write fails, the file holds the previous write: the same open reservation.
          stop(`${name(unit)} stopped by a fault of the runner: ${errorMessage(err)}; the ${kind.noun} was not settled and its reservation stays charged`);
          fault ??= { error: err };
          await persist().catch(() => undefined);
          return;
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
      heldBySettledCalls -= ownSettledCalls;
      sync();
      let stopsHere: string | null = null;
      if (stopReason === null) {
        if (status !== "completed") stopsHere = stop(`${kind.describe(unit)} ended ${status}: ${outcome.reason}`);
        else if (book.budget.cumulativeCapExceeded) stopsHere = stop(`the cumulative cap of ${o.capUsd} USD was passed after ${name(unit)}`);
      }
      if (!metLimit && startedEpoch === rateEpoch && allowed < limit) {
        allowed++;
        o.onRateEvent?.({ event: "recover", unit, httpStatus: null, concurrency: allowed });
      }
      kind.settled?.(unit, entry, stopsHere, outcome);
      checkpoint("after-attempt-before-write");
      await persist(); // after the outcome is known
      o.progress?.end(unit, entry, book.budget.spentUsd);
    } finally {
      await held?.release();
    }
  };

  const launch = (unit: U, entry: E, reservation: Reservation | null, held: { release(): Promise<void> } | undefined) => {
    // Assigned before its first await ends: runUnit always awaits.
    let task: Promise<void> | undefined;
    task = (async () => {
      try {
        await runUnit(unit, entry, reservation, held);
      } catch (err) {
        // A write or a release that failed: the runner's fault, like a fault of runOne.
        fault ??= { error: err };
        stop(`${name(unit)} stopped by a fault of the runner: ${errorMessage(err)}`);
      } finally {
        running.delete(task!);
      }
    })();
    running.add(task);
  };

  const groups = groupsOf(o.units, limit > 1 ? o.groupKey : undefined);
  for (const group of groups) {
    // A fault of the runner ends dispatching at once; the units in flight still settle.
    if (fault) break;
    const toRun = group.filter((unit) => !(stopReason === null && fault === undefined && kind.recordWithoutRun?.(unit)));
    if (toRun.length < group.length) await persist();
    // Wait for room: a group starts whole, or alone when it is larger than the limit, and only when its whole limit fits beside the open reservations: a unit that does not fit
    // while others run waits for their settlements (which usually free money), so the run
    // refuses for the cap exactly where a run one at a time would.
    const fits = () => kind.limitUsd === null || reservesAll(budget, kind.limitUsd, toRun.length);
    while (toRun.length > 0 && running.size > 0 && stopReason === null && (running.size + toRun.length > allowed || !fits())) await Promise.race(running);
    if (stopReason === null && toRun.length > 0 && o.signal?.aborted) stop(`${interrupted()} before ${name(toRun[0]!)}`);
    if (stopReason !== null) {
      for (const unit of toRun) kind.notReached?.(unit, stopReason);
      continue;
    }
    if (toRun.length === 0) continue;

    const held: Array<{ release(): Promise<void> } | undefined> = [];
    const releaseAll = async () => {
      for (const h of held) await h?.release();
    };
    let refused: string | null = null;
    for (const unit of toRun) {
      try {
        held.push(await kind.acquire?.(unit));
      } catch (err) {
        if (!(err instanceof RefusalError)) {
          await releaseAll();
          throw err;
        }
        refused = `${name(unit)} not started, nothing reserved: ${errorMessage(err)}`;
        break;
      }
    }
    if (refused === null && stopReason !== null) refused = stopReason; // a unit in flight stopped the run while this group waited for its lock
    // The whole group is reserved before any of it starts: all of it fits, or none of it runs.
    const reservations: Array<Reservation | null> = [];
    let trial = budget;
    if (refused === null && kind.limitUsd !== null) {
      for (const unit of toRun) {
        const reserved = reserve(trial, kind.limitUsd);
        if (!reserved.ok) {
          refused = `${name(unit)} refused: ${reserved.reason}`;
          break;
        }
        trial = reserved.state;
        reservations.push(reserved.reservation);
      }
    }
    if (refused !== null) {
      const reason = stop(refused);
      await releaseAll();
      for (const unit of toRun) kind.notReached?.(unit, reason);
      continue;
    }
    budget = trial;
    const entries = toRun.map((unit, i) => kind.open(unit, reservations[i]?.reservedUsd ?? 0));
    sync();
    try {
      checkpoint("before-reserve-write");
      await persist(); // before anything is spent
      checkpoint("after-reserve-write");
    } catch (err) {
      await releaseAll();
      throw err;
    }
    toRun.forEach((unit, i) => {
      o.progress?.start(unit);
      launch(unit, entries[i]!, reservations[i] ?? null, held[i]);
    });
    // One after another, as before concurrency existed: the unit settles before the next is looked at.
    if (limit === 1) await Promise.all(running);
  }
  await Promise.all(running);
  if (fault) throw fault.error;
  // Every way out ends with a write: a run stopped before a unit started (the cap, the login, a
  // signal) says so on disk too, not only in the summary.
  if (book.status !== BLOCKED) book.status = o.doneStatus;
  await persist();
  return { exitCode: exitCodeOf(book.status === BLOCKED, o.signal), stopReason };
}

/** 0 when the run finished, the signal's code when a signal stopped it, 1 when it is blocked. */
export function exitCodeOf(blocked: boolean, signal?: AbortSignal): number {
  if (!blocked) return ExitCode.ok;
  if (signal?.aborted) return signal.reason === "SIGTERM" ? ExitCode.sigterm : ExitCode.sigint;
  return ExitCode.blocked;
}
