import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { analyse, type AnalysisAttempt, type Analysis } from "../../src/report/analysis.ts";
import { BOOTSTRAP_RESAMPLES, clusterBootstrap, DEFAULT_BOOTSTRAP_SEED, midranks, signFlipTest, wilcoxonSignedRank } from "../../src/report/stats.ts";

// Every figure of the task-level analysis against scipy/numpy values computed from the same rows
// by scripts/stats-reference.py (no code shared with src/report). Each reference file records the
// command that produced it; regenerate with that command after changing the fixture data.

interface Reference {
  command: string;
  metrics: Record<
    string,
    {
      tasks: string[];
      diffs: number[];
      n: number;
      meanDiff: number | null;
      withinVariance: { repository: number | null; mcp: number | null };
      sdDiff?: number;
      tLower?: number;
      tUpper?: number;
      mde80?: number;
      permutationP?: number;
      noiseBand?: number;
      shareOfDifference?: number | null;
      bootstrap?: { values: number[]; probabilities: number[] };
    }
  >;
  mcnemar: { pairs: number; onlyRepository: number; onlyMcp: number; p: number };
  sign: { positive: number; negative: number; p: number };
  wilcoxon: { n: number; wPlus: number; p: number | null };
  disagreement: Record<"repository" | "mcp", { pairs: number; disagreeing: number; rate: number | null }>;
  planning?: { tau2: number; effects: Array<{ effect: number; tasks: Array<number | null> }> };
}

const load = <T>(name: string) => JSON.parse(readFileSync(new URL(`../fixtures/stats/${name}`, import.meta.url), "utf8")) as T;

/** Equal to 1e-9, relative for large figures (token counts, milliseconds). */
function close(actual: number | null | undefined, expected: number | null | undefined, what: string) {
  if (expected === null || expected === undefined) {
    expect(actual ?? null, what).toBeNull();
    return;
  }
  expect(actual, what).not.toBeNull();
  expect(Math.abs(actual! - expected), `${what}: ${actual} vs scipy ${expected}`).toBeLessThanOrEqual(1e-9 * Math.max(1, Math.abs(expected)));
}

/**
 * The bootstrap endpoint against the exact bootstrap distribution: a percentile from B resamples
 * has a level whose Monte Carlo sd is sqrt(q(1−q)/B); the endpoint must sit where the exact CDF
 * crosses q within 4 such sd (the discrete distribution's jump included).
 */
function checkEndpoint(x: number, q: number, exact: { values: number[]; probabilities: number[] }, what: string) {
  const tol = 4 * Math.sqrt((q * (1 - q)) / BOOTSTRAP_RESAMPLES);
  let below = 0; // P(X < x)
  let atOrBelow = 0; // P(X ≤ x)
  exact.values.forEach((v, i) => {
    if (v < x - 1e-9) below += exact.probabilities[i]!;
    if (v <= x + 1e-9) atOrBelow += exact.probabilities[i]!;
  });
  expect(below, `${what}: P(X < ${x}) = ${below}`).toBeLessThanOrEqual(q + tol);
  expect(atOrBelow, `${what}: P(X <= ${x}) = ${atOrBelow}`).toBeGreaterThanOrEqual(q - tol);
}

function compare(a: Analysis, ref: Reference) {
  for (const m of a.metrics) {
    const r = ref.metrics[m.metric]!;
    expect(
      m.tasks.map((t) => t.task),
      m.metric,
    ).toEqual(r.tasks);
    for (const [i, t] of m.tasks.entries()) close(t.diff, r.diffs[i], `${m.metric} diff of ${t.task}`);
    expect(m.n).toBe(r.n);
    close(m.meanDiff, r.meanDiff, `${m.metric} mean difference`);
    close(m.sdDiff, r.sdDiff, `${m.metric} sd`);
    close(m.tInterval?.lower, r.tLower, `${m.metric} t lower`);
    close(m.tInterval?.upper, r.tUpper, `${m.metric} t upper`);
    close(m.mde80, r.mde80, `${m.metric} MDE`);
    close(m.permutation?.p, r.permutationP, `${m.metric} permutation p`);
    expect(m.permutation?.exact).toBe(true);
    close(m.noise.withinVariance.repository, r.withinVariance.repository, `${m.metric} within variance repository`);
    close(m.noise.withinVariance.mcp, r.withinVariance.mcp, `${m.metric} within variance mcp`);
    close(m.noise.noiseBand, r.noiseBand, `${m.metric} noise band`);
    close(m.noise.shareOfDifference, r.shareOfDifference, `${m.metric} noise share`);
    if (r.bootstrap) {
      checkEndpoint(m.bootstrapInterval!.lower, 0.025, r.bootstrap, `${m.metric} bootstrap lower`);
      checkEndpoint(m.bootstrapInterval!.upper, 0.975, r.bootstrap, `${m.metric} bootstrap upper`);
    }
  }
  const o = a.outcomes;
  expect({ pairs: o.mcnemar.pairs, onlyRepository: o.mcnemar.onlyRepository, onlyMcp: o.mcnemar.onlyMcp }).toEqual({
    pairs: ref.mcnemar.pairs,
    onlyRepository: ref.mcnemar.onlyRepository,
    onlyMcp: ref.mcnemar.onlyMcp,
  });
  close(o.mcnemar.p, ref.mcnemar.p, "McNemar p");
  expect({ positive: o.sign.positive, negative: o.sign.negative }).toEqual({ positive: ref.sign.positive, negative: ref.sign.negative });
  close(o.sign.p, ref.sign.p, "sign test p");
  expect(o.wilcoxon.n).toBe(ref.wilcoxon.n);
  close(o.wilcoxon.wPlus, ref.wilcoxon.wPlus, "Wilcoxon W+");
  close(o.wilcoxon.p, ref.wilcoxon.p, "Wilcoxon p");
  for (const arm of ["repository", "mcp"] as const) {
    expect({ pairs: o.disagreement[arm].pairs, disagreeing: o.disagreement[arm].disagreeing }).toEqual({ pairs: ref.disagreement[arm].pairs, disagreeing: ref.disagreement[arm].disagreeing });
    close(o.disagreement[arm].rate, ref.disagreement[arm].rate, `${arm} disagreement`);
  }
  close(a.planning.betweenTaskVariance, ref.planning?.tau2, "τ²");
  expect(a.planning.effects.map((e) => ({ effect: e.effect, tasks: e.byRepetitions.map((r) => r.tasks) }))).toEqual(ref.planning?.effects);
}

for (const name of ["demo", "synthetic"]) {
  describe(`the task-level analysis of the ${name} attempts equals scipy's`, () => {
    const { attempts } = load<{ attempts: AnalysisAttempt[] }>(`${name}-attempts.json`);
    const ref = load<Reference>(`${name}-reference.json`);
    it(`matches every figure to 1e-9 (${ref.command})`, () => {
      compare(analyse(attempts, { seed: DEFAULT_BOOTSTRAP_SEED, direction: "doc-bridge minus repository-only" }), ref);
    });
  });
}

describe("the comparison can fail", () => {
  it("a changed score is caught", () => {
    const { attempts } = load<{ attempts: AnalysisAttempt[] }>("synthetic-attempts.json");
    const edited = structuredClone(attempts);
    const i = edited.findIndex((a) => a.score === 0);
    edited[i] = { ...edited[i]!, score: 1, outcome: "correct" };
    expect(() => compare(analyse(edited, { seed: DEFAULT_BOOTSTRAP_SEED, direction: "" }), load<Reference>("synthetic-reference.json"))).toThrow();
  });
});

describe("the exact tests by hand", () => {
  it("sign-flip p counts both tails over all 2^n patterns", () => {
    // |mean| ≥ 2.5 for [1,2,3,4]: the all-plus and all-minus patterns only.
    expect(signFlipTest([1, 2, 3, 4], 1)).toEqual({ p: 2 / 16, exact: true });
  });
  it("Wilcoxon drops zeros and shares ranks between ties", () => {
    expect(midranks([3, 1, 3, 2])).toEqual([3.5, 1, 3.5, 2]);
    expect(wilcoxonSignedRank([0, 1, -1, 2], 1)).toMatchObject({ n: 3, zero: 1, wPlus: 1.5 + 3 });
  });
  it("the bootstrap is seeded: the same seed gives the same interval, another seed another", () => {
    const d = [0.13, -0.31, 0.52, 0.27, 0.94, -0.18, 0.41, 0.05];
    expect(clusterBootstrap(d, 5)).toEqual(clusterBootstrap(d, 5));
    expect(clusterBootstrap(d, 5)).not.toEqual(clusterBootstrap(d, 6));
    expect(clusterBootstrap([1], 5)).toBeNull();
  });
});
