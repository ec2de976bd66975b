import type { ReportData } from "./build.ts";
import type { TaskMetric } from "./analysis.ts";

/**
 * The analysis and behaviour sections as plain text blocks, rendered by both the Markdown and the
 * HTML writer, so the two show the same figures character for character.
 */

export interface Block {
  /** Anchor id (HTML) and link target of the private viewer. */
  id: string;
  title: string;
  /** What the figures say, shown before the table. */
  paragraphs: string[];
  /** How the figures were computed: shown after the table (folded in the HTML), so the figures come first. */
  methods: string[];
  head: string[];
  rows: string[][];
}

export { num } from "./numbers.ts";
import { num } from "./numbers.ts";
import { callsOf } from "./behaviour.ts";

const interval = (i: { lower: number; upper: number } | null, unit: string) => (i ? `${num(i.lower, unit)} to ${num(i.upper, unit)}` : "—");

export function pValueText(p: { p: number; exact: boolean } | null): string {
  if (!p) return "—";
  return p.exact ? num(p.p, "p") : `${num(p.p, "p")} (Monte Carlo)`;
}

function metricRow(m: TaskMetric): string[] {
  return [
    `${m.label} (${m.unit})`,
    String(m.n),
    num(m.meanDiff, m.unit),
    interval(m.bootstrapInterval, m.unit),
    interval(m.tInterval, m.unit),
    pValueText(m.permutation),
    num(m.mde80, m.unit),
    String(m.leftOut.length),
  ];
}

export function analysisBlocks(r: ReportData): Block[] {
  const a = r.analysis;
  const [repo, mcp] = [r.scenarios.repository, r.scenarios.mcp];
  const o = a.outcomes;
  const score = a.metrics.find((m) => m.metric === "score")!;
  return [
    {
      id: "task-level",
      title: `Task-level differences (${a.direction})`,
      paragraphs: [],
      methods: [
        `Unit of analysis: the ${a.unit}. Aggregation: ${a.methods.aggregation}.`,
        `Bootstrap: ${a.methods.bootstrap}. Seed ${a.seed}.`,
        `t interval: ${a.methods.tInterval}.`,
        `Permutation test: ${a.methods.permutation}.`,
        `Minimum detectable effect: ${a.methods.mde}.`,
        "No correction for the several metrics: each p-value is read on its own.",
      ],
      head: ["metric", "tasks", "mean difference", "95% bootstrap interval", "95% t interval", "permutation p", "MDE (80% power)", "tasks left out"],
      rows: a.metrics.map(metricRow),
    },
    {
      id: "outcome-tests",
      title: "Outcome tests",
      paragraphs: [],
      methods: [`McNemar: ${a.methods.mcnemar}.`, `Sign test: ${a.methods.sign}.`, `Wilcoxon: ${a.methods.wilcoxon}.`],
      head: ["test", "over", "counts", "statistic", "p"],
      rows: [
        [
          "exact McNemar",
          `${o.mcnemar.pairs} attempt pairs`,
          `both correct ${o.mcnemar.bothCorrect}, only ${repo} ${o.mcnemar.onlyRepository}, only ${mcp} ${o.mcnemar.onlyMcp}, neither ${o.mcnemar.neitherCorrect}`,
          `discordant ${o.mcnemar.onlyRepository + o.mcnemar.onlyMcp}`,
          o.mcnemar.p === null ? "— (no attempt pair has a score in both arms)" : num(o.mcnemar.p, "p"),
        ],
        [
          "exact sign test",
          `${score.n} tasks`,
          `positive ${o.sign.positive}, negative ${o.sign.negative}, zero ${o.sign.zero}`,
          `positive ${o.sign.positive}`,
          o.sign.p === null ? "— (no task has a score in both arms)" : num(o.sign.p, "p"),
        ],
        [
          "Wilcoxon signed-rank (exact)",
          `${score.n} tasks`,
          `ranked ${o.wilcoxon.n}, zero ${o.wilcoxon.zero}`,
          `W+ ${num(o.wilcoxon.wPlus)}`,
          o.wilcoxon.p === null ? "— (every difference is zero)" : pValueText({ p: o.wilcoxon.p, exact: o.wilcoxon.exact }),
        ],
      ],
    },
    {
      id: "noise-floor",
      title: "Noise floor",
      methods: [`Noise floor: ${a.methods.noiseFloor}.`],
      paragraphs: [
        `Repetitions disagreeing on correct vs not correct: ${repo} ${num(o.disagreement.repository.rate, "rate")} (${o.disagreement.repository.disagreeing} of ${o.disagreement.repository.pairs} pairs of repetitions), ${mcp} ${num(o.disagreement.mcp.rate, "rate")} (${o.disagreement.mcp.disagreeing} of ${o.disagreement.mcp.pairs}).`,
      ],
      head: ["metric", `within-task variance ${repo}`, `within-task variance ${mcp}`, "noise band (±)", "mean difference", "share the noise could produce"],
      rows: a.metrics.map((m) => [
        `${m.label} (${m.unit})`,
        num(m.noise.withinVariance.repository, "variance"),
        num(m.noise.withinVariance.mcp, "variance"),
        num(m.noise.noiseBand, m.unit),
        num(m.meanDiff, m.unit),
        num(m.noise.shareOfDifference, "rate"),
      ]),
    },
    {
      id: "planning",
      title: "Detectable effect and planning",
      paragraphs: [
        `With this design (${score.n} tasks) the smallest score difference detectable at 80% power is ${num(score.mde80, "points")} points.`,
        `${a.planning.note[0]!.toUpperCase()}${a.planning.note.slice(1)}. Between-task variance τ² of the score difference: ${num(a.planning.betweenTaskVariance, "variance")}.`,
      ],
      methods: [`Planning: ${a.methods.planning}.`],
      head: ["score effect", ...a.planning.effects[0]!.byRepetitions.map((p) => `tasks at ${p.repetitions} repetition${p.repetitions === 1 ? "" : "s"}`)],
      rows: a.planning.effects.map((e) => [num(e.effect, "points"), ...e.byRepetitions.map((p) => (p.tasks === null ? "—" : String(p.tasks)))]),
    },
  ];
}

export function behaviourBlock(r: ReportData): Block {
  const b = r.behaviour;
  const [repo, mcp] = [b.arms.repository, b.arms.mcp];
  const row = (label: string, f: (x: typeof repo) => string) => [label, f(repo), f(mcp)];
  return {
    id: "behaviour",
    title: "Behaviour side by side",
    methods: [],
    paragraphs: [
      `Over the settled attempts of each arm. Cache-hit rate: cache-read tokens over prompt tokens (input + cache write + cache read). Cost per correct answer: every charge of the arm, failed attempts included, over its correct answers. Doc-bridge calls are tools named ${b.docBridgePrefix}*. Tool inputs are not shown here (they are in the private pair viewer).`,
    ],
    head: ["", r.scenarios.repository, r.scenarios.mcp],
    rows: [
      row("attempts", (x) => String(x.attempts)),
      row("correct", (x) => String(x.correct)),
      row("tool calls", (x) => String(x.toolCalls)),
      row("doc-bridge calls per attempt", (x) => num(x.docBridgeCallsPerAttempt, "rate")),
      row("mean turns", (x) => num(x.meanTurns)),
      row("cache-hit rate", (x) => num(x.cacheHitRate, "rate")),
      row("mean wall time ms", (x) => num(x.meanWallTimeMs)),
      row("charged USD", (x) => num(x.chargedUsd, "USD")),
      row("cost per correct answer USD", (x) => num(x.costPerCorrectUsd, "USD")),
      ...b.tools.map((t) => row(`calls to ${t}`, (x) => String(callsOf(x, t)))),
    ],
  };
}
