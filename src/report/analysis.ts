import type { Arm } from "../terms/terms.ts";
import {
  BOOTSTRAP_RESAMPLES,
  clusterBootstrap,
  EXACT_ENUMERATION_MAX,
  MAX_PLANNED_TASKS,
  mcnemarExact,
  meanInterval,
  minimumDetectableEffect,
  PERMUTATION_SAMPLES,
  signFlipTest,
  signTest,
  tasksNeeded,
  wilcoxonSignedRank,
  type McNemarResult,
  type SignTestResult,
  type WilcoxonResult,
} from "./stats.ts";

/**
 * The task-level analysis of the report (pure). Repetitions are averaged within task and arm;
 * the paired difference of a task is doc-bridge mean minus repository-only mean; every interval
 * and test works on those n task differences. The methods are stated in docs/report.md.
 */

/** What the analysis needs of one attempt (a report row). */
export interface AnalysisAttempt {
  task: string;
  arm: Arm;
  repetition: number;
  status: string;
  outcome: string;
  score: number | null;
  inputTokens: number | null;
  outputTokens: number | null;
  cacheCreationInputTokens: number | null;
  cacheReadInputTokens: number | null;
  toolCalls: number | null;
  wallTimeMs: number | null;
  chargedUsd: number | null;
}

/** The score metric, the same in the task-level analysis and the attempt pairs. */
export const SCORE_METRIC = { key: "score", label: "score", unit: "points" } as const;
/** What an attempt spent, the same in the task-level analysis and the attempt pairs. */
export const EFFORT_METRICS = [
  { key: "toolCalls", label: "tool calls", unit: "calls" },
  { key: "wallTimeMs", label: "wall time", unit: "ms" },
  { key: "chargedUsd", label: "charged cost", unit: "USD" },
] as const;

export const TASK_METRICS = [SCORE_METRIC, { key: "tokens", label: "tokens (input + output + cache write + cache read)", unit: "tokens" }, ...EFFORT_METRICS] as const;
export type TaskMetricKey = (typeof TASK_METRICS)[number]["key"];

/** A metric's value of one attempt, or null when it has none (not completed, not scored, unknown). */
export function metricValue(a: AnalysisAttempt, key: TaskMetricKey): number | null {
  if (key === "score") return a.score;
  if (a.status !== "completed") return null;
  if (key === "tokens") {
    const parts = [a.inputTokens, a.outputTokens, a.cacheCreationInputTokens, a.cacheReadInputTokens];
    return parts.some((p) => p === null) ? null : parts.reduce((s: number, p) => s + p!, 0);
  }
  return a[key];
}

export interface TaskRow {
  task: string;
  /** Mean over the repetitions with a value. */
  repository: number;
  mcp: number;
  /** mcp − repository. */
  diff: number;
  repetitions: { repository: number; mcp: number };
}

export interface NoiseFloor {
  /** Pooled within-task sample variance of the metric across repetitions, per arm; null without a task of ≥ 2 values. */
  withinVariance: Record<Arm, number | null>;
  /** Standard error of the mean task-level difference that the within-arm spread alone produces. */
  noiseSe: number | null;
  /** 1.96 · noiseSe: the half-width of the band a zero true difference would fill 95% of the time. */
  noiseBand: number | null;
  /** min(1, noiseBand / |mean difference|); null when the mean difference is zero or unknown. */
  shareOfDifference: number | null;
}

export interface TaskMetric {
  metric: TaskMetricKey;
  label: string;
  unit: string;
  tasks: TaskRow[];
  leftOut: Array<{ task: string; why: string }>;
  n: number;
  meanDiff: number | null;
  sdDiff: number | null;
  tInterval: { lower: number; upper: number } | null;
  bootstrapInterval: { lower: number; upper: number } | null;
  permutation: { p: number; exact: boolean } | null;
  noise: NoiseFloor;
  /** Smallest mean task difference detectable at 80% power, two-sided 5%, with this design. */
  mde80: number | null;
}

export interface OutcomeTests {
  /** Attempt pairs (task × repetition), correct vs not correct. */
  mcnemar: McNemarResult;
  sign: SignTestResult;
  wilcoxon: WilcoxonResult;
  /** Per arm: how often two repetitions of the same task disagree on correct vs not correct. */
  disagreement: Record<Arm, { pairs: number; disagreeing: number; rate: number | null }>;
}

export interface PlanRow {
  repetitions: number;
  /** Tasks needed for 80% power at two-sided 5%, or null when more than MAX_PLANNED_TASKS or unknown. */
  tasks: number | null;
}

export interface Planning {
  metric: "score";
  /** Estimated between-task variance of the true difference (τ²), floored at 0. */
  betweenTaskVariance: number | null;
  effects: Array<{ effect: number; byRepetitions: PlanRow[] }>;
  note: string;
}

export interface Analysis {
  unit: "task";
  direction: string;
  seed: number;
  bootstrapResamples: number;
  methods: Record<"aggregation" | "tInterval" | "bootstrap" | "permutation" | "mcnemar" | "sign" | "wilcoxon" | "noiseFloor" | "mde" | "planning", string>;
  metrics: TaskMetric[];
  outcomes: OutcomeTests;
  planning: Planning;
}

export const DEFAULT_PLANNING_EFFECTS = [0.1, 0.2, 0.3] as const;
export const PLANNING_REPETITIONS = [1, 2, 3, 5] as const;

export const METHODS: Analysis["methods"] = {
  aggregation:
    "each arm's value of a task is the mean over its repetitions with a value (completed attempts; for score, scored attempts); the task's difference is doc-bridge mean minus repository-only mean; a task counts only when both arms have a value. Assumes tasks are independent of each other; repetitions of a task are not assumed independent",
  tInterval: "Student t 95% interval of the mean task difference, mean ± t(0.975, n−1)·sd/√n; assumes roughly normal task differences; needs n ≥ 2",
  bootstrap: `cluster bootstrap over tasks: ${BOOTSTRAP_RESAMPLES} resamples of n tasks with replacement (a task brings all its repetitions), percentile 2.5% and 97.5% of the resampled means (linear interpolation), seeded mulberry32; Monte Carlo error of each endpoint's level ≈ ${Math.sqrt((0.025 * 0.975) / BOOTSTRAP_RESAMPLES).toFixed(4)}; with few tasks it is too narrow (the bootstrap cannot see beyond the tasks it has)`,
  permutation: `paired permutation (sign-flip) test of the mean task difference, two-sided: under no arm effect each task's difference is as likely negated; exact over all 2^n patterns up to n = ${EXACT_ENUMERATION_MAX}, ${PERMUTATION_SAMPLES} seeded random patterns beyond; assumes the differences are symmetric about 0 under the null`,
  mcnemar:
    "exact McNemar test on attempt pairs (same task and repetition, both scored), correct vs not correct (partial, incorrect, incomplete): two-sided binomial test of the discordant pairs at 1/2. Treats the repetitions of a task as independent pairs, which they are not: its p-value is too small when repetitions agree; read it beside the task-level tests",
  sign: "exact sign test over task-level score differences: two-sided binomial test at 1/2 of positive vs negative differences, zeros dropped; assumes only independent tasks",
  wilcoxon:
    "Wilcoxon signed-rank test over task-level score differences: zeros dropped, ties given midranks, p from the exact null distribution of W+ (sum of positive ranks) over all sign patterns of those ranks; assumes differences symmetric about their median",
  noiseFloor:
    "per arm, the share of unordered pairs of repetitions of the same task that disagree on correct vs not correct; and per metric, the noise band 1.96·√(Σ_t (s²_repository/k_repository,t + s²_doc-bridge/k_doc-bridge,t))/n, where s² is the arm's pooled within-task variance across repetitions and k the repetitions a task has: the mean difference the within-arm spread alone would produce at a true difference of zero, 95% of the time. Its share of the difference is min(1, band / |mean difference|): 1 means the spread alone could produce a difference this large",
  mde: "minimum detectable effect at 80% power, two-sided 5%: (t(0.975, n−1) + t(0.80, n−1))·sd/√n with sd the observed sd of the task differences (the usual approximation to the noncentral t; it takes the observed spread as the truth)",
  planning:
    "for a chosen effect on the score: the fewest tasks whose MDE at r repetitions is at most the effect, with the task-difference variance at r repetitions σ²(r) = τ² + (s²_repository + s²_doc-bridge)/r and τ² = max(0, sd² − mean_t(s²_repository/k_repository,t + s²_doc-bridge/k_doc-bridge,t)); a pilot's spread is rough, so these are orders of magnitude",
};

function taskRows(attempts: readonly AnalysisAttempt[], key: TaskMetricKey, tasks: readonly string[]) {
  const rows: TaskRow[] = [];
  const leftOut: TaskMetric["leftOut"] = [];
  const values = new Map<string, Record<Arm, number[]>>();
  for (const task of tasks) {
    const v: Record<Arm, number[]> = { repository: [], mcp: [] };
    for (const a of attempts) {
      if (a.task !== task) continue;
      const x = metricValue(a, key);
      if (x !== null) v[a.arm].push(x);
    }
    values.set(task, v);
    const missing = (["repository", "mcp"] as const).filter((arm) => v[arm].length === 0);
    if (missing.length) {
      leftOut.push({ task, why: `no ${key === "score" ? "scored" : "completed"} attempt in ${missing.join(" and ")}` });
      continue;
    }
    const r = v.repository.reduce((s, x) => s + x, 0) / v.repository.length;
    const m = v.mcp.reduce((s, x) => s + x, 0) / v.mcp.length;
    rows.push({ task, repository: r, mcp: m, diff: m - r, repetitions: { repository: v.repository.length, mcp: v.mcp.length } });
  }
  return { rows, leftOut, values };
}

/** Pooled within-task variance of one arm over the included tasks: Σ (x − x̄_t)² / Σ (k_t − 1). */
function pooledWithin(rows: readonly TaskRow[], values: Map<string, Record<Arm, number[]>>, arm: Arm): number | null {
  let ss = 0;
  let df = 0;
  for (const row of rows) {
    const v = values.get(row.task)![arm];
    if (v.length < 2) continue;
    const m = v.reduce((s, x) => s + x, 0) / v.length;
    ss += v.reduce((s, x) => s + (x - m) ** 2, 0);
    df += v.length - 1;
  }
  return df === 0 ? null : ss / df;
}

/** Per task, the variance of its difference that the within-arm spread contributes. */
function noiseVariances(rows: readonly TaskRow[], within: Record<Arm, number | null>): number[] | null {
  if (within.repository === null || within.mcp === null) return null;
  return rows.map((r) => within.repository! / r.repetitions.repository + within.mcp! / r.repetitions.mcp);
}

function analyseMetric(attempts: readonly AnalysisAttempt[], spec: (typeof TASK_METRICS)[number], tasks: readonly string[], seed: number): TaskMetric & { noiseVars: number[] | null } {
  const { rows, leftOut, values } = taskRows(attempts, spec.key, tasks);
  const diffs = rows.map((r) => r.diff);
  const t = meanInterval(diffs);
  const within = { repository: pooledWithin(rows, values, "repository"), mcp: pooledWithin(rows, values, "mcp") };
  const noiseVars = noiseVariances(rows, within);
  const n = rows.length;
  const noiseSe = noiseVars && n > 0 ? Math.sqrt(noiseVars.reduce((s, v) => s + v, 0)) / n : null;
  const noiseBand = noiseSe === null ? null : 1.959963984540054 * noiseSe;
  const shareOfDifference = noiseBand === null || t.mean === null || t.mean === 0 ? null : Math.min(1, noiseBand / Math.abs(t.mean));
  return {
    metric: spec.key,
    label: spec.label,
    unit: spec.unit,
    tasks: rows,
    leftOut,
    n,
    meanDiff: t.mean,
    sdDiff: t.sd,
    tInterval: t.lower === null ? null : { lower: t.lower, upper: t.upper! },
    bootstrapInterval: clusterBootstrap(diffs, seed),
    permutation: signFlipTest(diffs, seed),
    noise: { withinVariance: within, noiseSe, noiseBand, shareOfDifference },
    mde80: minimumDetectableEffect(t.sd, n),
    noiseVars,
  };
}

function disagreement(attempts: readonly AnalysisAttempt[], arm: Arm, tasks: readonly string[]) {
  let pairs = 0;
  let disagreeing = 0;
  for (const task of tasks) {
    const outcomes = attempts.filter((a) => a.task === task && a.arm === arm && a.score !== null).map((a) => a.outcome === "correct");
    for (let i = 0; i < outcomes.length; i++)
      for (let j = i + 1; j < outcomes.length; j++) {
        pairs++;
        if (outcomes[i] !== outcomes[j]) disagreeing++;
      }
  }
  return { pairs, disagreeing, rate: pairs ? disagreeing / pairs : null };
}

export function analyse(attempts: readonly AnalysisAttempt[], opts: { seed: number; direction: string; effects?: readonly number[] }): Analysis {
  const tasks = [...new Set(attempts.map((a) => a.task))];
  const analysed = TASK_METRICS.map((spec) => analyseMetric(attempts, spec, tasks, opts.seed));
  const metrics: TaskMetric[] = analysed.map(({ noiseVars: _, ...m }) => m);
  const score = analysed[0]!;

  const byPair = new Map<string, Partial<Record<Arm, AnalysisAttempt>>>();
  for (const a of attempts) {
    if (a.score === null) continue;
    const k = `${a.task}\0${a.repetition}`;
    byPair.set(k, { ...byPair.get(k), [a.arm]: a });
  }
  const pairs = [...byPair.values()].filter((p) => p.repository && p.mcp).map((p) => ({ repositoryCorrect: p.repository!.outcome === "correct", mcpCorrect: p.mcp!.outcome === "correct" }));
  const scoreDiffs = score.tasks.map((r) => r.diff);

  const within = score.noise.withinVariance;
  const meanNoiseVar = score.noiseVars?.length ? score.noiseVars.reduce((s, v) => s + v, 0) / score.noiseVars.length : null;
  const tau2 = score.sdDiff === null || meanNoiseVar === null ? null : Math.max(0, score.sdDiff ** 2 - meanNoiseVar);
  const effects = opts.effects ?? DEFAULT_PLANNING_EFFECTS;
  const planning: Planning = {
    metric: "score",
    betweenTaskVariance: tau2,
    effects: effects.map((effect) => ({
      effect,
      byRepetitions: PLANNING_REPETITIONS.map((r) => ({
        repetitions: r,
        tasks: tau2 === null ? null : tasksNeeded(effect, Math.sqrt(tau2 + (within.repository! + within.mcp!) / r)),
      })),
    })),
    note:
      tau2 === null
        ? "no planning: it needs at least two tasks with a score in both arms and, in each arm, a task with two or more scored repetitions"
        : `tasks needed for 80% power at two-sided 5%; null means more than ${MAX_PLANNED_TASKS}`,
  };

  return {
    unit: "task",
    direction: opts.direction,
    seed: opts.seed,
    bootstrapResamples: BOOTSTRAP_RESAMPLES,
    methods: METHODS,
    metrics,
    outcomes: {
      mcnemar: mcnemarExact(pairs),
      sign: signTest(scoreDiffs),
      wilcoxon: wilcoxonSignedRank(scoreDiffs, opts.seed),
      disagreement: { repository: disagreement(attempts, "repository", tasks), mcp: disagreement(attempts, "mcp", tasks) },
    },
    planning,
  };
}
