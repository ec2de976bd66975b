import type { AdjudicationRecord, Item } from "../adjudicate/schema.ts";
import type { Ledger, Observation } from "../ledger/schema.ts";
import type { ReportData } from "./build.ts";
import { analysisBlocks, behaviourBlock, num, type Block } from "./sections.ts";

/**
 * The private pair viewer (pure): one self-contained page that shows each task × repetition's
 * two attempts side by side, with what the public report leaves out: the tool calls in order with
 * their inputs, the answer, the adjudicator's verdict and reason. It is as private as the ledger
 * (answers, tool inputs): written beside it with mode 600, never published. Its filters (wins,
 * losses, ties, one task) are a small inline script driven by the URL fragment, so every figure
 * of the report section at the top links to exactly its pairs.
 */

export interface ToolCallView {
  name: string;
  /** The tool's input as JSON, cut to INPUT_SHOWN characters. */
  input: string;
}

const INPUT_SHOWN = 400;

/** The tool_use blocks of the assistant events, in transcript order, each id once. */
export function toolCallsOf(lines: readonly string[]): ToolCallView[] {
  const calls: ToolCallView[] = [];
  const seen = new Set<string>();
  for (const line of lines) {
    let event: unknown;
    try {
      event = JSON.parse(line);
    } catch {
      continue;
    }
    const e = event as { type?: unknown; message?: { content?: unknown } };
    if (e?.type !== "assistant" || !Array.isArray(e.message?.content)) continue;
    for (const block of e.message.content as Array<{ type?: unknown; id?: unknown; name?: unknown; input?: unknown }>) {
      if (block?.type !== "tool_use" || typeof block.name !== "string") continue;
      const id = typeof block.id === "string" ? block.id : `#${calls.length}`;
      if (seen.has(id)) continue;
      seen.add(id);
      const input = JSON.stringify(block.input ?? null);
      calls.push({ name: block.name, input: input.length > INPUT_SHOWN ? `${input.slice(0, INPUT_SHOWN)}…` : input });
    }
  }
  return calls;
}

export type PairResult = "win" | "loss" | "tie" | "unscored";

export interface ViewerInput {
  report: ReportData;
  ledger: Ledger;
  record: AdjudicationRecord | null;
  /** Observation index -> transcript lines; absent when the transcript was not kept. */
  transcripts: ReadonlyMap<number, readonly string[]>;
}

const esc = (s: string) => s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll('"', "&quot;");

export function pairId(task: string, repetition: number): string {
  return `pair-${task.replace(/[^A-Za-z0-9_-]/g, "_")}-r${repetition}`;
}

/** A win is a higher doc-bridge score for the pair, a loss a lower one. */
export function pairResult(repo: Item | undefined, mcp: Item | undefined): PairResult {
  if (!repo || !mcp || repo.score === null || mcp.score === null) return "unscored";
  return mcp.score > repo.score ? "win" : mcp.score < repo.score ? "loss" : "tie";
}

function attemptHtml(o: Observation | undefined, item: Item | undefined, lines: readonly string[] | undefined, scenario: string): string {
  if (!o) return `<div class="attempt"><h4>${esc(scenario)}</h4><p class="gap">not run</p></div>`;
  const facts: Array<[string, string]> = [
    ["attempt", String(o.index + 1)],
    ["status", o.status ?? "unsettled"],
    ["outcome", item?.outcome ?? "missing"],
    ["score", num(item?.score ?? null, "points")],
    ["input tokens", num(o.inputTokens)],
    ["output tokens", num(o.outputTokens)],
    ["cache-write tokens", num(o.cacheCreationInputTokens)],
    ["cache-read tokens", num(o.cacheReadInputTokens)],
    ["turns", num(o.numTurns)],
    ["charged USD", num(o.chargedUsd, "USD")],
    ["wall time ms", num(o.wallTimeMs)],
  ];
  const calls = lines ? toolCallsOf(lines) : null;
  const reason = [item?.reason, item?.verdict?.reasons].filter((x): x is string => Boolean(x)).join(" — ");
  return [
    `<div class="attempt" data-index="${o.index}"><h4>${esc(scenario)}</h4>`,
    `<table class="facts"><tbody>${facts.map(([k, v]) => `<tr><th>${esc(k)}</th><td class="f-${esc(k.replaceAll(" ", "-"))}">${esc(v)}</td></tr>`).join("")}</tbody></table>`,
    `<h5>Tool calls in order</h5>`,
    calls === null
      ? `<p class="gap">transcript not kept; counts only: ${esc(JSON.stringify(o.toolCallsByName))}</p>`
      : `<ol class="calls">${calls.map((c) => `<li><b>${esc(c.name)}</b> <code>${esc(c.input)}</code></li>`).join("")}</ol>`,
    `<h5>Answer</h5><pre class="answer">${esc(o.answer ?? "(no answer)")}</pre>`,
    `<h5>Verdict</h5><p class="verdict">${esc(item?.outcome ?? "missing")}${reason ? `: ${esc(reason)}` : ""}</p>`,
    `</div>`,
  ].join("");
}

function linkedBlock(b: Block, rowLink: (row: string[], i: number) => string | null): string {
  const rows = b.rows
    .map((r, i) => {
      const href = rowLink(r, i);
      return `<tr>${r.map((c, k) => `<td>${k === 0 && href ? `<a href="${esc(href)}">${esc(c)}</a>` : esc(c)}</td>`).join("")}</tr>`;
    })
    .join("");
  return `<h3>${esc(b.title)}</h3><table><thead><tr>${b.head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rows}</tbody></table>`;
}

export function renderViewer(input: ViewerInput): string {
  const { report: r, ledger, record } = input;
  const items = new Map((record?.items ?? []).map((i) => [i.observationIndex, i]));
  const keys: Array<{ task: string; repetition: number }> = [];
  const byKey = new Map<string, Partial<Record<"repository" | "mcp", Observation>>>();
  for (const o of ledger.observations) {
    const k = `${o.task}\0${o.repetition}`;
    if (!byKey.has(k)) keys.push({ task: o.task, repetition: o.repetition });
    byKey.set(k, { ...byKey.get(k), [o.arm]: o });
  }
  const counts: Record<PairResult, number> = { win: 0, loss: 0, tie: 0, unscored: 0 };
  const sections = keys.map(({ task, repetition }) => {
    const pair = byKey.get(`${task}\0${repetition}`)!;
    const repo = pair.repository;
    const mcp = pair.mcp;
    const result = pairResult(repo && items.get(repo.index), mcp && items.get(mcp.index));
    counts[result]++;
    return [
      `<section class="pair" id="${pairId(task, repetition)}" data-task="${esc(task)}" data-result="${result}">`,
      `<h3>${esc(task)} · repetition ${repetition} · <span class="result">${result}</span></h3><div class="sides">`,
      attemptHtml(repo, repo && items.get(repo.index), repo && input.transcripts.get(repo.index), r.scenarios.repository),
      attemptHtml(mcp, mcp && items.get(mcp.index), mcp && input.transcripts.get(mcp.index), r.scenarios.mcp),
      `</div></section>`,
    ].join("");
  });

  // Every figure of the report links to its pairs: a task row to that task, a test to its wins/losses.
  const blocks = analysisBlocks(r);
  const taskLevel = blocks.find((b) => b.id === "task-level")!;
  const metricTables = r.analysis.metrics.map(
    (m) =>
      `<h3>${esc(`${m.label} (${m.unit}) per task`)}</h3><table><thead><tr><th>task</th><th>${esc(r.scenarios.repository)}</th><th>${esc(r.scenarios.mcp)}</th><th>difference</th></tr></thead><tbody>${m.tasks
        .map(
          (t) =>
            `<tr><td><a href="#task=${esc(encodeURIComponent(t.task))}">${esc(t.task)}</a></td><td>${esc(num(t.repository, m.unit))}</td><td>${esc(num(t.mcp, m.unit))}</td><td>${esc(num(t.diff, m.unit))}</td></tr>`,
        )
        .join("")}</tbody></table>`,
  );
  const outcomeTests = blocks.find((b) => b.id === "outcome-tests")!;
  const figures = [
    linkedBlock(taskLevel, () => "#filter=all"),
    ...metricTables,
    linkedBlock(outcomeTests, (_row, i) => (i === 0 ? "#filter=win,loss" : "#filter=all")),
    linkedBlock(blocks.find((b) => b.id === "noise-floor")!, () => "#filter=all"),
    linkedBlock(behaviourBlock(r), () => "#filter=all"),
  ];

  const filterLinks = (["all", "win", "loss", "tie", "unscored"] as const)
    .map(
      (f) =>
        `<a class="filter" href="#filter=${f}">${f === "all" ? `all (${keys.length})` : `${f === "win" ? "wins" : f === "loss" ? "losses" : f === "tie" ? "ties" : "unscored"} (${counts[f]})`}</a>`,
    )
    .join(" ");

  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(`PRIVATE pair viewer ${ledger.runId}`)}</title>
<style>
body{font-family:system-ui,sans-serif;margin:20px;color:#222}
.private{background:#8a0000;color:#fff;padding:6px 10px;font-weight:700}
table{border-collapse:collapse;margin:6px 0 12px}th,td{border:1px solid #ccc;padding:2px 6px;font-size:12px;text-align:left;vertical-align:top}
.pair{border-top:2px solid #444;margin-top:14px}.sides{display:flex;gap:12px}.attempt{flex:1;min-width:0}
.attempt h4{margin:4px 0}.answer{white-space:pre-wrap;background:#f6f6f6;padding:6px;font-size:12px}
.calls code{font-size:11px;word-break:break-all}.gap{color:#8a4b00}.filter{margin-right:10px}
.pair[data-result=win] .result{color:#009E73}.pair[data-result=loss] .result{color:#D55E00}
</style></head>
<body>
<p class="private">PRIVATE: this page holds answers and tool inputs. Do not publish it.</p>
<h1>${esc(`Pair viewer: ${ledger.runId}`)}</h1>
<p>${esc(r.statement)}</p>
<h2>Report figures (each links to its pairs)</h2>
${figures.join("\n")}
<h2 id="pairs">Pairs (${esc(`a win is a higher ${r.scenarios.mcp} score, a loss a lower one`)})</h2>
<p>${filterLinks}</p>
<p id="showing">showing ${keys.length} of ${keys.length} pairs</p>
${sections.join("\n")}
<script>
(function () {
  function apply() {
    var h = decodeURIComponent(location.hash.slice(1));
    var results = null, task = null;
    if (h.indexOf("filter=") === 0 && h !== "filter=all") results = h.slice(7).split(",");
    if (h.indexOf("task=") === 0) task = h.slice(5);
    var pairs = document.querySelectorAll("section.pair"), shown = 0;
    for (var i = 0; i < pairs.length; i++) {
      var p = pairs[i];
      var keep = (!results || results.indexOf(p.getAttribute("data-result")) >= 0) && (!task || p.getAttribute("data-task") === task);
      if (keep) { p.removeAttribute("hidden"); shown++; } else p.setAttribute("hidden", "");
    }
    document.getElementById("showing").textContent = "showing " + shown + " of " + pairs.length + " pairs";
  }
  window.addEventListener("hashchange", apply);
  apply();
})();
</script>
</body></html>
`;
}
