import type { Analysis } from "./analysis.ts";
import type { Behaviour } from "./behaviour.ts";
import { num } from "./numbers.ts";
import { MAX_PLANNED_TASKS, tasksNeeded } from "./stats.ts";

/**
 * What the study found, in a few plain sentences under the report's title (contract R193):
 * derived from the statistics the report already computed, never computed anew, and, before
 * them, every caveat that makes the run no evidence. The same words in every format.
 */
export interface Headline {
  /** Each reason the run is no evidence about the difference (a test model, a pilot, a run or adjudication not finished, blinding that failed); shown first and in red. */
  caveats: string[];
  /** The effect on the primary endpoint, whether it can be told from zero and the noise, the MDE and the tasks a study would need, then cost and time per correct answer. */
  sentences: string[];
}

const signed = (n: number, unit: string) => (n > 0 ? `+${num(n, unit)}` : num(n, unit));

/** A p-value as a reader needs it: two decimals, three below 0.01, "< 0.001" below that. */
export function readerP(p: number): string {
  if (p < 0.001) return "< 0.001";
  return `= ${p.toFixed(p < 0.01 ? 3 : 2)}`;
}

/** A USD figure as a reader needs it: cents from 1 USD up, two significant digits below, 0 for a zero. */
export function readerUsd(n: number): string {
  if (n === 0) return "0";
  return Math.abs(n) >= 1 ? n.toFixed(2) : String(Number(n.toPrecision(2)));
}

/** What the headline reads of the report's data (a part of ReportData). */
export interface HeadlineInput {
  run: { mode: string; status: string; statusReason: string | null; testModel: boolean };
  scenarios: Record<"repository" | "mcp", string>;
  adjudication: null | { status: string; blinding: { correct: number; guesses: number; interval95: [number, number] | null } };
  attempts: ReadonlyArray<{ repetition: number }>;
  outcomes: Record<string, { meanScore: number | null }>;
  analysis: Analysis;
  behaviour: Behaviour;
  totals: { run: number; notRun: number | null };
}

/** The caveats, most fundamental first. */
function caveatsOf(r: HeadlineInput): string[] {
  const out: string[] = [];
  if (r.run.testModel)
    out.push("A fake model answered (a scripted or fake API, not the real model): this run is no evidence about the model, and its USD figures are list-price estimates of tokens that cost nothing.");
  if (r.run.mode === "pilot") out.push(`This is a pilot (${r.totals.run} attempts): it tests the set-up and prices the full run; it is too small to be evidence about the difference.`);
  if (r.run.status !== "awaiting-adjudication") out.push(`The run is ${r.run.status}${r.run.statusReason ? `: ${r.run.statusReason}` : ""}; its figures cover only what ran.`);
  else if (r.totals.notRun !== null && r.totals.notRun > 0) out.push(`${r.totals.notRun} planned attempts never ran; the figures cover only what ran.`);
  if (r.adjudication === null) out.push("No adjudication record was given: correctness is unknown, so there is no effect on the score.");
  else if (r.adjudication.status !== "complete") out.push(`The adjudication is ${r.adjudication.status}: some attempts have no verdict.`);
  const b = r.adjudication?.blinding;
  if (b?.interval95 && !(b.interval95[0] <= 0.5 && 0.5 <= b.interval95[1]))
    out.push(`Blinding failed: the adjudicator guessed the arm right in ${b.correct} of ${b.guesses} verdicts, more often than chance allows, so its grades may favour an arm.`);
  return out;
}

/** The effect on the score with its interval and test, and what can be told from it. */
function effectSentences(r: HeadlineInput): string[] {
  const score = r.analysis.metrics.find((m) => m.metric === "score")!;
  const [repo, mcp] = [r.scenarios.repository, r.scenarios.mcp];
  const means = `${repo} ${num(r.outcomes[repo]?.meanScore, "points")}, ${mcp} ${num(r.outcomes[mcp]?.meanScore, "points")}`;
  if (score.meanDiff === null || score.n === 0) return [`No task has a score in both arms (mean score per attempt: ${means}), so there is no effect to report.`];
  const interval = score.bootstrapInterval ? `95% bootstrap interval ${num(score.bootstrapInterval.lower, "points")} to ${num(score.bootstrapInterval.upper, "points")}` : "no interval with one task";
  const p = score.permutation ? `permutation p ${readerP(score.permutation.p)}` : "no test";
  const out = [
    `Score (the primary endpoint, 0 to 1): ${r.analysis.direction} is ${signed(score.meanDiff, "points")} points per task over ${score.n} task${score.n === 1 ? "" : "s"} (${interval}; ${p}); mean score per attempt: ${means}.`,
  ];
  const excludesZero = score.bootstrapInterval !== null && (score.bootstrapInterval.lower > 0 || score.bootstrapInterval.upper < 0);
  const significant = score.permutation !== null && score.permutation.p < 0.05;
  const fromZero =
    excludesZero && significant
      ? "At this size the difference is distinguishable from zero (the interval excludes 0 and p < 0.05)"
      : `At this size the difference is not distinguishable from zero (${score.bootstrapInterval === null ? "one task gives no interval" : excludesZero ? "p ≥ 0.05" : "the interval includes 0"})`;
  const share = score.noise.shareOfDifference;
  const noise =
    score.noise.noiseBand === null
      ? "the noise floor is unknown (no task has two scored repetitions in each arm)"
      : share === null
        ? `the repetitions' own spread alone would produce ±${num(score.noise.noiseBand, "points")}`
        : share >= 1
          ? `the repetitions' own spread alone could produce a difference this large (noise band ±${num(score.noise.noiseBand, "points")})`
          : `it is larger than the repetitions' own spread would produce (noise band ±${num(score.noise.noiseBand, "points")})`;
  out.push(`${fromZero}, and ${noise}.`);
  out.push(plannedSentence(r, score.meanDiff, score.mde80));
  return out;
}

/** The MDE of this design and the tasks a study would need to detect the observed effect. */
function plannedSentence(r: HeadlineInput, meanDiff: number, mde: number | null): string {
  const mdeText = mde === null ? "This design has no MDE (it needs two tasks or more)" : `The smallest difference this design detects at 80% power is ${num(mde, "points")} points`;
  const tau2 = r.analysis.planning.betweenTaskVariance;
  const w = r.analysis.metrics.find((m) => m.metric === "score")!.noise.withinVariance;
  const reps = Math.max(1, ...r.attempts.map((a) => a.repetition));
  if (Math.abs(meanDiff) < 1e-9) return `${mdeText}; no study size detects an observed difference of 0.`;
  if (tau2 === null || w.repository === null || w.mcp === null) return `${mdeText}; the tasks a study would need are unknown (${r.analysis.planning.note}).`;
  const tasks = tasksNeeded(Math.abs(meanDiff), Math.sqrt(tau2 + (w.repository + w.mcp) / reps));
  const need = tasks === null ? `more than ${MAX_PLANNED_TASKS} tasks` : `about ${tasks} tasks`;
  return `${mdeText}; detecting the observed ${num(Math.abs(meanDiff), "points")} would need ${need} at ${reps} repetition${reps === 1 ? "" : "s"} (planning table).`;
}

/** Cost and time per correct answer of each arm. */
function costSentence(r: HeadlineInput): string {
  const arm = (a: "repository" | "mcp") => {
    const b = r.behaviour.arms[a];
    if (b.correct === 0) return `${r.scenarios[a]} no correct answer`;
    return `${r.scenarios[a]} ${readerUsd(b.costPerCorrectUsd!)} USD and ${num(b.wallTimePerCorrectMs! / 1000, "seconds")} s`;
  };
  return `Per correct answer (every attempt's charge and wall time over the correct answers): ${arm("repository")}, ${arm("mcp")}${r.run.testModel ? " (list-price estimates of a fake model: nothing was paid)" : ""}.`;
}

export function headlineOf(r: HeadlineInput): Headline {
  return { caveats: caveatsOf(r), sentences: [...effectSentences(r), costSentence(r)] };
}
