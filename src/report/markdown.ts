import { adjudicatorSentence } from "./adjudicator.ts";
import { evidenceText, REPORT_OUTCOMES, type EgressRow, type InstructionFilesRow, type ReportData } from "./build.ts";
import { analysisBlocks, behaviourBlock, type Block } from "./sections.ts";

/**
 * The Markdown report, and the pieces it shares with the HTML page (src/report/html.ts): the
 * number format, the tables as plain text cells and the fixed sentences, so that both formats
 * show the same figures and words.
 */

/** What the USD figures and token counts are, one sentence each (shared with the HTML page). */
export function spendLines(r: ReportData): string[] {
  const cap = (t: string) => t.charAt(0).toUpperCase() + t.slice(1);
  return [...(r.run.testModel ? [TEST_MODEL_USD] : []), r.spend.usd, cap(r.spend.tokens), ...(r.spend.adjudicationUsd ? [cap(r.spend.adjudicationUsd)] : [])];
}

/** What every USD figure of a run a test model answered is (contract R193). */
export const TEST_MODEL_USD = "A fake model answered: every USD figure here is a list-price estimate of its token counts, and nothing was paid";

/** The run's status as a reader needs it: what happened after adjudication, not only the ledger's state. */
export function runStatusText(r: ReportData): string {
  if (r.run.status !== "awaiting-adjudication") return r.run.status;
  if (r.adjudication === null) return "completed, awaiting adjudication";
  return r.adjudication.status === "complete" ? "completed and adjudicated" : `completed; adjudication ${r.adjudication.status}`;
}

/** The headline in Markdown: the caveats, then the sentences, right under the title. */
function headlineLines(r: ReportData): string[] {
  const h = r.headline;
  const out: string[] = [];
  if (h.caveats.length) out.push("**Not evidence:**", ...h.caveats.map((c) => `- ${c}`), "");
  out.push(...h.sentences, "");
  return out;
}

/** Plain numbers, so that the Markdown, the HTML and the JSON agree character for character. */
export function fmt(n: number | null | undefined, unit?: string): string {
  if (n === null || n === undefined) return "—";
  if (unit === "USD") return n.toFixed(6);
  if (Number.isInteger(n)) return String(n);
  return n.toFixed(unit === "points" ? 3 : 1);
}

const cell = (s: string) => s.replaceAll("|", "\\|").replaceAll("\n", " ");

function table(head: string[], rows: string[][]): string[] {
  return [`| ${head.map(cell).join(" | ")} |`, `| ${head.map(() => "---").join(" | ")} |`, ...rows.map((r) => `| ${r.map(cell).join(" | ")} |`)];
}

function block(b: Block): string[] {
  return [`## ${b.title}`, "", ...b.paragraphs.flatMap((p) => [p, ""]), ...table(b.head, b.rows), "", ...b.methods.flatMap((p) => [p, ""])];
}

/** The refused targets of an egress row, with a note when the proxy kept only part of its record. */
export function egressTargetsText(e: EgressRow): string {
  const text = e.refusedTargets.join(", ") || "—";
  return e.entriesDropped > 0 ? `${text} (${e.entriesDropped} requests beyond the record's bound, counted only)` : text;
}

/** The measured blinding, one sentence: the same words in Markdown and HTML. */
export function blindingLine(b: NonNullable<ReportData["adjudication"]>["blinding"]): string {
  if (b.guesses === 0) return `Blinding: no guess of the arm was recorded${b.missing ? ` (${b.missing} verdicts gave none)` : ""}; blinding is not measured.`;
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const [lo, hi] = b.interval95!;
  const verdict = lo <= 0.5 && 0.5 <= hi ? "indistinguishable from 50% (blind as far as measured)" : "different from 50%: the adjudicator could tell the arms apart";
  return `Blinding: the adjudicator guessed the arm right in ${b.correct} of ${b.guesses} verdicts (${pct(b.accuracy!)}; exact binomial 95% interval ${pct(lo)} to ${pct(hi)}), ${verdict}${b.missing ? `; ${b.missing} verdicts gave no guess` : ""}.`;
}

export const INSTRUCTION_FILES_NOTE =
  "Files the Claude Code CLI takes as instructions, as the attempts' exports held them (paths only). They are part of the corpus: the agent saw them; the adjudicator's export never holds them.";

/** One repository's instruction files in words: the same text in Markdown and HTML. */
export function instructionFilesText(r: InstructionFilesRow): string {
  const files = r.recorded === 0 ? "not recorded" : r.files.length ? r.files.join(", ") : "none";
  return r.unrecorded > 0 ? `${files} (${r.unrecorded} of ${r.recorded + r.unrecorded} attempts have no record of it)` : files;
}

/** A table as plain text cells: the same figures in the Markdown and the HTML. */
export interface TableData {
  head: string[];
  rows: string[][];
}

const withReason = (status: string, reason: string | null) => status + (reason ? `: ${reason}` : "");

/** The CLI version and, where the ledger records it, the calibration profile its guards used. */
const cliText = (r: ReportData) => (r.run.cliVersion ?? "—") + (r.run.profileSha256 ? ` (profile sha256 ${r.run.profileSha256.slice(0, 12)})` : "");

/** The run's header row. */
export function runTable(r: ReportData): TableData {
  return {
    head: ["run", "mode", "model", "status", "CLI", "isolation", "runtime"],
    rows: [[r.run.runId, r.run.mode, r.run.model, withReason(runStatusText(r), r.run.statusReason), cliText(r), r.run.isolation, r.run.runtime ?? "—"]],
  };
}

/** The adjudication's header row. */
export function adjudicationTable(a: NonNullable<ReportData["adjudication"]>): TableData {
  return {
    head: ["adjudication", "adjudicator model", "seed", "spent USD", "cap USD", "human review"],
    rows: [[withReason(a.status, a.statusReason), a.model, String(a.seed), fmt(a.spentUsd, "USD"), fmt(a.capUsd, "USD"), "none"]],
  };
}

export const NO_ADJUDICATION_TEXT = "No adjudication record: correctness is unknown (every outcome is missing).";

/** The pilot's extrapolation in words: the figure and how it was made, or why there is none. */
export function extrapolationText(r: ReportData): string {
  return r.extrapolation.applies ? `${fmt(r.extrapolation.fullRunUsd, "USD")} USD (${r.extrapolation.note})` : r.extrapolation.note;
}

/** The outcome counts of each arm, with the scored attempts and the mean score. */
export function outcomeTable(r: ReportData): TableData {
  return {
    head: ["scenario", ...REPORT_OUTCOMES, "scored", "mean score"],
    rows: [r.scenarios.repository, r.scenarios.mcp].map((s) => {
      const d = r.outcomes[s]!;
      return [s, ...REPORT_OUTCOMES.map((k) => String(d.counts[k])), String(d.scored), fmt(d.meanScore, "points")];
    }),
  };
}

export const SCORES_TEXT = "Scores: correct 1, partial 0.5, incorrect 0, incomplete 0; blocked and missing have no score.";

/** The attempts of each arm per status (every status any arm has, sorted). */
export function statusTable(r: ReportData): TableData {
  const statuses = [...new Set(Object.values(r.statusCounts).flatMap((c) => Object.keys(c)))].sort();
  return { head: ["scenario", ...statuses], rows: [r.scenarios.repository, r.scenarios.mcp].map((s) => [s, ...statuses.map((k) => String(r.statusCounts[s]?.[k] ?? 0))]) };
}

/** The attempt pairs per metric: how many, the mean difference, how many left out. */
export function pairedTable(r: ReportData): TableData {
  return {
    head: ["metric", "pairs", "mean difference", "pairs left out"],
    rows: r.paired.metrics.map((m) => [`${m.label} (${m.unit})`, String(m.n), fmt(m.meanDiff, m.unit), String(m.missing.length)]),
  };
}

export const EGRESS_TEXT = "Requests to the runner's egress proxy per attempt. A refused request does not fail an attempt by itself.";

/** What each attempt asked of the egress proxy. */
export function egressTable(egress: readonly EgressRow[]): TableData {
  return {
    head: ["#", "task", "scenario", "rep", "requests", "allowed", "refused", "refused targets"],
    rows: egress.map((e) => [String(e.index + 1), e.task, e.scenario, String(e.repetition), String(e.requests), String(e.allowed), String(e.refused), egressTargetsText(e)]),
  };
}

/** Each repository's instruction files. */
export function instructionFilesTable(rows: readonly InstructionFilesRow[]): TableData {
  return { head: ["repository", "instruction files"], rows: rows.map((f) => [f.repository, instructionFilesText(f)]) };
}

export const NO_GAPS_TEXT = "None: every planned attempt completed, was adjudicated, and has complete usage.";

const tableLines = (t: TableData) => table(t.head, t.rows);

/** The title, the statements, the run's and the adjudication's rows and the blinding. */
function headerLines(r: ReportData): string[] {
  const out = [`# Study report: ${r.run.runId}`, "", ...headlineLines(r), `> ${r.statement}`, ""];
  if (r.adjudication) out.push(`> ${adjudicatorSentence(r.adjudication).text}`, "");
  out.push(...tableLines(runTable(r)), "");
  if (r.adjudication) out.push(...tableLines(adjudicationTable(r.adjudication)), "", blindingLine(r.adjudication.blinding), "");
  else out.push(NO_ADJUDICATION_TEXT, "");
  return out;
}

/** The totals, each as the Markdown's column name, the HTML's row label and the figure. */
export function totalsCells(t: ReportData["totals"]): Array<[column: string, label: string, value: string]> {
  return [
    ["planned", "planned attempts", fmt(t.planned)],
    ["run", "attempts run", fmt(t.run)],
    ["not run", "attempts not run", fmt(t.notRun)],
    ["input tokens", "input tokens", fmt(t.inputTokens)],
    ["output tokens", "output tokens", fmt(t.outputTokens)],
    ["cache-write tokens", "cache-write tokens", fmt(t.cacheCreationInputTokens)],
    ["cache-read tokens", "cache-read tokens", fmt(t.cacheReadInputTokens)],
    ["tool calls", "tool calls", fmt(t.toolCalls)],
    ["wall time ms", "wall time ms", fmt(t.wallTimeMs)],
    ["usage complete", "usage complete", t.usageComplete ? "yes" : "no"],
    ["answering USD", "answering charged USD", fmt(t.answeringChargedUsd, "USD")],
    ["adjudication USD", "adjudication charged USD", fmt(t.adjudicationChargedUsd, "USD")],
    ["total USD", "total charged USD", fmt(t.totalChargedUsd, "USD")],
  ];
}

/** The totals in one row, the extrapolation and what the figures are. */
function totalsLines(r: ReportData): string[] {
  const cells = totalsCells(r.totals);
  return [
    "## Totals",
    "",
    ...table(
      cells.map(([column]) => column),
      [cells.map(([, , value]) => value)],
    ),
    "",
    `Pilot extrapolation: ${extrapolationText(r)}.`,
    "",
    ...spendLines(r).map((line) => `${line}.`),
    "",
  ];
}

/** The sections after the attempts table, each only when there is something to show: egress and instruction files. */
function corpusLines(r: ReportData): string[] {
  const out: string[] = [];
  if (r.egress) out.push("## Egress (isolation strict)", "", EGRESS_TEXT, "", ...tableLines(egressTable(r.egress)), "");
  if (r.instructionFiles.length) out.push("## Instruction files in the corpus", "", INSTRUCTION_FILES_NOTE, "", ...tableLines(instructionFilesTable(r.instructionFiles)), "");
  return out;
}

/** The gaps, the evidence digest and the closing statement. */
function closingLines(r: ReportData): string[] {
  const out = ["## Gaps", ""];
  if (r.gaps.length === 0) out.push(NO_GAPS_TEXT);
  else out.push(...r.gaps.map((g) => `- ${g}`));
  if (r.evidence) out.push("", "## Evidence", "", evidenceText(r.evidence));
  out.push("", `_${r.statement}_`, "");
  return out;
}

export function renderMarkdown(r: ReportData): string {
  return [
    ...headerLines(r),
    ...totalsLines(r),
    ...["## Correctness per arm", "", ...tableLines(outcomeTable(r)), "", SCORES_TEXT, ""],
    ...["## Attempt statuses", "", ...tableLines(statusTable(r)), ""],
    ...analysisBlocks(r).flatMap(block),
    ...block(behaviourBlock(r)),
    ...[`## Attempt pairs (${r.paired.direction})`, "", `${r.paired.method}.`, "", ...tableLines(pairedTable(r)), ""],
    ...["## Attempts", "", ...table(ATTEMPT_COLUMNS, attemptRows(r)), ""],
    ...corpusLines(r),
    ...closingLines(r),
  ].join("\n");
}

/** The attempts table, the same in every format. */
export const ATTEMPT_COLUMNS = ["#", "task", "scenario", "rep", "status", "outcome", "input", "output", "tool calls", "wall ms", "charged USD", "runtime"];

export function attemptRows(r: ReportData): string[][] {
  return r.attempts.map((a) => [
    a.index === null ? "—" : String(a.index + 1),
    a.task,
    a.scenario,
    String(a.repetition),
    a.status,
    a.outcome,
    fmt(a.inputTokens),
    fmt(a.outputTokens),
    fmt(a.toolCalls),
    fmt(a.wallTimeMs),
    fmt(a.chargedUsd, "USD"),
    a.runtime ?? "—",
  ]);
}
