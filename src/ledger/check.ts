import { readFile } from "node:fs/promises";
import type { z } from "zod";
import { pico, picoToUsd } from "../cost/money.ts";
import { budgetTotalsPico, LedgerSchema } from "./schema.ts";
import { formatIssues } from "../util/zod-errors.ts";
import { UsageError } from "../util/errors.ts";

/**
 * `study-runner ledger check`: what a ledger says about its run, read only. The runner writes
 * the ledger before every spend and after every outcome (architecture: "a crash at any instant
 * leaves a parseable ledger whose spend is never below the truth"); this is the check a person
 * runs after a crash, a kill or a full disk. It never writes, renames or locks the file.
 */

/**
 * finished: the run ended (awaiting-adjudication or blocked).
 * interrupted: status running: the runner is still writing it, or it was killed before its last
 * write (SIGKILL, power loss); any open reservation stays counted as spent (contract R27: no resume).
 * invalid: not JSON, or not the ledger schema with its arithmetic.
 */
export type LedgerState = "finished" | "interrupted" | "invalid";

/** Exit codes of `ledger check`: distinct, so a script can tell an interrupted run from a broken file. */
export const LEDGER_CHECK_EXIT = { finished: 0, invalid: 1, interrupted: 4 } as const satisfies Record<LedgerState, number>;

export interface OpenReservation {
  index: number;
  phase: string;
  reservationUsd: number;
}

export interface LedgerArithmetic {
  /** `budget.spentUsd` as written. */
  spentUsd: number;
  /** `budget.reservedUsd` as written. */
  reservedUsd: number;
  /** Sum of the settled observations' charges. */
  settledChargesUsd: number;
  /** Sum of the unsettled observations' reservations. */
  openReservationsUsd: number;
  /** spentUsd and reservedUsd equal what the observations imply, to the pico-USD (contract R202). */
  holds: boolean;
}

export interface LedgerCheck {
  path: string;
  state: LedgerState;
  /** Parses, matches the schema and its arithmetic. */
  valid: boolean;
  runId: string | null;
  /** The run status as written, when it is one of the schema's. */
  status: string | null;
  statusReason: string | null;
  observations: { total: number; settled: number; open: number } | null;
  arithmetic: LedgerArithmetic | null;
  /** The first unsettled observation, if any. */
  openReservation: OpenReservation | null;
  /** Every unsettled observation: one at a time only the last, with --concurrency up to that many. */
  openReservations: OpenReservation[];
  /** Schema and arithmetic problems; never quote the file's content (it holds answers). */
  problems: string[];
  /** One line for a person. */
  verdict: string;
}

const RUN_STATUSES = new Set(["running", "blocked", "awaiting-adjudication"]);

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);

/**
 * The money as the file states it, from the raw JSON, so that it is reported even when some
 * other field breaks the schema (whose cross-field rules then do not run). Null when the
 * figures themselves are missing or not numbers.
 */
function arithmeticOf(json: Record<string, unknown>): { arithmetic: LedgerArithmetic; open: OpenReservation[]; counts: LedgerCheck["observations"] } | null {
  const budget = json.budget;
  const observations = json.observations;
  if (!isRecord(budget) || !Array.isArray(observations)) return null;
  const spentUsd = num(budget.spentUsd);
  const reservedUsd = num(budget.reservedUsd);
  if (spentUsd === null || reservedUsd === null) return null;
  const rows: Array<{ phase: "settled" | "open"; reservationUsd: number; chargedUsd: number | null }> = [];
  const open: OpenReservation[] = [];
  for (const [i, o] of observations.entries()) {
    if (!isRecord(o)) return null;
    const reservationUsd = num(o.reservationUsd);
    if (reservationUsd === null) return null;
    const settled = o.phase === "settled";
    if (settled && num(o.chargedUsd) === null) return null;
    rows.push({ phase: settled ? "settled" : "open", reservationUsd, chargedUsd: settled ? num(o.chargedUsd) : null });
    if (!settled) open.push({ index: i, phase: typeof o.phase === "string" ? o.phase : "(none)", reservationUsd });
  }
  const totals = budgetTotalsPico(rows.map((r) => ({ phase: r.phase === "settled" ? "settled" : "running", reservationUsd: r.reservationUsd, chargedUsd: r.chargedUsd })));
  const settledChargesUsd = picoToUsd(totals.spent - totals.reserved);
  const holds = pico(spentUsd) === totals.spent && pico(reservedUsd) === totals.reserved;
  const settledCount = rows.filter((r) => r.phase === "settled").length;
  return {
    arithmetic: { spentUsd, reservedUsd, settledChargesUsd, openReservationsUsd: picoToUsd(totals.reserved), holds },
    open,
    counts: { total: rows.length, settled: settledCount, open: rows.length - settledCount },
  };
}

// Every figure is an amount as written or an exact pico-USD sum: printed whole, never rounded.
const usd = (n: number) => `${n} USD`;

/** The bytes of the ledger at `path`; throws UsageError naming the path when the file cannot be read at all. */
export async function assertReadableLedger(path: string): Promise<Buffer> {
  try {
    // readFile opens O_RDONLY: the check can never modify the ledger.
    return await readFile(path);
  } catch (err) {
    throw new UsageError(`cannot read ledger ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}; give the path the run was given with --output`);
  }
}

/** A checker of another private record kind, chosen by the file's `kind` field (a session ledger). */
export type RecordKindCheck = (json: Record<string, unknown>, result: LedgerCheck) => LedgerCheck;

/**
 * The first step of a RecordKindCheck: `json` against the schema of its kind. A mismatch puts the
 * schema's problems in `result` with a verdict naming the kind ("session ledger") and returns null;
 * a match makes the result valid, names the record's id, status and reason, and returns the record.
 */
export function parseRecordKind<T extends { status: string; statusReason?: string | null | undefined }>(
  schema: z.ZodType<T>,
  json: Record<string, unknown>,
  result: LedgerCheck,
  kind: string,
  idOf: (record: T) => string,
): T | null {
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    result.problems.push(...formatIssues(parsed.error.issues));
    result.verdict = `invalid ${kind}: ${result.problems.length} problem${result.problems.length === 1 ? "" : "s"}`;
    return null;
  }
  result.valid = true;
  result.runId = idOf(parsed.data);
  result.status = parsed.data.status;
  result.statusReason = parsed.data.statusReason ?? null;
  return parsed.data;
}

/**
 * Judges the bytes of the ledger read from `path`; never throws: whatever is wrong is a problem in
 * the result. A file whose `kind` names one of `kinds` is judged by that checker instead.
 */
export function checkLedger(path: string, bytes: Buffer, kinds: Readonly<Record<string, RecordKindCheck>> = {}): LedgerCheck {
  const result: LedgerCheck = {
    path,
    state: "invalid",
    valid: false,
    runId: null,
    status: null,
    statusReason: null,
    observations: null,
    arithmetic: null,
    openReservation: null,
    openReservations: [],
    problems: [],
    verdict: "",
  };
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString("utf8"));
  } catch {
    // V8's message quotes part of the input, which may be a private answer.
    result.problems.push(bytes.length === 0 ? "the file is empty" : "the file is not valid JSON (a torn or foreign file; the runner only ever replaces its ledger atomically)");
    result.verdict = `invalid: ${result.problems[0]}`;
    return result;
  }
  if (!isRecord(json)) {
    result.problems.push("the file is JSON but not an object");
    result.verdict = `invalid: ${result.problems[0]}`;
    return result;
  }
  // Another record kind (a session ledger, src/session) has its own checker.
  const other = typeof json.kind === "string" && Object.hasOwn(kinds, json.kind) ? kinds[json.kind] : undefined;
  if (other) return other(json, result);
  if (typeof json.runId === "string") result.runId = json.runId;
  if (typeof json.status === "string" && RUN_STATUSES.has(json.status)) result.status = json.status;
  if (typeof json.statusReason === "string") result.statusReason = json.statusReason;

  const money = arithmeticOf(json);
  if (money) {
    result.arithmetic = money.arithmetic;
    result.openReservation = money.open[0] ?? null;
    result.openReservations = money.open;
    result.observations = money.counts;
  }
  const parsed = LedgerSchema.safeParse(json);
  if (!parsed.success) result.problems.push(...formatIssues(parsed.error.issues));
  const a = result.arithmetic;
  if (a && !a.holds && !result.problems.some((p) => /^budget\.(spentUsd|reservedUsd):/.test(p))) {
    // The schema's own arithmetic rule did not run (another field broke the shape first).
    result.problems.push(
      `budget: spentUsd ${usd(a.spentUsd)} and reservedUsd ${usd(a.reservedUsd)} do not equal settled charges ${usd(a.settledChargesUsd)} plus open reservations ${usd(a.openReservationsUsd)}`,
    );
  }
  if (!money && result.problems.length === 0) result.problems.push("budget or observations cannot be summed");
  result.valid = result.problems.length === 0;

  const spend = a ? `spent ${usd(a.spentUsd)} = settled charges ${usd(a.settledChargesUsd)} + open reservations ${usd(a.openReservationsUsd)}` : "spend unknown";
  const opens = result.openReservations;
  const openText =
    opens.length === 0
      ? null
      : opens.length === 1
        ? `observation ${opens[0]!.index} is unsettled (phase ${opens[0]!.phase}); its reservation of ${usd(opens[0]!.reservationUsd)} is counted as spent`
        : `observations ${opens.map((o) => `${o.index} (phase ${o.phase}, ${usd(o.reservationUsd)})`).join(", ")} are unsettled; their reservations are counted as spent`;
  if (!result.valid) {
    result.state = "invalid";
    result.verdict = `invalid: ${result.problems.length} problem${result.problems.length === 1 ? "" : "s"}${a ? `; ${spend}` : ""}`;
  } else if (result.status === "running") {
    result.state = "interrupted";
    result.verdict =
      `interrupted: status running (the runner is still writing it, or it was stopped before its last write); ` +
      `${openText ?? "no attempt was open"}; ${spend}. Nothing resumes it: start a new run with a new --output`;
  } else {
    result.state = "finished";
    result.verdict = `finished: ${result.status}${result.statusReason ? ` (${result.statusReason})` : ""}; ${openText ? `${openText}; ` : ""}${spend}`;
  }
  return result;
}

/**
 * What `run --output PATH` adds to its "already exists" refusal when PATH is a study ledger a killed runner left open
 * (status `running`): nothing resumes a run (contract R27), so the message names each open attempt
 * by its index, task, scenario and repetition, its phase and its reservation counted as spent, and
 * points to `study-runner ledger check PATH` (contract R160). Null for any other file (a finished
 * ledger, another record kind, not JSON).
 */
export function interruptedLedgerProblem(path: string, bytes: Buffer): string | null {
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString("utf8"));
  } catch {
    return null;
  }
  if (!isRecord(json) || json.kind !== undefined || json.status !== "running") return null;
  const check = checkLedger(path, bytes);
  const observations = Array.isArray(json.observations) ? json.observations : [];
  const word = (v: unknown) => (typeof v === "string" && /^[\w.-]{1,80}$/.test(v) ? v : "?");
  const named = check.openReservations.map((o) => {
    const row = isRecord(observations[o.index]) ? (observations[o.index] as Record<string, unknown>) : {};
    const repetition = num(row.repetition);
    return `attempt ${o.index} (task ${word(row.task)}, scenario ${word(row.scenario)}, repetition ${repetition ?? "?"}) is open (phase ${o.phase}), its reservation of ${usd(o.reservationUsd)} counted as spent`;
  });
  const what = named.length === 0 ? "no attempt was open" : named.join("; ");
  return `It is the ledger of an interrupted study run (status running, left by a runner that was killed or is still running): ${what}. A run is never resumed: see it with \`study-runner ledger check ${path}\``;
}
