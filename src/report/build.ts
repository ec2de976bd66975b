import type { AdjudicationRecord, Item, Outcome } from "../adjudicate/schema.ts";
import { blindingSummary } from "../adjudicate/blinding.ts";
import { checkBinding } from "../adjudicate/binding.ts";
import type { Ledger, Observation } from "../ledger/schema.ts";
import type { Manifest } from "../manifest/schema.ts";
import type { Evidence } from "../ledger/evidence.ts";
import { planStudy, type PlannedAttempt } from "../plan/plan.ts";
import type { Arm } from "../terms/terms.ts";
import { UsageError } from "../util/errors.ts";
import { ADJUDICATION_USD_LABEL, extrapolationCaveat, spendLabel, type SpendLabel } from "../cost/labels.ts";
import { pico, roundedUsd } from "../cost/money.ts";
import { analyse, EFFORT_METRICS, SCORE_METRIC, type Analysis, type AnalysisAttempt } from "./analysis.ts";
import { behaviourOf, type Behaviour } from "./behaviour.ts";
import { DEFAULT_BOOTSTRAP_SEED } from "./stats.ts";
import { headlineOf, type Headline } from "./headline.ts";
import { gatewayCause } from "../gateway/cause.ts";

/**
 * The report's data (pure): every attempt of the plan with its status (none dropped, the ones
 * never run included), the outcome distribution per arm, paired differences per task and
 * repetition, priced totals, the pilot extrapolation and every gap, each said in words.
 * Never an answer, a verdict's text or a credential: the report is meant to be published.
 */

export const AGENT_ADJUDICATION_STATEMENT =
  "Correctness is agent-adjudicated: a separate Claude Code run, blind to the scenario, graded each answer against the expected propositions. There is no human review.";

export const REPORT_OUTCOMES = ["correct", "partial", "incorrect", "incomplete", "blocked", "missing"] as const;
export type ReportOutcome = (typeof REPORT_OUTCOMES)[number];

/** A report row: what the analysis reads of an attempt (AnalysisAttempt), and what the tables and the behaviour show besides. */
export interface AttemptRow extends AnalysisAttempt {
  /** The ledger's index; null for a planned attempt that never ran. */
  index: number | null;
  scenario: string;
  /** The ledger status, `unsettled` (reserved or running when the ledger was last written) or `not run`. */
  status: string;
  statusReason: string | null;
  outcome: ReportOutcome;
  outcomeReason: string;
  /** The OCI runtime the engine ran the attempt's container under (null: no container ran, or a ledger from before it was recorded). */
  runtime: string | null;
  usageComplete: boolean;
  numTurns: number | null;
  /** Tool names only (never inputs): the tool mix of the behaviour table. */
  toolCallsByName: Record<string, number> | null;
}

export const PAIRED_METRICS = [
  { key: "inputTokens", label: "input tokens", unit: "tokens" },
  { key: "outputTokens", label: "output tokens", unit: "tokens" },
  { key: "cacheCreationInputTokens", label: "cache-write tokens", unit: "tokens" },
  { key: "cacheReadInputTokens", label: "cache-read tokens", unit: "tokens" },
  ...EFFORT_METRICS,
  SCORE_METRIC,
] as const;
export type PairedMetricKey = (typeof PAIRED_METRICS)[number]["key"];

export interface Pair {
  task: string;
  repetition: number;
  repository: number;
  mcp: number;
  /** mcp − repository. */
  diff: number;
}

export interface PairedMetric {
  metric: PairedMetricKey;
  label: string;
  unit: string;
  pairs: Pair[];
  n: number;
  /** Descriptive only: the tests and intervals are task-level (ReportData.analysis). */
  meanDiff: number | null;
  /** Pairs left out, with why. */
  missing: Array<{ task: string; repetition: number; why: string }>;
}

export interface OutcomeDistribution {
  counts: Record<ReportOutcome, number>;
  scored: number;
  meanScore: number | null;
}

export interface ReportData {
  schemaVersion: 1;
  kind: "study-report";
  /** What the study found, in plain sentences, and every caveat that makes the run no evidence: the report opens with it (contract R193). */
  headline: Headline;
  statement: string;
  run: {
    runId: string;
    createdAt: string;
    mode: Ledger["mode"];
    model: string;
    transport: string;
    cliVersion: string | null;
    /** The sha256 of the calibration profile the run's guards compared it with (contract R221); null for the http transport and older ledgers. */
    profileSha256: string | null;
    isolation: string;
    /** The OCI runtime the run created every attempt container with; null for the http transport and older ledgers. */
    runtime: string | null;
    status: Ledger["status"];
    statusReason: string | null;
    protocolHash: string;
    /** A scripted or fake API answered (the ledger's modelApi "test"): the run is no evidence about the model, its USD figures cost nothing. */
    testModel: boolean;
  };
  scenarios: Record<Arm, string>;
  adjudication: null | {
    method: "agent";
    humanReview: false;
    status: AdjudicationRecord["status"];
    statusReason: string | null;
    model: string;
    answeringModel: string;
    sameModel: boolean;
    forcedSameModel: boolean;
    seed: number;
    maskedTerms: string[];
    spentUsd: number;
    capUsd: number;
    /** The adjudicator's guesses of the arm (always recomputed from the items). */
    blinding: NonNullable<AdjudicationRecord["blinding"]>;
  };
  attempts: AttemptRow[];
  statusCounts: Record<string, Record<string, number>>;
  outcomes: Record<string, OutcomeDistribution>;
  /** Attempt pairs (task × repetition), for the dot plots; descriptive, no interval. */
  paired: { direction: string; method: string; metrics: PairedMetric[] };
  /** Task-level statistics: the unit of analysis is the task. */
  analysis: Analysis;
  behaviour: Behaviour;
  totals: {
    planned: number | null;
    run: number;
    notRun: number | null;
    inputTokens: number;
    outputTokens: number;
    cacheCreationInputTokens: number;
    cacheReadInputTokens: number;
    toolCalls: number;
    wallTimeMs: number;
    usageComplete: boolean;
    answeringChargedUsd: number;
    adjudicationChargedUsd: number | null;
    totalChargedUsd: number;
    capUsd: number;
  };
  extrapolation: { applies: boolean; fullRunUsd: number | null; note: string };
  /**
   * What the USD figures and token counts are: the answering run's (its ledger's own label, or
   * its transport's for a ledger written before the label existed) and the adjudicator's, a
   * Claude Code run whose USD is the CLI's estimate as well.
   */
  spend: SpendLabel & { adjudicationUsd: string | null };
  gaps: string[];
  /**
   * Isolation strict only (contract R72): what each attempt asked of the egress proxy. A refused
   * request does not fail an attempt; it is shown here. Absent when no attempt has a record.
   */
  egress?: EgressRow[];
  /**
   * Per repository, which instruction files (CLAUDE.md, CLAUDE.local.md, AGENTS.md) the attempts'
   * exports held: the corpus may instruct the agent, and a reader should know it did. Paths
   * only, never contents.
   */
  instructionFiles: InstructionFilesRow[];
  /**
   * The digest over the private files this report was made from (contract R158, docs/report.md,
   * "Evidence digest"): `ledger verify --report` checks them against it. Absent in a report built
   * without reading the files (buildReport alone).
   */
  evidence?: Evidence;
}

/** How a report names its evidence digest, the same in every format. */
export function evidenceText(e: Evidence): string {
  const transcripts = e.files.filter((f) => f.name.includes(".transcripts/")).length;
  const others = e.files.filter((f) => !f.name.includes(".transcripts/")).map((f) => f.name);
  return `Evidence digest (${e.algorithm}): ${e.root}, over ${e.files.length} private files (${others.join(", ")} and ${transcripts} transcripts; each file's sha256 is in report.json). \`study-runner ledger verify LEDGER --report report.json\` tells whether any of them changed since this report was written.`;
}

export interface InstructionFilesRow {
  repository: string;
  /** Every path any attempt's export held, sorted. */
  files: string[];
  /** Attempts whose record names its export's instruction files. */
  recorded: number;
  /** Attempts that ran without such a record (a ledger written before the field existed, or stopped before its export). */
  unrecorded: number;
}

function instructionFileRows(observations: readonly Observation[]): InstructionFilesRow[] {
  const rows = new Map<string, { files: Set<string>; recorded: number; unrecorded: number }>();
  for (const o of observations) {
    const row = rows.get(o.repository) ?? { files: new Set<string>(), recorded: 0, unrecorded: 0 };
    rows.set(o.repository, row);
    if (o.instructionFiles === undefined) {
      row.unrecorded++;
      continue;
    }
    row.recorded++;
    for (const f of o.instructionFiles) row.files.add(f);
  }
  return [...rows].map(([repository, r]) => ({ repository, files: [...r.files].sort(), recorded: r.recorded, unrecorded: r.unrecorded }));
}

export interface EgressRow {
  index: number;
  task: string;
  scenario: string;
  repetition: number;
  requests: number;
  allowed: number;
  refused: number;
  /** Distinct refused host:port targets in request order (the first EGRESS_TARGETS_SHOWN). */
  refusedTargets: string[];
  /** Requests the proxy counted but did not keep as entries (its record bound). */
  entriesDropped: number;
}

const EGRESS_TARGETS_SHOWN = 10;

function egressRows(observations: readonly Observation[]): EgressRow[] | undefined {
  const rows: EgressRow[] = [];
  for (const o of observations) {
    if (!o.egress) continue;
    const targets = [...new Set(o.egress.entries.filter((e) => !e.allowed).map((e) => (e.host === "" ? "(unparsed request)" : `${e.host.includes(":") ? `[${e.host}]` : e.host}:${e.port}`)))];
    rows.push({
      index: o.index,
      task: o.task,
      scenario: o.scenario,
      repetition: o.repetition,
      requests: o.egress.requests,
      allowed: o.egress.allowed,
      refused: o.egress.refused,
      refusedTargets: targets.slice(0, EGRESS_TARGETS_SHOWN),
      entriesDropped: o.egress.entriesDropped,
    });
  }
  return rows.length ? rows : undefined;
}

export interface ReportInput {
  ledger: Ledger;
  ledgerSha256: string;
  record: AdjudicationRecord | null;
  /** The run's manifest (hash already checked), or null when it could not be read. */
  manifest: Manifest | null;
  manifestNote?: string;
  /** The cluster bootstrap's seed (DEFAULT_BOOTSTRAP_SEED when absent); the report states it. */
  seed?: number;
  /** Score effects the planning table sizes a study for (DEFAULT_PLANNING_EFFECTS when absent). */
  effects?: readonly number[];
}

export const PAIRED_METHOD =
  "descriptive: the mean of the attempt-pair differences (same task and repetition); repetitions of a task are not independent, so no interval or test is computed over attempt pairs: see the task-level analysis";

/** An amount, or an exact pico-USD sum, to 6 places (contract R203). */
const usd6 = (n: number | bigint) => roundedUsd(typeof n === "bigint" ? n : pico(n), 6);
function attemptReason(o: Observation, ledger: Ledger): string | null {
  if (o.status === "completed") return null;
  if (o.status === null) return `never settled (phase ${o.phase})`;
  // What the gateway saw go wrong first, then the attempt's own problems (contract R194).
  const own = (o.gateway && gatewayCause(o.gateway)) ?? o.setupProblems[0] ?? o.costProblem ?? null;
  if (own) return own;
  const prefix = `attempt ${o.index + 1} (`;
  return ledger.statusReason?.startsWith(prefix) ? ledger.statusReason : null;
}

function outcomeOf(o: Observation, record: AdjudicationRecord | null, items: Map<number, Item>): { outcome: ReportOutcome; reason: string; score: number | null } {
  if (record === null) return { outcome: "missing", reason: "not adjudicated: no adjudication record was given", score: null };
  const item = items.get(o.index);
  if (!item) return { outcome: "missing", reason: "missing: the adjudication record has no item for this observation (it stopped before reaching it)", score: null };
  if (item.outcome === null) return { outcome: "missing", reason: "missing: its adjudicator run never settled", score: null };
  return { outcome: item.outcome as Outcome, reason: item.decidedBy === "adjudicator" ? "adjudicator verdict" : (item.reason ?? ""), score: item.score };
}

/** The scenario name of each arm: the manifest's, else the ledger's, else the arm's own name. */
function scenarioNames(ledger: Ledger, manifest: Manifest | null): Record<Arm, string> {
  return {
    repository: manifest?.scenarios[0] ?? ledger.observations.find((o) => o.arm === "repository")?.scenario ?? "repository",
    mcp: manifest?.scenarios[1] ?? ledger.observations.find((o) => o.arm === "mcp")?.scenario ?? "mcp",
  };
}

/** The row of an attempt that ran: its ledger figures and its adjudicated outcome. */
function ranAttemptRow(o: Observation, ledger: Ledger, record: AdjudicationRecord | null, items: Map<number, Item>): AttemptRow {
  const out = outcomeOf(o, record, items);
  return {
    index: o.index,
    task: o.task,
    scenario: o.scenario,
    arm: o.arm,
    repetition: o.repetition,
    status: o.status ?? "unsettled",
    statusReason: attemptReason(o, ledger),
    outcome: out.outcome,
    outcomeReason: out.reason,
    score: out.score,
    inputTokens: o.inputTokens,
    outputTokens: o.outputTokens,
    cacheCreationInputTokens: o.cacheCreationInputTokens,
    cacheReadInputTokens: o.cacheReadInputTokens,
    toolCalls: o.status === null ? null : o.toolCalls,
    wallTimeMs: o.wallTimeMs,
    chargedUsd: o.chargedUsd,
    runtime: o.runtime ?? null,
    usageComplete: o.usageComplete,
    numTurns: o.numTurns,
    toolCallsByName: o.status === null ? null : o.toolCallsByName,
  };
}

/** The row of a planned attempt the run never reached: every figure unknown. */
function notRunAttemptRow(a: PlannedAttempt, ledger: Ledger): AttemptRow {
  return {
    index: null,
    task: a.taskId,
    scenario: a.scenario,
    arm: a.arm,
    repetition: a.repetition,
    status: "not run",
    statusReason: ledger.status === "blocked" ? `the run stopped before it: ${ledger.statusReason ?? "blocked"}` : "the run has not reached it",
    outcome: "missing",
    outcomeReason: "missing: the attempt never ran",
    score: null,
    inputTokens: null,
    outputTokens: null,
    cacheCreationInputTokens: null,
    cacheReadInputTokens: null,
    toolCalls: null,
    wallTimeMs: null,
    chargedUsd: null,
    runtime: null,
    usageComplete: false,
    numTurns: null,
    toolCallsByName: null,
  };
}

/** The plan's size in this mode and in a full run, and the planned attempts the ledger does not hold; all null without a manifest. */
function planOf(ledger: Ledger, manifest: Manifest | null): { planned: number | null; fullPlanSize: number | null; notRun: PlannedAttempt[] } {
  if (!manifest) return { planned: null, fullPlanSize: null, notRun: [] };
  const plan = planStudy(manifest, ledger.mode);
  return { planned: plan.length, fullPlanSize: planStudy(manifest, "full").length, notRun: plan.slice(ledger.observations.length) };
}

/** What each attempt lacks, in words: nothing is hidden by an average. */
function attemptGaps(attempts: readonly AttemptRow[]): string[] {
  const gaps: string[] = [];
  for (const a of attempts) {
    const who = `${a.task} / ${a.scenario} / repetition ${a.repetition}`;
    if (a.status === "not run") gaps.push(`${who}: not run (${a.statusReason})`);
    else if (a.status !== "completed") gaps.push(`${who}: attempt ${a.status}${a.statusReason ? ` (${a.statusReason})` : ""}`);
    if (a.status !== "not run" && (a.outcome === "blocked" || a.outcome === "missing")) gaps.push(`${who}: correctness ${a.outcome} (${a.outcomeReason})`);
    if (a.status !== "not run" && !a.usageComplete) gaps.push(`${who}: usage incomplete; its token counts are known prior turns only or unknown`);
  }
  return gaps;
}

/** What the run and its adjudication lack as a whole: a test endpoint, a run not finished, no or an unfinished record, a departure. */
function runGaps(ledger: Ledger, record: AdjudicationRecord | null): string[] {
  const gaps: string[] = [];
  if (ledger.modelApi === "test") gaps.push("the model answered through a test endpoint (a scripted or fake API), not the real API: this run is no evidence about the model");
  if (ledger.status !== "awaiting-adjudication") gaps.push(`the run is ${ledger.status}${ledger.statusReason ? `: ${ledger.statusReason}` : ""}`);
  if (record === null) gaps.push("no adjudication record: correctness is unknown for every attempt");
  else {
    if (record.status !== "complete") gaps.push(`the adjudication is ${record.status}${record.statusReason ? `: ${record.statusReason}` : ""}`);
    if (record.adjudicator.sameModel)
      gaps.push(
        `departure from the protocol: the adjudicator used the answering model ${record.adjudicator.model} (forced with --force-same-model): a different run of the same model, not a different model`,
      );
  }
  return gaps;
}

const emptyDistribution = (): OutcomeDistribution => ({ counts: Object.fromEntries(REPORT_OUTCOMES.map((k) => [k, 0])) as Record<ReportOutcome, number>, scored: 0, meanScore: null });

/** Per scenario (both arms' first, even when empty): how many attempts ended in each status and each outcome, and the mean score. */
function countByScenario(attempts: readonly AttemptRow[], scenarioOf: Record<Arm, string>): Pick<ReportData, "statusCounts" | "outcomes"> {
  const statusCounts: ReportData["statusCounts"] = {};
  const outcomes: ReportData["outcomes"] = {};
  for (const s of [scenarioOf.repository, scenarioOf.mcp]) {
    statusCounts[s] = {};
    outcomes[s] = emptyDistribution();
  }
  for (const a of attempts) {
    const sc = (statusCounts[a.scenario] ??= {});
    sc[a.status] = (sc[a.status] ?? 0) + 1;
    const dist = (outcomes[a.scenario] ??= emptyDistribution());
    dist.counts[a.outcome]++;
  }
  for (const s of Object.keys(outcomes)) {
    const scores = attempts.filter((a) => a.scenario === s && a.score !== null).map((a) => a.score!);
    outcomes[s]!.scored = scores.length;
    outcomes[s]!.meanScore = scores.length ? scores.reduce((x, y) => x + y, 0) / scores.length : null;
  }
  return { statusCounts, outcomes };
}

interface AttemptPair {
  task: string;
  repetition: number;
  repository?: AttemptRow;
  mcp?: AttemptRow;
}

/** The attempts of the same task and repetition, one per arm, in first-seen order. */
function attemptPairs(attempts: readonly AttemptRow[]): AttemptPair[] {
  const keyOf = (a: AttemptRow) => `${a.task}\0${a.repetition}`;
  const byKey = new Map<string, AttemptPair>();
  for (const a of attempts) {
    const entry = byKey.get(keyOf(a)) ?? { task: a.task, repetition: a.repetition };
    entry[a.arm] = a;
    byKey.set(keyOf(a), entry);
  }
  return [...byKey.values()];
}

/** Why a pair has no difference for `key` (null: it has one): an arm missing, unscored, not completed, or a value unknown. */
function pairLeftOut(r: AttemptRow | undefined, m: AttemptRow | undefined, key: PairedMetricKey, scenarioOf: Record<Arm, string>): string | null {
  if (!r || !m) return "one arm has no attempt";
  if (key === "score") {
    if (r.score !== null && m.score !== null) return null;
    return `no score in ${[r.score === null ? scenarioOf.repository : null, m.score === null ? scenarioOf.mcp : null].filter(Boolean).join(" and ")}`;
  }
  if (r.status !== "completed" || m.status !== "completed")
    return [r.status !== "completed" ? `${scenarioOf.repository} ${r.status}` : null, m.status !== "completed" ? `${scenarioOf.mcp} ${m.status}` : null].filter(Boolean).join(", ");
  return r[key] === null || m[key] === null ? "value unknown" : null;
}

/** Each paired metric over the attempt pairs: the differences, their mean, and the pairs left out with why. */
function pairedMetrics(attempts: readonly AttemptRow[], scenarioOf: Record<Arm, string>): PairedMetric[] {
  const entries = attemptPairs(attempts);
  return PAIRED_METRICS.map(({ key, label, unit }) => {
    const pairs: Pair[] = [];
    const missing: PairedMetric["missing"] = [];
    for (const e of entries) {
      const why = pairLeftOut(e.repository, e.mcp, key, scenarioOf);
      if (why !== null) {
        missing.push({ task: e.task, repetition: e.repetition, why });
        continue;
      }
      const rv = e.repository![key] as number;
      const mv = e.mcp![key] as number;
      pairs.push({ task: e.task, repetition: e.repetition, repository: rv, mcp: mv, diff: mv - rv });
    }
    const meanDiff = pairs.length ? pairs.reduce((s, p) => s + p.diff, 0) / pairs.length : null;
    return { metric: key, label, unit, pairs, n: pairs.length, meanDiff, missing };
  });
}

/** Every attempt of the ledger has complete usage (and there is one). */
const usageCompleteOf = (ledger: Ledger) => ledger.observations.length > 0 && ledger.observations.every((o) => o.usageComplete);

/** The run's sums over its attempts and its charges (USD to 6 places). */
function totalsOf(ledger: Ledger, record: AdjudicationRecord | null, planned: number | null): ReportData["totals"] {
  const run = ledger.observations;
  const sum = (f: (o: Observation) => number | null) => run.reduce((s, o) => s + (f(o) ?? 0), 0);
  const answeringChargedUsd = usd6(ledger.budget.spentUsd);
  const adjudicationChargedUsd = record ? usd6(record.budget.spentUsd) : null;
  return {
    planned,
    run: run.length,
    notRun: planned === null ? null : Math.max(0, planned - run.length),
    inputTokens: sum((o) => o.inputTokens),
    outputTokens: sum((o) => o.outputTokens),
    cacheCreationInputTokens: sum((o) => o.cacheCreationInputTokens),
    cacheReadInputTokens: sum((o) => o.cacheReadInputTokens),
    toolCalls: sum((o) => (o.status === null ? null : o.toolCalls)),
    wallTimeMs: sum((o) => o.wallTimeMs),
    usageComplete: usageCompleteOf(ledger),
    answeringChargedUsd,
    adjudicationChargedUsd,
    totalChargedUsd: usd6(pico(ledger.budget.spentUsd) + (record ? pico(record.budget.spentUsd) : 0n)),
    capUsd: ledger.budget.capUsd,
  };
}

/** A finished pilot with complete usage, scaled to the full plan; anything else says why there is none. */
function extrapolationOf(ledger: Ledger, planned: number | null, fullPlanSize: number | null): ReportData["extrapolation"] {
  const pilotDone = ledger.mode === "pilot" && ledger.status === "awaiting-adjudication" && usageCompleteOf(ledger);
  if (ledger.mode !== "pilot") return { applies: false, fullRunUsd: null, note: "a full run: no extrapolation" };
  if (!pilotDone) return { applies: false, fullRunUsd: null, note: "no extrapolation: only a pilot that completed with complete usage is extrapolated" };
  if (planned === null || fullPlanSize === null) return { applies: false, fullRunUsd: null, note: "no extrapolation: the manifest could not be read" };
  const factor = fullPlanSize / planned;
  return {
    applies: true,
    fullRunUsd: usd6((pico(ledger.budget.spentUsd) * BigInt(fullPlanSize)) / BigInt(planned)),
    note: `answering spend of the pilot x ${factor} (${fullPlanSize} full-run attempts / ${planned} pilot attempts); not an upper bound: other tasks may cost more; adjudication not included; ${extrapolationCaveat(ledger.transport)}`,
  };
}

/** The run's header as the report states it. */
function runSummary(ledger: Ledger): ReportData["run"] {
  return {
    runId: ledger.runId,
    createdAt: ledger.createdAt,
    mode: ledger.mode,
    model: ledger.model,
    transport: ledger.transport,
    cliVersion: ledger.cliVersion,
    profileSha256: ledger.profileSha256 ?? null,
    isolation: ledger.isolation,
    runtime: ledger.runtime ?? null,
    status: ledger.status,
    statusReason: ledger.statusReason ?? null,
    protocolHash: ledger.protocol.protocolHash,
    testModel: ledger.modelApi === "test",
  };
}

/** The adjudication as the report states it: who judged, how blind, what it cost (never a verdict's text). */
function adjudicationSummary(record: AdjudicationRecord): NonNullable<ReportData["adjudication"]> {
  return {
    method: "agent",
    humanReview: false,
    status: record.status,
    statusReason: record.statusReason ?? null,
    model: record.adjudicator.model,
    answeringModel: record.adjudicator.answeringModel,
    sameModel: record.adjudicator.sameModel,
    forcedSameModel: record.adjudicator.forcedSameModel,
    seed: record.order.seed,
    maskedTerms: record.masking.terms,
    spentUsd: usd6(record.budget.spentUsd),
    capUsd: record.budget.capUsd,
    blinding: blindingSummary(record.items),
  };
}

/**
 * The report of a ledger and its adjudication record: the record must be this ledger's; every
 * planned attempt gets a row (the ones never run included, when the manifest was read), then the
 * gaps in words, the counts per scenario, the attempt pairs, the task-level analysis, the
 * behaviour, the totals and the pilot's extrapolation.
 */
export function buildReport(input: ReportInput): ReportData {
  const { ledger, record } = input;
  if (record) {
    const problems = checkBinding(ledger, input.ledgerSha256, record);
    if (problems.length) throw new UsageError(problems.join("\n"), problems);
  }
  const items = new Map((record?.items ?? []).map((i) => [i.observationIndex, i]));
  const scenarioOf = scenarioNames(ledger, input.manifest);
  const { planned, fullPlanSize, notRun } = planOf(ledger, input.manifest);
  const attempts = [...ledger.observations.map((o) => ranAttemptRow(o, ledger, record, items)), ...notRun.map((a) => notRunAttemptRow(a, ledger))];
  const gaps = [
    ...(input.manifest ? [] : [`the manifest could not be read (${input.manifestNote ?? "unknown reason"}): planned attempts that never ran are not listed, and there is no extrapolation`]),
    ...attemptGaps(attempts),
    ...runGaps(ledger, record),
  ];
  const direction = `${scenarioOf.mcp} minus ${scenarioOf.repository}`;
  const egress = egressRows(ledger.observations);
  const data: Omit<ReportData, "headline"> = {
    schemaVersion: 1,
    kind: "study-report",
    statement: AGENT_ADJUDICATION_STATEMENT,
    run: runSummary(ledger),
    scenarios: scenarioOf,
    adjudication: record && adjudicationSummary(record),
    attempts,
    ...countByScenario(attempts, scenarioOf),
    paired: { direction, method: PAIRED_METHOD, metrics: pairedMetrics(attempts, scenarioOf) },
    analysis: analyse(attempts, { seed: input.seed ?? DEFAULT_BOOTSTRAP_SEED, direction, effects: input.effects }),
    behaviour: behaviourOf(attempts),
    totals: totalsOf(ledger, record, planned),
    extrapolation: extrapolationOf(ledger, planned, fullPlanSize),
    spend: { ...(ledger.spendLabel ?? spendLabel(ledger.transport)), adjudicationUsd: record ? ADJUDICATION_USD_LABEL : null },
    gaps,
    ...(egress ? { egress } : {}),
    instructionFiles: instructionFileRows(ledger.observations),
  };
  const { schemaVersion, kind, ...rest } = data;
  return { schemaVersion, kind, headline: headlineOf(data), ...rest };
}
