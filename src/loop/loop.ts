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
 * fits under the cap minus the charges (what the book spent before the loop included) and the
 * open reservations; a completed unit is charged the larger of its valid costs; anything else
 * keeps at least its reservation charged. A kind that reserves per call (the http transport)
 * opens and settles each call through the unit's meter, and the unit is charged what its calls
 * were charged.
 *
 * The steps, in the order they happen: `dispatch` a group (wait for room, take its locks, reserve
 * it whole, write, start each unit); `runUnit` (the kind's `runOne`, then `settleUnit`, the
 * `stopPolicy`, the rate governor's count, the write); the `RateGovernor` halves and restores how
 * many units may run after a rate limit.
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
  /**
   * What the unit may still spend under the run's cap, USD: the cap less every charge and every
   * open reservation but the unit's own (its reservation, its open calls); never below 0. The
   * gateway checks each request against it.
   */
  remainingUsd(): number;
  /** No unit of the run starts after this one: the last of its units (what a provider makes ahead for a next is wasted). */
  last: boolean;
}

/** Named points between writes where a test may stop the process (see docs/reliability.md). */
export const CHECKPOINTS = ["before-reserve-write", "after-reserve-write", "before-container-start", "during-attempt", "after-attempt-before-write"] as const;
export type Checkpoint = (typeof CHECKPOINTS)[number];

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
  /**
   * The run's cumulative cap (the study's, the adjudication's, the session ledger's), not what is
   * left of it: what the book already spent when the loop starts (earlier passes over the same
   * record) counts against it.
   */
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
 * The rate governor: a rate limit halves how many units may run (at least one) and each clean
 * settlement of a unit started after the last halving adds one back, up to the limit asked for.
 */
class RateGovernor<U> {
  /** How many units may run at once now. */
  allowed: number;
  /** Counts the halvings: a unit started before the last one does not raise the limit again. */
  epoch = 0;

  constructor(
    private readonly limit: number,
    private readonly onEvent?: (event: RateEvent<U>) => void,
  ) {
    this.allowed = limit;
  }

  backOff(unit: U, httpStatus: number): void {
    this.allowed = Math.max(1, Math.floor(this.allowed / 2));
    this.epoch++;
    this.onEvent?.({ event: "backoff", unit, httpStatus, concurrency: this.allowed });
  }

  /** After a unit settled: one more may run again if it met no limit and none was met since it started. */
  settled(unit: U, startedEpoch: number, metLimit: boolean): void {
    if (metLimit || startedEpoch !== this.epoch || this.allowed >= this.limit) return;
    this.allowed++;
    this.onEvent?.({ event: "recover", unit, httpStatus: null, concurrency: this.allowed });
  }
}

/** What one running unit holds: the calls it opened through the meter and what it has met. */
interface UnitState {
  reservation: Reservation | null;
  /** Calls the kind opens through the meter: each is settled by the kind, or at the unit's settlement if left open. */
  calls: Array<{ reservation: Reservation; chargedUsd: number | null }>;
  /** What this unit's settled calls were charged, pico-USD. */
  ownSettledCalls: bigint;
  startedEpoch: number;
  metLimit: boolean;
}

type Held = { release(): Promise<void> } | undefined;

/** One group on its way to start: its units, the locks taken for them, their reservations. */
interface GroupStart<U> {
  units: U[];
  held: Held[];
  reservations: Array<Reservation | null>;
}

/**
 * Runs the units in order under the one budget, up to `concurrency` at once; returns how the run
 * ended. Faults of the runner propagate after the record says so and the other running units
 * have been settled.
 */
export async function runLoop<U, E extends Entry, S extends string>(o: LoopOptions<U, E, S>): Promise<LoopEnd> {
  return new Bookkeeper(o).run();
}

/** One run of the loop: the budget it owns, the units in flight, and why it stopped. */
class Bookkeeper<U, E extends Entry, S extends string> {
  private readonly kind: RunKind<U, E>;
  private readonly book: Book<S>;
  private readonly limit: number;
  private readonly persist: () => Promise<void>;
  private readonly checkpoint: (point: Checkpoint) => void;
  private readonly governor: RateGovernor<U>;
  private budget: BudgetState;
  // What the open units' settled calls were charged: the record counts them as held by their
  // unit (its entry's reservationUsd) until the unit itself is settled.
  private heldBySettledCalls = 0n;
  private stopReason: string | null = null;
  private fault: { error: unknown } | undefined;
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly o: LoopOptions<U, E, S>) {
    this.kind = o.kind;
    this.book = o.book;
    this.limit = o.concurrency ?? 1;
    if (!Number.isSafeInteger(this.limit) || this.limit < 1) throw new RangeError(`concurrency must be a whole number of at least 1, got ${this.limit}`);
    this.persist = oneWriter(o.persist);
    this.checkpoint = o.checkpoint ?? (() => {});
    this.governor = new RateGovernor(this.limit, o.onRateEvent);
    // What the record already spent (earlier passes over the same record) counts against the cap;
    // its spend includes any reservation it still held, so that stays charged.
    this.budget = initialBudget(o.capUsd, o.book.budget.spentUsd);
  }

  /** Each group in turn, then the last write. */
  async run(): Promise<LoopEnd> {
    for (const group of groupsOf(this.o.units, this.limit > 1 ? this.o.groupKey : undefined)) {
      // A fault of the runner ends dispatching at once; the units in flight still settle.
      if (this.fault) break;
      await this.dispatch(group);
      // One after another, as before concurrency existed: the unit settles before the next is looked at.
      if (this.limit === 1) await Promise.all(this.running);
    }
    await Promise.all(this.running);
    if (this.fault) throw this.fault.error;
    // Every way out ends with a write: a run stopped before a unit started (the cap, the login, a
    // signal) says so on disk too, not only in the summary.
    if (this.book.status !== BLOCKED) this.book.status = this.o.doneStatus;
    await this.persist();
    return { exitCode: exitCodeOf(this.book.status === BLOCKED, this.o.signal), stopReason: this.stopReason };
  }

  /** The record's money from the budget state, before every write. */
  private sync(): void {
    const { budget, book } = this;
    book.budget.reservedUsd = picoToUsd(usdToPico(budget.reservedUsd, "ceil") + this.heldBySettledCalls);
    // spentUsd counts open reservations too, so a crash at any write never under-counts.
    book.budget.spentUsd = picoToUsd(usdToPico(budget.spentUsd, "ceil") + usdToPico(budget.reservedUsd, "ceil"));
    // With units in flight, a charge above its reservation can take the spend (open reservations
    // included) past the cap while the settled charges alone are still under it: that passes the
    // cap too, and the record says so before it is written (contract R161).
    if (usdToPico(book.budget.spentUsd, "ceil") > usdToPico(this.o.capUsd, "floor")) book.budget.cumulativeCapExceeded = true;
  }

  /** The run stops for `reason`; the first reason wins: with units in flight, later ones settle after the run already stopped. */
  private stop(reason: string): string {
    if (this.stopReason !== null) return this.stopReason;
    this.book.status = BLOCKED as S;
    this.book.statusReason = reason;
    this.stopReason = reason;
    return reason;
  }

  private name(unit: U): string {
    return this.kind.name?.(unit) ?? `${this.kind.noun} ${this.kind.number(unit)}`;
  }

  /** Reserve a group: locks, then every reservation, persisted before any unit starts; nothing is left held when it cannot start. */
  private async dispatch(group: U[]): Promise<void> {
    const toRun = group.filter((unit) => !(this.stopReason === null && this.fault === undefined && this.kind.recordWithoutRun?.(unit)));
    if (toRun.length < group.length) await this.persist();
    await this.waitForRoom(toRun);
    if (this.stopReason === null && toRun.length > 0 && this.o.signal?.aborted) this.stop(`interrupted by ${String(this.o.signal.reason ?? "a signal")} before ${this.name(toRun[0]!)}`);
    if (this.stopReason !== null) return this.notReached(toRun, this.stopReason);
    if (toRun.length === 0) return;
    const start: GroupStart<U> = { units: toRun, held: [], reservations: [] };
    // A unit in flight may stop the run while this group waits for its lock.
    const refused = (await this.acquireGroup(start)) ?? this.stopReason ?? this.reserveGroup(start);
    if (refused !== null) {
      const reason = this.stop(refused);
      await releaseAll(start.held);
      return this.notReached(toRun, reason);
    }
    await this.startGroup(start);
  }

  /**
   * Waits for room: a group starts whole, or alone when it is larger than the limit, and only when
   * its whole limit fits beside the open reservations: a unit that does not fit while others run
   * waits for their settlements (which usually free money), so the run refuses for the cap exactly
   * where a run one at a time would.
   */
  private async waitForRoom(toRun: U[]): Promise<void> {
    const fits = () => this.kind.limitUsd === null || reservesAll(this.budget, this.kind.limitUsd, toRun.length);
    while (toRun.length > 0 && this.running.size > 0 && this.stopReason === null && (this.running.size + toRun.length > this.governor.allowed || !fits())) await Promise.race(this.running);
  }

  private notReached(units: U[], reason: string): void {
    for (const unit of units) this.kind.notReached?.(unit, reason);
  }

  /** Takes each unit's lock (the login) before anything is reserved; the refusal, or null when every unit holds it. */
  private async acquireGroup(start: GroupStart<U>): Promise<string | null> {
    for (const unit of start.units) {
      try {
        start.held.push(await this.kind.acquire?.(unit));
      } catch (err) {
        if (!(err instanceof RefusalError)) {
          await releaseAll(start.held);
          throw err;
        }
        return `${this.name(unit)} not started, nothing reserved: ${errorMessage(err)}`;
      }
    }
    return null;
  }

  /** The whole group is reserved before any of it starts: all of it fits, or none of it runs (the refusal). */
  private reserveGroup(start: GroupStart<U>): string | null {
    const { limitUsd } = this.kind;
    if (limitUsd === null) return null;
    let trial = this.budget;
    for (const unit of start.units) {
      const reserved = reserve(trial, limitUsd);
      if (!reserved.ok) return `${this.name(unit)} refused: ${reserved.reason}`;
      trial = reserved.state;
      start.reservations.push(reserved.reservation);
    }
    this.budget = trial;
    return null;
  }

  /** Opens the group's entries, writes them before anything is spent, then starts every unit. */
  private async startGroup(start: GroupStart<U>): Promise<void> {
    const entries = start.units.map((unit, i) => this.kind.open(unit, start.reservations[i]?.reservedUsd ?? 0));
    this.sync();
    try {
      this.checkpoint("before-reserve-write");
      await this.persist(); // before anything is spent
      this.checkpoint("after-reserve-write");
    } catch (err) {
      await releaseAll(start.held);
      throw err;
    }
    start.units.forEach((unit, i) => {
      this.o.progress?.start(unit);
      this.launch(unit, entries[i]!, start.reservations[i] ?? null, start.held[i]);
    });
  }

  private launch(unit: U, entry: E, reservation: Reservation | null, held: Held): void {
    // Assigned before its first await ends: runUnit always awaits.
    let task: Promise<void> | undefined;
    task = (async () => {
      try {
        await this.runUnit(unit, entry, reservation, held);
      } catch (err) {
        // A write or a release that failed: the runner's fault, like a fault of runOne.
        this.fault ??= { error: err };
        this.stop(`${this.name(unit)} stopped by a fault of the runner: ${errorMessage(err)}`);
      } finally {
        this.running.delete(task!);
      }
    })();
    this.running.add(task);
  }

  /** Run a unit, settle it, apply the stop policy and write; its lock is released whatever happens. */
  private async runUnit(unit: U, entry: E, reservation: Reservation | null, held: Held): Promise<void> {
    const state: UnitState = { reservation, calls: [], ownSettledCalls: 0n, startedEpoch: this.governor.epoch, metLimit: false };
    try {
      const outcome = await this.runKind(unit, entry, state);
      if (outcome === null) return;
      const status = this.settleUnit(entry, state, outcome);
      const stopsHere = this.stopPolicy(unit, status, outcome);
      this.governor.settled(unit, state.startedEpoch, state.metLimit);
      this.kind.settled?.(unit, entry, stopsHere, outcome);
      this.checkpoint("after-attempt-before-write");
      await this.persist(); // after the outcome is known
      this.o.progress?.end(unit, entry, this.book.budget.spentUsd);
    } finally {
      await held?.release();
    }
  }

  /** The kind's runOne: its outcome, a refusal after the reservation as a failed unit, or null after a fault of the runner. */
  private async runKind(unit: U, entry: E, state: UnitState): Promise<UnitOutcome | null> {
    const ctx: UnitContext<E> = {
      entry,
      persist: this.persist,
      meter: this.meterFor(state),
      reservation: state.reservation,
      rateLimited: (httpStatus) => {
        if (state.metLimit) return; // one unit's retries are one signal
        state.metLimit = true;
        this.governor.backOff(unit, httpStatus);
      },
      remainingUsd: () => this.remainingBeside(state),
      last: this.o.units.at(-1) === unit,
    };
    try {
      return await this.kind.runOne(unit, ctx);
    } catch (err) {
      if (err instanceof RefusalError) {
        // Refused after its reservation (the login expired, ...): the unit did not complete.
        return { status: "failed", reason: `refused after its reservation: ${errorMessage(err)}`, reportedCostUsd: null, computedCostUsd: null };
      }
      // The runner's own fault (the engine gone, a full disk): the outcome is unknown, so the
      // unit stays unsettled with its reservation counted as spent, and the record says why.
      // If even this write fails, the file holds the previous write: the same open reservation.
      this.stop(`${this.name(unit)} stopped by a fault of the runner: ${errorMessage(err)}; the ${this.kind.noun} was not settled and its reservation stays charged`);
      this.fault ??= { error: err };
      await this.persist().catch(() => undefined);
      return null;
    } finally {
      this.o.progress?.stopLive();
    }
  }

  /** Per-call money of one unit on the run's budget. */
  private meterFor(state: UnitState): Meter {
    return {
      reserve: (amountUsd) => {
        const reserved = reserve(this.budget, amountUsd);
        if (!reserved.ok) return reserved;
        this.budget = reserved.state;
        state.calls.push({ reservation: reserved.reservation, chargedUsd: null });
        this.sync();
        return { ok: true, reservation: reserved.reservation };
      },
      settle: (callReservation, outcome) => {
        const call = state.calls.find((c) => c.reservation === callReservation && c.chargedUsd === null);
        if (!call) throw new Error("settle of a call that is not open");
        const settled = settle(this.budget, callReservation, outcome);
        this.budget = settled.state;
        call.chargedUsd = settled.chargedUsd;
        const pico = usdToPico(settled.chargedUsd, "ceil");
        this.heldBySettledCalls += pico;
        state.ownSettledCalls += pico;
        if (settled.cumulativeCapExceeded) this.book.budget.cumulativeCapExceeded = true;
        this.sync();
        return settled;
      },
    };
  }

  /**
   * What the unit may still spend under the cap: the cap less every charge and every open
   * reservation but the unit's own (its up-front reservation and its open calls), never below 0.
   */
  private remainingBeside(state: UnitState): number {
    let own = state.reservation ? usdToPico(state.reservation.reservedUsd, "ceil") : 0n;
    for (const call of state.calls) if (call.chargedUsd === null) own += usdToPico(call.reservation.reservedUsd, "ceil");
    const left = usdToPico(this.o.capUsd, "floor") - usdToPico(this.budget.spentUsd, "ceil") - usdToPico(this.budget.reservedUsd, "ceil") + own;
    return picoToUsd(left > 0n ? left : 0n);
  }

  /** Settle: the up-front reservation by the outcome's costs, calls left open at their reservation; the unit's status. */
  private settleUnit(entry: E, state: UnitState, outcome: UnitOutcome): AttemptStatus {
    let status: AttemptStatus = outcome.status;
    let charged = 0n;
    if (state.reservation) {
      const settled = settle(this.budget, state.reservation, outcome);
      this.budget = settled.state;
      status = settled.status;
      charged += usdToPico(settled.chargedUsd, "ceil");
      if (settled.cumulativeCapExceeded) this.book.budget.cumulativeCapExceeded = true;
    }
    const meter = this.meterFor(state);
    for (const call of state.calls) {
      if (call.chargedUsd === null) meter.settle(call.reservation, { status: "failed", reportedCostUsd: null, computedCostUsd: null });
      charged += usdToPico(call.chargedUsd!, "ceil");
    }
    Object.assign(entry, { phase: "settled", status, chargedUsd: picoToUsd(charged) });
    this.heldBySettledCalls -= state.ownSettledCalls;
    this.sync();
    return status;
  }

  /** The stop policy: a unit that did not complete, or a passed cap, stops the run here (the reason), unless it already stopped. */
  private stopPolicy(unit: U, status: AttemptStatus, outcome: UnitOutcome): string | null {
    if (this.stopReason !== null) return null;
    if (status !== "completed") return this.stop(`${this.kind.describe(unit)} ended ${status}: ${outcome.reason}`);
    if (this.book.budget.cumulativeCapExceeded) return this.stop(`the cumulative cap of ${this.o.capUsd} USD was passed after ${this.name(unit)}`);
    return null;
  }
}

function reservesAll(state: BudgetState, limitUsd: number, count: number): boolean {
  for (let i = 0; i < count; i++) {
    const reserved = reserve(state, limitUsd);
    if (!reserved.ok) return false;
    state = reserved.state;
  }
  return true;
}

async function releaseAll(held: Held[]): Promise<void> {
  for (const h of held) await h?.release();
}

/** 0 when the run finished, the signal's code when a signal stopped it, 1 when it is blocked. */
export function exitCodeOf(blocked: boolean, signal?: AbortSignal): number {
  if (!blocked) return ExitCode.ok;
  if (signal?.aborted) return signal.reason === "SIGTERM" ? ExitCode.sigterm : ExitCode.sigint;
  return ExitCode.blocked;
}
