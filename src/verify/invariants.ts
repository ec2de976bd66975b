import type { AdjudicationRecord } from "../adjudicate/schema.ts";
import type { Ledger, RunFacts } from "../ledger/schema.ts";
import { withinFactorOfTwo } from "../cost/compute.ts";
import { maxBigint, pico, picoToUsd, sumPico } from "../cost/money.ts";
import type { SessionCall, SessionLedger } from "../session/schema.ts";

/**
 * The invariants of the runner's private records, one declarative list per record kind, each
 * with its rule number in docs/contract.md and a one-line statement. The schemas (src/ledger,
 * src/adjudicate, src/session) hold the shape and the rules the runner refuses to write against;
 * this list holds what the fields imply of each other. `ledger check` applies it to the file
 * alone, `ledger verify` applies it and then re-derives what the kept evidence allows
 * (src/verify/verify.ts). A problem names the entry and the field, never a private value.
 */

export interface Invariant<T> {
  /** The rule in docs/contract.md this invariant states. */
  rule: `R${number}`;
  /** A stable short name. */
  id: string;
  /** What holds, in one line (docs/contract.md repeats it under the rule). */
  statement: string;
  /** The problems found: each names the entry and the field. */
  check(subject: T): string[];
}

// Amounts are compared and summed in pico-USD, exactly (contract R202), and printed whole.
const usd = (n: number | bigint) => `${typeof n === "bigint" ? picoToUsd(n) : n} USD`;
const above = (a: number, b: number) => pico(a) > pico(b);

/** The money and transcript facts of one paid run, as an observation, an adjudicator run and a session call record them. */
interface PaidRun {
  where: string;
  phase: RunFacts["phase"];
  status: string | null;
  reservationUsd: number;
  chargedUsd: number | null;
  /** The costs the settlement compared (a session call's own share of the cumulative cost). */
  reportedCostUsd: number | null;
  computedCostUsd: number | null;
  /** The factor-of-two rule applies (the CLI's reported cost and the computed cost of the same usage). */
  crossChecked: boolean;
  /** A completed run is charged exactly its larger cost (the CLI's runs; an http attempt is charged its calls, contract R30). */
  exactCharge: boolean;
  toolCalls: number;
  toolCallsByName: Record<string, number>;
  toolErrorsByName?: Record<string, number>;
  usageComplete: boolean;
  tokens: Array<number | null>;
  gateway?: Ledger["observations"][number]["gateway"];
  /** A session call's own metered spend. */
  meteredCostUsd?: number | null;
}

function runOf(where: string, r: RunFacts & { gateway?: PaidRun["gateway"]; toolErrorsByName?: Record<string, number> }): PaidRun {
  return {
    where,
    phase: r.phase,
    status: r.status,
    reservationUsd: r.reservationUsd,
    chargedUsd: r.chargedUsd,
    reportedCostUsd: r.cliReportedCostUsd,
    computedCostUsd: r.computedCostUsd,
    crossChecked: true,
    exactCharge: true,
    toolCalls: r.toolCalls,
    toolCallsByName: r.toolCallsByName,
    toolErrorsByName: r.toolErrorsByName,
    usageComplete: r.usageComplete,
    tokens: [r.inputTokens, r.outputTokens, r.cacheCreationInputTokens, r.cacheReadInputTokens],
    gateway: r.gateway,
  };
}

function callOf(where: string, c: SessionCall): PaidRun {
  return {
    ...runOf(where, { ...c, gateway: c.gateway ?? undefined }),
    reportedCostUsd: c.callCostUsd,
    computedCostUsd: c.callComputedCostUsd,
    // The call's share of the cumulative figures is not what the CLI reported: no ratio is taken.
    crossChecked: false,
    meteredCostUsd: c.meteredCostUsd ?? null,
  };
}

/** R147: the charge follows the status. */
function chargeProblems(r: PaidRun): string[] {
  if (r.phase !== "settled" || r.chargedUsd === null || r.status === null) return [];
  const costs = [r.reportedCostUsd, r.computedCostUsd].filter((c): c is number => c !== null).map(pico);
  const charged = pico(r.chargedUsd);
  const reservation = pico(r.reservationUsd);
  const out: string[] = [];
  if (r.status === "completed") {
    const expected = costs.length ? maxBigint(costs[0]!, ...costs.slice(1)) : reservation;
    if (r.exactCharge && charged !== expected) {
      out.push(`${r.where}.chargedUsd: is ${usd(r.chargedUsd)}, but a completed run is charged the larger of its reported and computed cost, ${usd(expected)}`);
    }
    if (charged > reservation) {
      out.push(`${r.where}.status: is completed with a charge of ${usd(r.chargedUsd)} above its reservation of ${usd(r.reservationUsd)}; that is budget-exceeded`);
    }
    const [reported, computed] = [r.reportedCostUsd, r.computedCostUsd];
    if (r.crossChecked && reported !== null && computed !== null && !withinFactorOfTwo(reported, computed)) {
      out.push(`${r.where}.cliReportedCostUsd: ${usd(reported)} is not within a factor of two of computedCostUsd ${usd(computed)}; such a run is invalid-cost, not completed`);
    }
  } else {
    const ceiling = maxBigint(reservation, ...costs);
    if (charged > ceiling) {
      out.push(`${r.where}.chargedUsd: is ${usd(r.chargedUsd)}, above the larger of its reservation and every cost, ${usd(ceiling)}`);
    }
  }
  return out;
}

/** R148: the counts sum. */
function countProblems(r: PaidRun): string[] {
  const out: string[] = [];
  const byName = Object.values(r.toolCallsByName).reduce((n, v) => n + v, 0);
  if (byName !== r.toolCalls) out.push(`${r.where}.toolCalls: is ${r.toolCalls}, but toolCallsByName sums to ${byName}`);
  for (const [name, errors] of Object.entries(r.toolErrorsByName ?? {})) {
    if (errors > (r.toolCallsByName[name] ?? 0)) out.push(`${r.where}.toolErrorsByName: ${errors} errors of a tool called ${r.toolCallsByName[name] ?? 0} times`);
  }
  if (r.usageComplete && r.tokens.some((t) => t === null)) out.push(`${r.where}.usageComplete: is true, but a token count is unknown (null)`);
  const g = r.gateway;
  if (g) {
    const refused = g.requests.filter((q) => q.refused !== null).length;
    const sent = g.requests.length - refused;
    if (g.dropped === 0 && g.refused !== refused) out.push(`${r.where}.gateway.refused: is ${g.refused}, but ${refused} recorded requests were refused`);
    if (sent > g.forwarded) out.push(`${r.where}.gateway.forwarded: is ${g.forwarded}, but ${sent} recorded requests were not refused`);
  }
  return out;
}

/** R151: metered spend agrees with the record and the charge. */
function meteredProblems(r: PaidRun): string[] {
  const out: string[] = [];
  const g = r.gateway;
  if (g) {
    const sum = sumPico(g.requests.map((q) => q.costUsd ?? 0));
    if (g.dropped === 0 && sum !== pico(g.meteredCostUsd)) {
      out.push(`${r.where}.gateway.meteredCostUsd: is ${usd(g.meteredCostUsd)}, but its requests cost ${usd(sum)}`);
    }
    if (g.forwarded === 0 && g.meteredCostUsd > 0) out.push(`${r.where}.gateway.meteredCostUsd: is ${usd(g.meteredCostUsd)}, but no request was forwarded`);
  }
  const metered = g?.meteredCostUsd ?? r.meteredCostUsd ?? null;
  if (r.phase === "settled" && r.chargedUsd !== null && metered !== null && above(metered, r.chargedUsd)) {
    out.push(`${r.where}.chargedUsd: ${usd(r.chargedUsd)} is below what the gateway metered, ${usd(metered)}; spend is never under-counted`);
  }
  return out;
}

/** R150: the cap flag says whether spend passed the cap, and a run that passed it did not end as if it had not. */
function capProblems(where: string, spentUsd: number, capUsd: number, flag: boolean, status: string, okStatuses: readonly string[]): string[] {
  const out: string[] = [];
  if (above(spentUsd, capUsd) && !flag) out.push(`${where}.cumulativeCapExceeded: is false although spentUsd ${usd(spentUsd)} passed the cap ${usd(capUsd)}`);
  if (flag && !okStatuses.includes(status)) out.push(`${where}.cumulativeCapExceeded: is true, but the status is ${status}; passing the cap stops the run (${okStatuses.join(" or ")})`);
  return out;
}

const studyRuns = (l: Ledger) => l.observations.map((o) => ({ ...runOf(`observations[${o.index}]`, o), exactCharge: o.transport === "cli", crossChecked: o.transport === "cli" }));
/** Every paid run of a record: each item's verdict call, then its arm-guess call (contract R143). */
const recordRuns = (r: AdjudicationRecord) =>
  r.items.flatMap((it) => [...(it.run ? [runOf(`items[${it.position}].run`, it.run)] : []), ...(it.armGuess?.run ? [runOf(`items[${it.position}].armGuess.run`, it.armGuess.run)] : [])]);
const sessionCalls = (l: SessionLedger) => l.sessions.flatMap((s, i) => s.calls.map((c, j) => callOf(`sessions[${i}].calls[${j}]`, c)));

/** The rules every kind of paid run obeys, applied to a record's runs. */
function runInvariants<T>(runs: (subject: T) => PaidRun[]): Invariant<T>[] {
  return [
    {
      rule: "R147",
      id: "charge-by-status",
      statement:
        "a completed run is charged exactly the larger of its reported and computed cost and never above its reservation (an attempt's or adjudicator run's two costs within a factor of two); any other run at most the larger of its reservation and every cost",
      check: (s) => runs(s).flatMap(chargeProblems),
    },
    {
      rule: "R148",
      id: "counts-sum",
      statement: "toolCalls is the sum of toolCallsByName, no tool has more errors than calls, complete usage has every token count, and the gateway's counts match its requests",
      check: (s) => runs(s).flatMap(countProblems),
    },
    {
      rule: "R151",
      id: "metered-spend",
      statement: "the gateway's meteredCostUsd is the sum of its requests' costs, zero when nothing was forwarded, and never above the run's charge",
      check: (s) => runs(s).flatMap(meteredProblems),
    },
  ];
}

/** R149: the budget's open reservations and spend are what the entries hold. */
function budgetProblems(budget: { reservedUsd: number; spentUsd: number }, entries: readonly PaidRun[]): string[] {
  const open = sumPico(entries.filter((e) => e.phase !== "settled").map((e) => e.reservationUsd));
  const charged = sumPico(entries.filter((e) => e.phase === "settled").map((e) => e.chargedUsd ?? 0));
  const out: string[] = [];
  if (open !== pico(budget.reservedUsd)) out.push(`budget.reservedUsd: is ${usd(budget.reservedUsd)}, but the open entries reserve ${usd(open)}`);
  if (open + charged !== pico(budget.spentUsd)) out.push(`budget.spentUsd: is ${usd(budget.spentUsd)}, but the settled charges and open reservations sum to ${usd(open + charged)}`);
  return out;
}

/** The part of a record the budget invariants read: its budget and its status. */
interface Budgeted {
  budget: { reservedUsd: number; spentUsd: number; cumulativeCapExceeded: boolean };
  status: string;
}

/** R149 for a record whose budget holds its runs' money: `runs` are what its open reservations are called in the statement. */
function openReservationsInvariant<T extends Budgeted>(runs: string, runsOf: (subject: T) => PaidRun[]): Invariant<T> {
  return {
    rule: "R149",
    id: "open-reservations",
    statement: `reservedUsd is the sum of ${runs} reservations, and spentUsd the settled charges plus those reservations`,
    check: (subject) => budgetProblems(subject.budget, runsOf(subject)),
  };
}

/** R150 for any record kind: `what` names the record in the statement ("a run", "an adjudication", "a ledger"). */
function capFlagInvariant<T extends Budgeted>(what: string, capOf: (subject: T) => number): Invariant<T> {
  return {
    rule: "R150",
    id: "cap-flag",
    statement: `cumulativeCapExceeded is true whenever spentUsd passed capUsd, and ${what} that passed the cap is blocked (or still running)`,
    check: (subject) => capProblems("budget", subject.budget.spentUsd, capOf(subject), subject.budget.cumulativeCapExceeded, subject.status, ["blocked", "running"]),
  };
}

export const STUDY_LEDGER_INVARIANTS: readonly Invariant<Ledger>[] = [
  ...runInvariants(studyRuns),
  openReservationsInvariant("the unsettled observations'", studyRuns),
  capFlagInvariant("a run", (l) => l.budget.capUsd),
  {
    rule: "R153",
    id: "status-follows-observations",
    statement: "a pilot has at most the two planned attempts and awaits adjudication only with both; the observations are the plan's and agree with the run's header",
    check: (l) => {
      const out: string[] = [];
      if (l.mode === "pilot" && l.observations.length > 2) out.push(`observations: a pilot plans 2 attempts, the ledger holds ${l.observations.length}`);
      if (l.mode === "pilot" && l.status === "awaiting-adjudication" && l.observations.length !== 2)
        out.push(`status: a pilot awaits adjudication only with both of its 2 attempts; it holds ${l.observations.length}`);
      const pins = new Map(l.corpus.map((c) => [c.repository, c.pin]));
      for (const o of l.observations) {
        if (pins.has(o.repository) && pins.get(o.repository) !== o.pin) out.push(`observations[${o.index}].pin: differs from the corpus pin of ${o.repository}`);
        if (!pins.has(o.repository)) out.push(`observations[${o.index}].repository: '${o.repository}' is not in the ledger's corpus`);
        if (o.transport === "cli" && o.attemptBudgetUsd !== l.budget.attemptBudgetUsd) out.push(`observations[${o.index}].attemptBudgetUsd: differs from budget.attemptBudgetUsd`);
      }
      return out;
    },
  },
];

export const ADJUDICATION_RECORD_INVARIANTS: readonly Invariant<AdjudicationRecord>[] = [
  ...runInvariants(recordRuns),
  openReservationsInvariant("the open adjudicator runs'", recordRuns),
  capFlagInvariant("an adjudication", (r) => r.budget.capUsd),
];

/** R152: what the events say each session did is what its calls and questions say. */
function sessionEventProblems(l: SessionLedger): string[] {
  const out: string[] = [];
  l.sessions.forEach((s, i) => {
    const where = `sessions[${i}]`;
    const events = l.events.filter((e) => e.session === s.id);
    const count = (type: string) => events.filter((e) => e.type === type).length;
    const starts = s.calls.filter((c) => c.mode === "start").length;
    const resumes = s.calls.length - starts;
    s.calls.forEach((c, j) => {
      if (c.index !== j) out.push(`${where}.calls[${j}].index: is ${c.index}, expected ${j}`);
      if (c.mode !== (j === 0 ? "start" : "resume")) out.push(`${where}.calls[${j}].mode: is ${c.mode}; a session's first call starts it and every later one resumes it`);
    });
    if (count("harness.start") !== starts) out.push(`${where}: ${count("harness.start")} harness.start events for ${starts} starting call(s)`);
    if (count("harness.resume") !== resumes) out.push(`${where}: ${count("harness.resume")} harness.resume events for ${resumes} resuming call(s)`);
    const settled = s.calls.filter((c) => c.phase === "settled");
    const results = events.filter((e) => e.type === "harness.result");
    if (results.length !== settled.length) out.push(`${where}: ${results.length} harness.result events for ${settled.length} settled call(s); every settled call writes one`);
    results.forEach((e, k) => {
      const c = settled[k];
      if (!c) return;
      if (e.call_cost_usd !== c.callCostUsd) out.push(`${where}.calls[${c.index}]: its harness.result gives call_cost_usd ${e.call_cost_usd}, the call records ${c.callCostUsd}`);
      const expected = c.status === "completed" ? (c.resultStatus ?? c.status) : c.status;
      if (e.status !== expected) out.push(`${where}.calls[${c.index}]: its harness.result gives status ${e.status}, the call records ${expected}`);
    });
    s.questions.forEach((q, k) => {
      if (q.cycle !== k + 1) out.push(`${where}.questions[${k}].cycle: is ${q.cycle}, expected ${k + 1}`);
      if (q.answer === null && k !== s.questions.length - 1) out.push(`${where}.questions[${k}].answer: only the last question may be unanswered`);
    });
    const asked = s.calls.filter((c) => c.resultStatus === "question").length;
    if (asked !== s.questions.length) out.push(`${where}.questions: holds ${s.questions.length}, but ${asked} call(s) ended with a question`);
    const noted = count("harness.question") + count("harness.too_many_questions");
    if (noted !== s.questions.length) out.push(`${where}.questions: holds ${s.questions.length}, but the events record ${noted}`);
    const answered = s.questions.filter((q) => q.answer !== null).length;
    if (resumes > answered) out.push(`${where}: ${resumes} resuming call(s) for ${answered} answered question(s)`);
  });
  return out;
}

/** R153: each session's state, and the ledger's status, follow from its calls. */
function sessionStateProblems(l: SessionLedger): string[] {
  const out: string[] = [];
  const open = l.sessions.flatMap((s) => s.calls.filter((c) => c.phase !== "settled"));
  l.sessions.forEach((s, i) => {
    const where = `sessions[${i}].state`;
    const last = s.calls.at(-1);
    const failed = s.calls.find((c) => c.phase === "settled" && c.status !== "completed");
    if (failed && s.state !== "failed") out.push(`${where}: is ${s.state}, but call ${failed.index} ended ${failed.status}; a call that does not complete ends its session failed`);
    if (s.state === "done" && last?.resultStatus !== "done") out.push(`${where}: is done, but its last call did not return done`);
    if (s.state === "awaiting-answer" && (last?.resultStatus !== "question" || s.questions.at(-1)?.answer !== null)) out.push(`${where}: is awaiting-answer without an open question`);
    // A session stays new while its first call runs.
    if (s.state === "new" && s.calls.some((c) => c.phase === "settled")) out.push(`${where}: is new, but it has a settled call`);
  });
  if ((l.status === "finished" || l.status === "parked") && open.length > 0) out.push(`status: is ${l.status} with ${open.length} call(s) open`);
  if (l.status === "finished" && l.sessions.some((s) => s.state === "new" || s.state === "answered" || s.state === "awaiting-answer")) {
    out.push("status: is finished, but a session has not ended");
  }
  if (l.status === "parked" && !l.sessions.some((s) => s.state === "awaiting-answer")) out.push("status: is parked, but no session awaits an answer");
  return out;
}

export const SESSION_LEDGER_INVARIANTS: readonly Invariant<SessionLedger>[] = [
  ...runInvariants(sessionCalls),
  {
    rule: "R149",
    id: "open-reservations",
    statement: "reservedUsd is the sum of the open calls' reservations, and no call reserves more than callBudgetUsd",
    check: (l) => {
      const out: string[] = [];
      const calls = l.sessions.flatMap((s) => s.calls);
      const open = sumPico(calls.filter((c) => c.phase !== "settled").map((c) => c.reservationUsd));
      if (open !== pico(l.budget.reservedUsd)) out.push(`budget.reservedUsd: is ${usd(l.budget.reservedUsd)}, but the open calls reserve ${usd(open)}`);
      for (const [i, s] of l.sessions.entries()) {
        for (const [j, c] of s.calls.entries()) {
          if (above(c.reservationUsd, l.callBudgetUsd)) out.push(`sessions[${i}].calls[${j}].reservationUsd: ${usd(c.reservationUsd)} is above callBudgetUsd ${usd(l.callBudgetUsd)}`);
        }
      }
      return out;
    },
  },
  capFlagInvariant("a ledger", (l) => l.capUsd),
  {
    rule: "R152",
    id: "events-follow-calls",
    statement:
      "each session's calls are numbered in order (start, then resumes), with one harness.start, harness.resume and harness.result per call that agree with it, and one question per call that asked, each recorded by an event",
    check: sessionEventProblems,
  },
  {
    rule: "R153",
    id: "states-follow-calls",
    statement: "a call that did not complete ends its session failed, done and awaiting-answer follow the last call's result, and a finished or parked ledger has no open call",
    check: sessionStateProblems,
  },
];

/** Every problem of `subject` under `list`, each prefixed with its rule. */
export function applyInvariants<T>(list: readonly Invariant<T>[], subject: T): string[] {
  return list.flatMap((inv) => inv.check(subject).map((p) => `${p} (${inv.rule} ${inv.id})`));
}
