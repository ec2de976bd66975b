import { adjudicatorSentence } from "./adjudicator.ts";
import { evidenceText, REPORT_OUTCOMES, type EgressRow, type InstructionFilesRow, type ReportData } from "./build.ts";
import { analysisBlocks, behaviourBlock, type Block } from "./sections.ts";

/** Plain numbers, so that the Markdown, the HTML and the JSON agree character for character. */
/** What the USD figures and token counts are, one sentence each (shared with the HTML page). */
export function spendLines(r: ReportData): string[] {
  const cap = (t: string) => t.charAt(0).toUpperCase() + t.slice(1);
  return [r.spend.usd, cap(r.spend.tokens), ...(r.spend.adjudicationUsd ? [cap(r.spend.adjudicationUsd)] : [])];
}

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
  return [`## ${b.title}`, "", ...b.paragraphs.flatMap((p) => [p, ""]), ...table(b.head, b.rows), ""];
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

export function renderMarkdown(r: ReportData): string {
  const out: string[] = [];
  const sc = [r.scenarios.repository, r.scenarios.mcp];
  out.push(`# Study report: ${r.run.runId}`, "");
  out.push(`> ${r.statement}`, "");
  if (r.adjudication) out.push(`> ${adjudicatorSentence(r.adjudication).text}`, "");
  out.push(
    ...table(
      ["run", "mode", "model", "status", "CLI", "isolation", "runtime"],
      [[r.run.runId, r.run.mode, r.run.model, r.run.status + (r.run.statusReason ? `: ${r.run.statusReason}` : ""), r.run.cliVersion ?? "—", r.run.isolation, r.run.runtime ?? "—"]],
    ),
    "",
  );
  if (r.adjudication) {
    const a = r.adjudication;
    out.push(
      ...table(
        ["adjudication", "adjudicator model", "seed", "spent USD", "cap USD", "human review"],
        [[a.status + (a.statusReason ? `: ${a.statusReason}` : ""), a.model, String(a.seed), fmt(a.spentUsd, "USD"), fmt(a.capUsd, "USD"), "none"]],
      ),
      "",
      blindingLine(a.blinding),
      "",
    );
  } else out.push("No adjudication record: correctness is unknown (every outcome is missing).", "");

  out.push("## Totals", "");
  const t = r.totals;
  out.push(
    ...table(
      [
        "planned",
        "run",
        "not run",
        "input tokens",
        "output tokens",
        "cache-write tokens",
        "cache-read tokens",
        "tool calls",
        "wall time ms",
        "usage complete",
        "answering USD",
        "adjudication USD",
        "total USD",
      ],
      [
        [
          fmt(t.planned),
          fmt(t.run),
          fmt(t.notRun),
          fmt(t.inputTokens),
          fmt(t.outputTokens),
          fmt(t.cacheCreationInputTokens),
          fmt(t.cacheReadInputTokens),
          fmt(t.toolCalls),
          fmt(t.wallTimeMs),
          t.usageComplete ? "yes" : "no",
          fmt(t.answeringChargedUsd, "USD"),
          fmt(t.adjudicationChargedUsd, "USD"),
          fmt(t.totalChargedUsd, "USD"),
        ],
      ],
    ),
    "",
    `Pilot extrapolation: ${r.extrapolation.applies ? `${fmt(r.extrapolation.fullRunUsd, "USD")} USD (${r.extrapolation.note})` : r.extrapolation.note}.`,
    "",
    ...spendLines(r).map((line) => `${line}.`),
    "",
  );

  out.push("## Correctness per arm", "");
  out.push(
    ...table(
      ["scenario", ...REPORT_OUTCOMES, "scored", "mean score"],
      sc.map((s) => {
        const d = r.outcomes[s]!;
        return [s, ...REPORT_OUTCOMES.map((k) => String(d.counts[k])), String(d.scored), fmt(d.meanScore, "points")];
      }),
    ),
    "",
    "Scores: correct 1, partial 0.5, incorrect 0, incomplete 0; blocked and missing have no score.",
    "",
  );

  out.push("## Attempt statuses", "");
  const statuses = [...new Set(Object.values(r.statusCounts).flatMap((c) => Object.keys(c)))].sort();
  out.push(
    ...table(
      ["scenario", ...statuses],
      sc.map((s) => [s, ...statuses.map((k) => String(r.statusCounts[s]?.[k] ?? 0))]),
    ),
    "",
  );

  for (const b of analysisBlocks(r)) out.push(...block(b));
  out.push(...block(behaviourBlock(r)));

  out.push(`## Attempt pairs (${r.paired.direction})`, "", `${r.paired.method}.`, "");
  out.push(
    ...table(
      ["metric", "pairs", "mean difference", "pairs left out"],
      r.paired.metrics.map((m) => [`${m.label} (${m.unit})`, String(m.n), fmt(m.meanDiff, m.unit), String(m.missing.length)]),
    ),
    "",
  );

  out.push("## Attempts", "");
  out.push(...table(ATTEMPT_COLUMNS, attemptRows(r)), "");

  if (r.egress) {
    out.push("## Egress (isolation strict)", "", "Requests to the runner's egress proxy per attempt. A refused request does not fail an attempt by itself.", "");
    out.push(
      ...table(
        ["#", "task", "scenario", "rep", "requests", "allowed", "refused", "refused targets"],
        r.egress.map((e) => [String(e.index + 1), e.task, e.scenario, String(e.repetition), String(e.requests), String(e.allowed), String(e.refused), egressTargetsText(e)]),
      ),
      "",
    );
  }

  if (r.instructionFiles.length) {
    out.push("## Instruction files in the corpus", "", INSTRUCTION_FILES_NOTE, "");
    out.push(
      ...table(
        ["repository", "instruction files"],
        r.instructionFiles.map((f) => [f.repository, instructionFilesText(f)]),
      ),
      "",
    );
  }

  out.push("## Gaps", "");
  if (r.gaps.length === 0) out.push("None: every planned attempt completed, was adjudicated, and has complete usage.");
  else out.push(...r.gaps.map((g) => `- ${g}`));
  if (r.evidence) out.push("", "## Evidence", "", evidenceText(r.evidence));
  out.push("", `_${r.statement}_`, "");
  return out.join("\n");
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
