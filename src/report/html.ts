import { adjudicatorSentence } from "./adjudicator.ts";
import { evidenceText, REPORT_OUTCOMES, type PairedMetric, type ReportData, type ReportOutcome } from "./build.ts";
import {
  adjudicationTable,
  ATTEMPT_COLUMNS,
  attemptRows,
  blindingLine,
  EGRESS_TEXT,
  egressTable,
  extrapolationText,
  fmt,
  INSTRUCTION_FILES_NOTE,
  instructionFilesTable,
  NO_ADJUDICATION_TEXT,
  NO_GAPS_TEXT,
  outcomeTable,
  pairedTable,
  runTable,
  SCORES_TEXT,
  spendLines,
  statusTable,
  type TableData,
  totalsCells,
} from "./markdown.ts";
import { analysisBlocks, behaviourBlock, num, type Block } from "./sections.ts";
import { callsOf, type ArmBehaviour } from "./behaviour.ts";

/**
 * One self-contained HTML page: inline CSS and inline SVG, no script, no external resource,
 * so it opens offline and in a pull request artifact. Colours are the Okabe-Ito palette
 * (distinguishable with the common colour-vision deficiencies).
 */

export const ARM_COLOURS = { repository: "#0072B2", mcp: "#E69F00" } as const;
export const OUTCOME_COLOURS: Record<ReportOutcome, string> = {
  correct: "#009E73",
  partial: "#56B4E9",
  incorrect: "#D55E00",
  incomplete: "#CC79A7",
  blocked: "#555555",
  missing: "#BBBBBB",
};

const esc = (s: string) => s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll('"', "&quot;");

function niceMax(v: number): number {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  // Multiples whose quarters are round numbers, for the four tick intervals.
  for (const m of [1, 2, 4, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** A paired dot plot: one row per task, one line per repetition from the repository-only to the doc-bridge value. */
export function dotPlot(m: PairedMetric, r: ReportData, tasks: readonly string[]): string {
  const left = 190;
  const right = 30;
  const width = 760;
  const plotW = width - left - right;
  const repsOf = (task: string) => [...new Set([...m.pairs, ...m.missing].filter((p) => p.task === task).map((p) => p.repetition))].sort((a, b) => a - b);
  const rowH = (task: string) => Math.max(1, repsOf(task).length) * 16 + 10;
  const top = 34;
  const height = top + tasks.reduce((s, t) => s + rowH(t), 0) + 34;
  const max = niceMax(Math.max(0, ...m.pairs.flatMap((p) => [p.repository, p.mcp])));
  const x = (v: number) => left + (v / max) * plotW;
  const parts: string[] = [];
  parts.push(`<svg class="chart dotplot" role="img" aria-label="${esc(`${m.label}: paired values per task`)}" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`);
  parts.push(`<title>${esc(`${m.label} per task and repetition, ${r.scenarios.repository} and ${r.scenarios.mcp}`)}</title>`);
  parts.push(`<text x="${left}" y="16" class="ct">${esc(`${m.label} (${m.unit})`)}</text>`);
  parts.push(`<circle cx="${width - 250}" cy="12" r="5" fill="${ARM_COLOURS.repository}"/><text x="${width - 240}" y="16" class="lg">${esc(r.scenarios.repository)}</text>`);
  parts.push(`<circle cx="${width - 120}" cy="12" r="5" fill="${ARM_COLOURS.mcp}"/><text x="${width - 110}" y="16" class="lg">${esc(r.scenarios.mcp)}</text>`);
  let y = top;
  for (const task of tasks) {
    const h = rowH(task);
    parts.push(`<rect x="${left}" y="${y}" width="${plotW}" height="${h - 4}" fill="#F4F4F4"/>`);
    parts.push(`<text x="${left - 8}" y="${y + h / 2 + 2}" text-anchor="end" class="lb">${esc(task)}</text>`);
    repsOf(task).forEach((rep, i) => {
      const cy = y + 11 + i * 16;
      const pair = m.pairs.find((p) => p.task === task && p.repetition === rep);
      if (pair) {
        parts.push(`<line x1="${x(pair.repository).toFixed(1)}" y1="${cy}" x2="${x(pair.mcp).toFixed(1)}" y2="${cy}" stroke="#777777" stroke-width="1.5"/>`);
        parts.push(
          `<circle cx="${x(pair.repository).toFixed(1)}" cy="${cy}" r="5" fill="${ARM_COLOURS.repository}"><title>${esc(`${task} rep ${rep} ${r.scenarios.repository}: ${fmt(pair.repository, m.unit)}`)}</title></circle>`,
        );
        parts.push(
          `<circle cx="${x(pair.mcp).toFixed(1)}" cy="${cy}" r="5" fill="${ARM_COLOURS.mcp}"><title>${esc(`${task} rep ${rep} ${r.scenarios.mcp}: ${fmt(pair.mcp, m.unit)}`)}</title></circle>`,
        );
      } else {
        const why = m.missing.find((p) => p.task === task && p.repetition === rep)?.why ?? "no pair";
        parts.push(`<text x="${left + 6}" y="${cy + 4}" class="gap">${esc(`rep ${rep}: no pair (${why})`)}</text>`);
      }
    });
    y += h;
  }
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    parts.push(`<line x1="${x(v)}" y1="${top}" x2="${x(v)}" y2="${y}" stroke="#CCCCCC" stroke-dasharray="2,3"/>`);
    parts.push(`<text x="${x(v)}" y="${y + 14}" text-anchor="middle" class="tk">${esc(fmt(v, m.unit === "USD" ? "USD" : undefined))}</text>`);
  }
  parts.push("</svg>");
  return parts.join("");
}

/** The outcome distribution per arm: one stacked bar per scenario. */
export function outcomeChart(r: ReportData): string {
  const left = 190;
  const width = 760;
  const plotW = width - left - 30;
  const scenarios = [r.scenarios.repository, r.scenarios.mcp];
  const height = 40 + scenarios.length * 40 + 40;
  const parts: string[] = [];
  parts.push(`<svg class="chart outcomes" role="img" aria-label="outcome distribution per arm" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`);
  parts.push(`<title>Outcome distribution per arm</title>`);
  parts.push(`<text x="${left}" y="16" class="ct">outcomes per arm (attempts)</text>`);
  scenarios.forEach((s, i) => {
    const y = 30 + i * 40;
    const d = r.outcomes[s]!;
    const total = REPORT_OUTCOMES.reduce((n, k) => n + d.counts[k], 0);
    parts.push(`<text x="${left - 8}" y="${y + 18}" text-anchor="end" class="lb">${esc(s)}</text>`);
    let x = left;
    for (const k of REPORT_OUTCOMES) {
      const n = d.counts[k];
      if (n === 0 || total === 0) continue;
      const w = (n / total) * plotW;
      parts.push(`<rect x="${x.toFixed(1)}" y="${y}" width="${w.toFixed(1)}" height="26" fill="${OUTCOME_COLOURS[k]}" stroke="#FFFFFF"><title>${esc(`${s}: ${n} ${k}`)}</title></rect>`);
      if (w > 22) parts.push(`<text x="${(x + w / 2).toFixed(1)}" y="${y + 17}" text-anchor="middle" class="bar">${n}</text>`);
      x += w;
    }
    if (total === 0) parts.push(`<text x="${left + 6}" y="${y + 17}" class="gap">no attempt</text>`);
  });
  const ly = 30 + scenarios.length * 40 + 14;
  REPORT_OUTCOMES.forEach((k, i) => {
    const lx = left + i * 92;
    parts.push(`<rect x="${lx}" y="${ly}" width="12" height="12" fill="${OUTCOME_COLOURS[k]}"/><text x="${lx + 16}" y="${ly + 11}" class="lg">${k}</text>`);
  });
  parts.push("</svg>");
  return parts.join("");
}

/** Grouped horizontal bars: one group per label, one bar per arm, scaled to the largest value of the chart. */
export function armBars(r: ReportData, cls: string, title: string, groups: Array<{ label: string; values: [number | null, number | null]; text: [string, string] }>): string {
  const left = 230;
  const width = 760;
  const plotW = width - left - 90;
  const groupH = 40;
  const height = 30 + groups.length * groupH + 10;
  const max = Math.max(0, ...groups.flatMap((g) => g.values.map((v) => v ?? 0)));
  const parts: string[] = [];
  parts.push(`<svg class="chart ${cls}" role="img" aria-label="${esc(title)}" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`);
  parts.push(`<title>${esc(title)}</title><text x="${left}" y="16" class="ct">${esc(title)}</text>`);
  parts.push(`<rect x="${width - 250}" y="6" width="10" height="10" fill="${ARM_COLOURS.repository}"/><text x="${width - 236}" y="16" class="lg">${esc(r.scenarios.repository)}</text>`);
  parts.push(`<rect x="${width - 120}" y="6" width="10" height="10" fill="${ARM_COLOURS.mcp}"/><text x="${width - 106}" y="16" class="lg">${esc(r.scenarios.mcp)}</text>`);
  groups.forEach((g, i) => {
    const y = 28 + i * groupH;
    parts.push(`<text x="${left - 8}" y="${y + 20}" text-anchor="end" class="lb">${esc(g.label)}</text>`);
    (["repository", "mcp"] as const).forEach((arm, k) => {
      const v = g.values[k] ?? null;
      const by = y + 2 + k * 17;
      if (v === null) {
        parts.push(`<text x="${left + 4}" y="${by + 12}" class="gap">—</text>`);
        return;
      }
      const w = max > 0 ? Math.max(1, (v / max) * plotW) : 1;
      parts.push(`<rect x="${left}" y="${by}" width="${w.toFixed(1)}" height="15" fill="${ARM_COLOURS[arm]}"><title>${esc(`${g.label}, ${r.scenarios[arm]}: ${g.text[k] ?? ""}`)}</title></rect>`);
      parts.push(`<text x="${(left + w + 4).toFixed(1)}" y="${by + 12}" class="tk">${esc(g.text[k] ?? "")}</text>`);
    });
  });
  parts.push("</svg>");
  return parts.join("");
}

/** The behaviour charts: the tool mix, then each per-attempt figure on its own scale. */
export function behaviourCharts(r: ReportData): string {
  const b = r.behaviour;
  const pair = <T>(f: (x: ArmBehaviour) => T): [T, T] => [f(b.arms.repository), f(b.arms.mcp)];
  const mix = armBars(
    r,
    "toolmix",
    "tool mix (calls per tool name)",
    b.tools.map((t) => ({ label: t, values: pair((x) => callsOf(x, t)), text: pair((x) => String(callsOf(x, t))) })),
  );
  const scalar = (label: string, f: (x: ArmBehaviour) => number | null, unit?: string) => armBars(r, "behaviour", label, [{ label, values: pair(f), text: pair((x) => num(f(x), unit)) }]);
  return [
    mix,
    scalar("doc-bridge calls per attempt", (x) => x.docBridgeCallsPerAttempt, "rate"),
    scalar("mean turns", (x) => x.meanTurns),
    scalar("cache-hit rate", (x) => x.cacheHitRate, "rate"),
    scalar("mean wall time ms", (x) => x.meanWallTimeMs),
    scalar("cost per correct answer USD", (x) => x.costPerCorrectUsd, "USD"),
  ].join("");
}

function blockHtml(b: Block, extra = ""): string {
  const methods = b.methods.length ? `<details class="method"><summary>Method</summary>${b.methods.map((p) => `<p>${esc(p)}</p>`).join("")}</details>` : "";
  return `<h2 id="${esc(b.id)}">${esc(b.title)}</h2>${extra}${b.paragraphs.map((p) => `<p>${esc(p)}</p>`).join("")}${table(b.head, b.rows)}${methods}`;
}

function table(head: string[], rows: string[][]): string {
  return `<table><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rows.map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join("")}</tr>`).join("")}</tbody></table>`;
}

const PLOTTED = ["inputTokens", "outputTokens", "toolCalls", "wallTimeMs"] as const;

const tableHtml = (t: TableData) => table(t.head, t.rows);

/** The headline: the caveats in red, then what the study found (contract R193). */
function headlineHtml(r: ReportData): string {
  const h = r.headline;
  const caveats = h.caveats.length ? `<div class="caveats"><strong>Not evidence:</strong><ul>${h.caveats.map((c) => `<li>${esc(c)}</li>`).join("")}</ul></div>` : "";
  return `<section id="headline">${caveats}<p class="headline">${h.sentences.map(esc).join(" ")}</p></section>`;
}

/** The title, the headline, the statements, the run's and the adjudication's rows and the blinding. */
function headerHtml(r: ReportData): string[] {
  const body = [`<h1>Study report: ${esc(r.run.runId)}</h1>`, headlineHtml(r)];
  body.push(`<p class="statement">${esc(r.statement)}</p>`);
  if (r.adjudication) {
    const s = adjudicatorSentence(r.adjudication);
    body.push(`<p${s.departure ? ' class="warn"' : ""}>${esc(s.text)}</p>`);
  }
  body.push(tableHtml(runTable(r)));
  if (r.adjudication) body.push(tableHtml(adjudicationTable(r.adjudication)), `<p class="blinding">${esc(blindingLine(r.adjudication.blinding))}</p>`);
  else body.push(`<p class="warn">${esc(NO_ADJUDICATION_TEXT)}</p>`);
  return body;
}

/** The totals, one per row, with the extrapolation, and what the figures are. */
function totalsHtml(r: ReportData): string[] {
  const rows: Array<[string, string]> = [...totalsCells(r.totals).map(([, label, value]): [string, string] => [label, value]), ["pilot extrapolation", extrapolationText(r)]];
  return [
    `<h2>Totals</h2>`,
    `<table id="totals"><tbody>${rows.map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(v)}</td></tr>`).join("")}</tbody></table>`,
    `<p class="spend-label" id="spend-label">${spendLines(r)
      .map((line) => esc(`${line}.`))
      .join("<br>")}</p>`,
  ];
}

/** The attempt pairs: a dot plot per plotted metric, the method and the table of all metrics. */
function pairsHtml(r: ReportData): string[] {
  const tasks = [...new Set(r.attempts.map((a) => a.task))];
  return [
    `<h2 id="pairs">Attempt pairs (${esc(r.paired.direction)})</h2>`,
    ...PLOTTED.map((key) => dotPlot(r.paired.metrics.find((m) => m.metric === key)!, r, tasks)),
    `<p>${esc(r.paired.method)}.</p>`,
    tableHtml(pairedTable(r)),
  ];
}

/** The sections after the attempts table, each only when there is something to show: egress and instruction files. */
function corpusHtml(r: ReportData): string[] {
  const body: string[] = [];
  if (r.egress) body.push(`<h2>Egress (isolation strict)</h2>`, `<p>${esc(EGRESS_TEXT)}</p>`, tableHtml(egressTable(r.egress)));
  if (r.instructionFiles.length) body.push(`<h2>Instruction files in the corpus</h2>`, `<p>${esc(INSTRUCTION_FILES_NOTE)}</p>`, tableHtml(instructionFilesTable(r.instructionFiles)));
  return body;
}

/** The gaps, the evidence digest and the closing statement. */
function closingHtml(r: ReportData): string[] {
  const body = [`<h2>Gaps</h2>`, r.gaps.length ? `<ul class="gaps">${r.gaps.map((g) => `<li>${esc(g)}</li>`).join("")}</ul>` : `<p>${esc(NO_GAPS_TEXT)}</p>`];
  if (r.evidence) body.push(`<h2>Evidence</h2>`, `<p class="evidence">${esc(evidenceText(r.evidence))}</p>`);
  body.push(`<p class="statement">${esc(r.statement)}</p>`);
  return body;
}

/** The headline's background: the box a reader sees first. */
export const HEADLINE_BACKGROUND = "#FFF8E5";
/** The colour of the caveats that make a run no evidence. */
export const CAVEAT_RED = "#C00000";

const PAGE_STYLE = `body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;max-width:1000px}
table{border-collapse:collapse;margin:8px 0 16px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}
th{background:#f0f0f0}.statement{font-weight:600}
#headline{border:2px solid #333;padding:8px 14px;margin:8px 0 16px;background:${HEADLINE_BACKGROUND}}.headline{font-size:16px;line-height:1.45}
.caveats{color:${CAVEAT_RED};font-weight:600}.caveats ul{margin:4px 0 8px;padding-left:22px}details.method summary{cursor:pointer;color:#555}.warn{color:#8a4b00;font-weight:600}.gaps li{margin:2px 0}
svg.chart{display:block;margin:8px 0 16px}svg .ct{font-size:13px;font-weight:600}svg .lb,svg .lg{font-size:12px}
svg .tk{font-size:10px;fill:#555}svg .gap{font-size:11px;fill:#8a4b00}svg .bar{font-size:12px;fill:#fff;font-weight:600}`;

export function renderHtml(r: ReportData): string {
  const body = [
    ...headerHtml(r),
    ...totalsHtml(r),
    `<h2>Correctness per arm</h2>`,
    outcomeChart(r),
    tableHtml(outcomeTable(r)),
    `<p>${esc(SCORES_TEXT)}</p>`,
    ...analysisBlocks(r).map((b) => blockHtml(b)),
    blockHtml(behaviourBlock(r), behaviourCharts(r)),
    ...pairsHtml(r),
    `<h2>Attempt statuses</h2>`,
    tableHtml(statusTable(r)),
    table(ATTEMPT_COLUMNS, attemptRows(r)),
    ...corpusHtml(r),
    ...closingHtml(r),
  ];
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(`Study report ${r.run.runId}`)}</title>
<style>
${PAGE_STYLE}
</style></head>
<body>
${body.join("\n")}
</body></html>
`;
}
