import { describe, expect, it } from "vitest";
import { AGENT_ADJUDICATION_STATEMENT, buildReport } from "../../src/report/build.ts";
import { renderHtml } from "../../src/report/html.ts";
import { renderMarkdown } from "../../src/report/markdown.ts";
import { meanInterval, tQuantile } from "../../src/report/stats.ts";
import { DEMO, syntheticLedger, syntheticRecord } from "../support/adjudication-fixtures.ts";

const SHA = "b".repeat(64);

describe("paired intervals", () => {
  it("is the Student t interval of the mean difference", () => {
    const s = meanInterval([1, 2, 3]);
    expect(s.mean).toBe(2);
    expect(s.sd).toBe(1);
    // t(0.975, 2) = 4.302652729749462 (scipy.stats.t.ppf(0.975, 2)).
    expect(s.lower).toBeCloseTo(2 - 4.302652729749462 / Math.sqrt(3), 12);
    expect(s.upper).toBeCloseTo(2 + 4.302652729749462 / Math.sqrt(3), 12);
  });

  it("gives no interval below two pairs, and uses the t quantile of n-1 degrees of freedom", () => {
    expect(meanInterval([5])).toEqual({ n: 1, mean: 5, sd: null, lower: null, upper: null });
    expect(meanInterval([])).toEqual({ n: 0, mean: null, sd: null, lower: null, upper: null });
    // scipy.stats.t.ppf(0.975, 17) and (0.975, 60).
    expect(tQuantile(0.975, 17)).toBeCloseTo(2.1098155778333156, 12);
    expect(tQuantile(0.975, 60)).toBeCloseTo(2.0002978220142604, 12);
  });
});

describe("the report of a blocked run with an adjudication that misses an item", () => {
  const ledger = syntheticLedger({ mode: "full", failAt: 7 });
  // The adjudication stopped before observation 5: items 5.. are absent.
  const record = syntheticRecord(ledger, SHA, { outcomes: { 1: "partial", 2: "incorrect", 3: "incomplete" }, omit: [5] });
  const report = buildReport({ ledger, ledgerSha256: SHA, record, manifest: DEMO });

  it("lists every planned attempt: run ones with their status, the rest as not run", () => {
    expect(report.attempts).toHaveLength(36);
    expect(report.attempts.filter((a) => a.status === "completed")).toHaveLength(7);
    expect(report.attempts.filter((a) => a.status === "failed")).toHaveLength(1);
    expect(report.attempts.filter((a) => a.status === "not run")).toHaveLength(28);
    expect(report.totals).toMatchObject({ planned: 36, run: 8, notRun: 28 });
    const failed = report.attempts.find((a) => a.status === "failed")!;
    expect(failed.statusReason).toMatch(/^attempt 8 .* ended failed: exit code 1$/);
  });

  it("shows the missing adjudication items and the blocked attempt as gaps, not as zeros", () => {
    const a = report.attempts;
    expect(a.find((x) => x.index === 5)).toMatchObject({ outcome: "missing", score: null });
    expect(a.find((x) => x.index === 5)!.outcomeReason).toMatch(/has no item for this observation/);
    expect(a.find((x) => x.index === 7)).toMatchObject({ outcome: "missing", score: null });
    expect(a.find((x) => x.index === 3)).toMatchObject({ outcome: "incomplete", score: 0 });
    const total = (s: string) => Object.values(report.outcomes[s]!.counts).reduce((x, y) => x + y, 0);
    expect(total("repository-only") + total("doc-bridge")).toBe(36);
    expect(report.gaps).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/repetition \d: attempt failed/),
        expect.stringMatching(/correctness missing \(missing: the adjudication record has no item/),
        expect.stringMatching(/not run \(the run stopped before it: attempt 8/),
        expect.stringMatching(/^the run is blocked: attempt 8/),
        expect.stringMatching(/^the adjudication is running/),
      ]),
    );
    const md = renderMarkdown(report);
    const html = renderHtml(report);
    for (const text of [md, html]) {
      expect(text).toContain("not run");
      expect(text).toContain("no item for this observation");
      expect(text).toContain(AGENT_ADJUDICATION_STATEMENT);
    }
  });

  it("pairs only what both arms completed, and says which pairs were left out and why", () => {
    const input = report.paired.metrics.find((m) => m.metric === "inputTokens")!;
    // Attempts 0-6 completed: (task 0: reps 1-3 and task 1 rep 1 complete pairs except where 7 failed).
    expect(input.pairs.every((p) => p.diff === p.mcp - p.repository)).toBe(true);
    expect(input.n).toBe(3);
    expect(input.missing.map((m) => m.why)).toEqual(expect.arrayContaining(["repository-only failed", "repository-only not run, doc-bridge not run"]));
    expect(input.missing.length + input.n).toBe(18);
    const score = report.paired.metrics.find((m) => m.metric === "score")!;
    expect(score.missing.some((m) => /no score in/.test(m.why))).toBe(true);
    expect(report.paired.method).toMatch(/no interval or test is computed over attempt pairs/);
    expect(report.analysis.unit).toBe("task");
  });

  it("never carries an answer or a verdict's text", () => {
    const text = JSON.stringify(report) + renderMarkdown(report) + renderHtml(report);
    expect(text).not.toContain("answer 0: see docs/x.md");
    expect(text).not.toContain("VERDICT-TEXT");
  });
});

describe("binding the record to the ledger", () => {
  const ledger = syntheticLedger({ mode: "pilot" });
  const record = syntheticRecord(ledger, SHA);

  it("refuses a record of other ledger bytes, another run, or items bound to other observations", () => {
    expect(() => buildReport({ ledger, ledgerSha256: "c".repeat(64), record, manifest: DEMO })).toThrow(/the ledger changed after it was adjudicated/);
    expect(() => buildReport({ ledger: { ...ledger, runId: "other" }, ledgerSha256: SHA, record, manifest: DEMO })).toThrow(/is of run run-synthetic-pilot/);
    const swapped = structuredClone(record);
    swapped.items[0]!.scenario = "doc-bridge";
    expect(() => buildReport({ ledger, ledgerSha256: SHA, record: swapped, manifest: DEMO })).toThrow(
      /bound to observation 0 \(ledgerlite-rounding, doc-bridge, repetition 1\), which the ledger does not hold/,
    );
  });

  it("extrapolates a completed pilot, and says why not otherwise", () => {
    const r = buildReport({ ledger, ledgerSha256: SHA, record, manifest: DEMO });
    expect(r.extrapolation.applies).toBe(true);
    expect(r.extrapolation.fullRunUsd).toBeCloseTo(ledger.budget.spentUsd * 18, 6);
    const noManifest = buildReport({ ledger, ledgerSha256: SHA, record, manifest: null, manifestNote: "ENOENT" });
    expect(noManifest.extrapolation).toMatchObject({ applies: false, note: "no extrapolation: the manifest could not be read" });
    expect(noManifest.gaps[0]).toMatch(/the manifest could not be read \(ENOENT\)/);
  });

  it("without a record, reports every outcome missing and says correctness is unknown", () => {
    const r = buildReport({ ledger, ledgerSha256: SHA, record: null, manifest: DEMO });
    expect(r.attempts.every((a) => a.outcome === "missing")).toBe(true);
    expect(r.gaps).toContain("no adjudication record: correctness is unknown for every attempt");
    expect(r.adjudication).toBeNull();
  });
});

describe("the HTML page", () => {
  const ledger = syntheticLedger({ mode: "full" });
  const html = renderHtml(buildReport({ ledger, ledgerSha256: SHA, record: syntheticRecord(ledger, SHA), manifest: DEMO }));

  it("is self-contained: no script, no external resource", () => {
    expect(html).not.toMatch(/<script|<link|<img|<iframe|src=|href=|url\(|@import|https?:/i);
  });

  it("has the outcome chart and one paired dot plot per plotted metric, a dot per arm and pair", () => {
    expect(html.match(/<svg class="chart outcomes"/g)).toHaveLength(1);
    expect(html.match(/<svg class="chart dotplot"/g)).toHaveLength(4);
    // 18 pairs x 2 arms per plot, plus 2 legend dots per plot.
    expect(html.match(/<circle /g)).toHaveLength(4 * (18 * 2 + 2));
  });

  it("escapes what it shows", () => {
    const l = syntheticLedger({ mode: "pilot" });
    l.statusReason = undefined;
    const r = buildReport({ ledger: { ...l, runId: "run-<b>" }, ledgerSha256: SHA, record: null, manifest: DEMO });
    expect(renderHtml(r)).toContain("run-&lt;b&gt;");
    expect(renderHtml(r)).not.toContain("run-<b>");
  });
});

describe("a run whose model was a test stand-in", () => {
  it("says so among the gaps, and a run on the real API does not", () => {
    const ledger = syntheticLedger({ mode: "pilot" });
    const gap = /the model answered through a test endpoint \(a scripted or fake API\), not the real API/;
    expect(buildReport({ ledger: { ...ledger, modelApi: "test" }, ledgerSha256: SHA, record: null, manifest: DEMO }).gaps).toEqual(expect.arrayContaining([expect.stringMatching(gap)]));
    expect(buildReport({ ledger: { ...ledger, modelApi: "anthropic" }, ledgerSha256: SHA, record: null, manifest: DEMO }).gaps.some((g) => gap.test(g))).toBe(false);
  });
});

describe("behaviour side by side", () => {
  const ledger = syntheticLedger({ mode: "full" });
  const r = buildReport({ ledger, ledgerSha256: SHA, record: syntheticRecord(ledger, SHA), manifest: DEMO });

  it("sums each arm's tool mix from its observations and divides its charges by its correct answers", () => {
    for (const arm of ["repository", "mcp"] as const) {
      const obs = ledger.observations.filter((o) => o.arm === arm);
      const mix: Record<string, number> = {};
      for (const o of obs) for (const [k, n] of Object.entries(o.toolCallsByName)) mix[k] = (mix[k] ?? 0) + n;
      expect(r.behaviour.arms[arm].toolMix).toEqual(mix);
      const correct = r.attempts.filter((a) => a.arm === arm && a.outcome === "correct").length;
      const charged = obs.reduce((s, o) => s + (o.chargedUsd ?? 0), 0);
      expect(r.behaviour.arms[arm].costPerCorrectUsd).toBeCloseTo(charged / correct, 12);
      const read = obs.reduce((s, o) => s + o.cacheReadInputTokens!, 0);
      const prompt = obs.reduce((s, o) => s + o.inputTokens! + o.cacheCreationInputTokens! + o.cacheReadInputTokens!, 0);
      expect(r.behaviour.arms[arm].cacheHitRate).toBeCloseTo(read / prompt, 12);
    }
  });

  it("a tool named like what every object inherits is counted like any other, in the mix and in both renderings", () => {
    // A transcript names its tools: "constructor" and "__proto__" are names like "Read".
    const odd = syntheticLedger({ mode: "full" });
    for (const o of odd.observations.filter((x) => x.arm === "repository")) o.toolCallsByName = JSON.parse('{"constructor":2,"__proto__":1,"Read":1}') as Record<string, number>;
    const report = buildReport({ ledger: odd, ledgerSha256: SHA, record: syntheticRecord(odd, SHA), manifest: DEMO });
    const n = odd.observations.filter((x) => x.arm === "repository").length;
    const repository = report.behaviour.arms.repository;
    expect(Object.entries(repository.toolMix).sort()).toEqual(
      [
        ["Read", n],
        ["__proto__", n],
        ["constructor", 2 * n],
      ].sort(),
    );
    expect(repository.toolCalls).toBe(4 * n);
    // The other arm called none of them: 0, not what every object inherits.
    const md = renderMarkdown(report);
    expect(md).toMatch(new RegExp(`calls to constructor \\| ${2 * n} \\| 0 \\|`));
    expect(md).toMatch(new RegExp(`calls to __proto__ \\| ${n} \\| 0 \\|`));
    expect(renderHtml(report)).not.toContain("native code");
  });

  it("is in the Markdown and the HTML, with a tool-mix chart, and names the unit of analysis and the tests", () => {
    const md = renderMarkdown(r);
    const html = renderHtml(r);
    for (const text of [md, html]) {
      expect(text).toContain("Behaviour side by side");
      expect(text).toContain("cost per correct answer USD");
      expect(text).toContain("Unit of analysis: the task.");
      expect(text).toMatch(/exact McNemar/);
      expect(text).toMatch(/Wilcoxon signed-rank/);
      expect(text).toContain("Noise floor");
      expect(text).toContain("MDE (80% power)");
      expect(text).toContain(`Seed ${r.analysis.seed}`);
    }
    expect(html.match(/<svg class="chart toolmix"/g)).toHaveLength(1);
  });
});

describe("instruction files the attempts' exports held", () => {
  it("are listed per repository by path, and a ledger without the record says so instead of 'none'", () => {
    const ledger = syntheticLedger({ mode: "full" });
    const repos = [...new Set(ledger.observations.map((o) => o.repository))];
    expect(repos.length).toBeGreaterThan(1);
    const [withFiles, withNone, unrecorded] = repos;
    for (const o of ledger.observations) {
      if (o.repository === withFiles) o.instructionFiles = o.index % 2 ? ["CLAUDE.md"] : ["CLAUDE.md", "docs/AGENTS.md"];
      else if (o.repository === withNone) o.instructionFiles = [];
    }
    const report = buildReport({ ledger, ledgerSha256: SHA, record: null, manifest: DEMO });
    const row = (r: string | undefined) => report.instructionFiles.find((x) => x.repository === r)!;
    expect(row(withFiles)).toMatchObject({ files: ["CLAUDE.md", "docs/AGENTS.md"], unrecorded: 0 });
    expect(row(withNone)).toMatchObject({ files: [], unrecorded: 0 });
    if (unrecorded !== undefined) expect(row(unrecorded)).toMatchObject({ files: [], recorded: 0 });
    const md = renderMarkdown(report);
    expect(md).toContain("## Instruction files in the corpus");
    expect(md).toContain(`| ${withFiles} | CLAUDE.md, docs/AGENTS.md |`);
    expect(md).toContain(`| ${withNone} | none |`);
    if (unrecorded !== undefined) expect(md).toMatch(new RegExp(`\\| ${unrecorded} \\| not recorded \\(\\d+ of \\d+ attempts have no record of it\\) \\|`));
    const html = renderHtml(report);
    expect(html).toContain("<h2>Instruction files in the corpus</h2>");
    expect(html).toContain(`<td>${withFiles}</td><td>CLAUDE.md, docs/AGENTS.md</td>`);
  });
});

describe("the report names the CLI version and its calibration profile (contract R221)", () => {
  // contract: R221
  it("the run table shows the CLI version with the profile's sha256 the ledger records; an older ledger shows the version alone", () => {
    const ledger = { ...syntheticLedger({ mode: "pilot" }), profileSha256: "f".repeat(64) };
    const report = buildReport({ ledger, ledgerSha256: SHA, record: syntheticRecord(ledger, SHA), manifest: DEMO });
    expect(report.run.profileSha256).toBe("f".repeat(64));
    expect(renderMarkdown(report)).toContain(`| ${ledger.cliVersion} (profile sha256 ${"f".repeat(12)}) |`);
    expect(renderHtml(report)).toContain(`${ledger.cliVersion} (profile sha256 ${"f".repeat(12)})`);
    const { profileSha256: _p, ...older } = ledger;
    const old = buildReport({ ledger: older, ledgerSha256: SHA, record: syntheticRecord(older, SHA), manifest: DEMO });
    expect(old.run.profileSha256).toBeNull();
    expect(renderMarkdown(old)).not.toContain("profile sha256");
  });
});
