import { describe, expect, it } from "vitest";
import { buildReport } from "../../src/report/build.ts";
import { renderHtml } from "../../src/report/html.ts";
import { renderMarkdown } from "../../src/report/markdown.ts";
import { renderJson } from "../../src/report/write.ts";
import { summarize } from "../../src/study/summary.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { LedgerSchema } from "../../src/ledger/schema.ts";
import { spendLabel } from "../../src/cost/labels.ts";
import { DEMO, syntheticLedger, syntheticRecord } from "../support/adjudication-fixtures.ts";

/**
 * USD figures are an estimate, not a bill on a subscription login, and token counts carry the
 * Claude Code harness: every place a researcher reads them says so.
 */

const SHA = "b".repeat(64);
const ESTIMATE = /the Claude Code CLI's own list-price estimate .*not a bill: on a subscription login nothing is billed per token/;
const HARNESS = /token counts include the Claude Code system prompt and harness, so they compare only between the two scenarios/i;
const EXTRAPOLATION = /an extrapolation of the CLI's list-price estimate, not of a bill/;

const pilot = () => {
  const ledger = syntheticLedger({ mode: "pilot" });
  return { ...ledger, spendLabel: { ...spendLabel("cli") } };
};

describe("the stdout summary", () => {
  it("labels USD as the CLI's estimate and tokens as harness-inclusive, and the pilot extrapolation as an estimate's", () => {
    const ledger = pilot();
    const s = summarize({ mode: "pilot", plan: planStudy(DEMO, "pilot"), fullPlanSize: 36, model: ledger.model, capUsd: 1 }, ledger, { path: "/l.json" });
    expect(s.extrapolatedFullRunUsd).toBeGreaterThan(0);
    expect(s.spendLabel.usd).toMatch(ESTIMATE);
    expect(s.spendLabel.tokens).toMatch(HARNESS);
    expect(s.extrapolationNote).toMatch(EXTRAPOLATION);
  });

  it("labels an http run's USD as the runner's computation at the upper prices", () => {
    const ledger = { ...pilot(), transport: "http" as const };
    const s = summarize({ mode: "pilot", plan: planStudy(DEMO, "pilot"), fullPlanSize: 36, model: ledger.model, capUsd: 1 }, ledger, { path: "/l.json" });
    expect(s.spendLabel.usd).toMatch(/upper prices .*not the API's invoice/);
    expect(s.spendLabel.usd).not.toMatch(ESTIMATE);
  });
});

describe("the ledger", () => {
  it("has a spendLabel field the schema validates", () => {
    expect(LedgerSchema.safeParse(pilot()).success).toBe(true);
    expect(LedgerSchema.safeParse({ ...pilot(), spendLabel: { usd: "", tokens: "x" } }).success).toBe(false);
  });
});

describe("every report", () => {
  const ledger = pilot();
  const report = buildReport({ ledger, ledgerSha256: SHA, record: syntheticRecord(ledger, SHA), manifest: DEMO });

  it("JSON: carries the label and the extrapolation's caveat", () => {
    const json = JSON.parse(renderJson(report));
    expect(json.spend.usd).toMatch(ESTIMATE);
    expect(json.spend.tokens).toMatch(HARNESS);
    expect(json.spend.adjudicationUsd).toMatch(/adjudication's USD figures are the Claude Code CLI's own list-price estimate as well, not a bill/);
    expect(json.extrapolation.applies).toBe(true);
    expect(json.extrapolation.note).toMatch(EXTRAPOLATION);
  });

  it("Markdown and HTML: say it under the totals, and where the extrapolation is printed", () => {
    const md = renderMarkdown(report);
    expect(md).toMatch(ESTIMATE);
    expect(md).toMatch(HARNESS);
    expect(md).toMatch(new RegExp(`Pilot extrapolation: [0-9.]+ USD \\(.*${EXTRAPOLATION.source}`));
    const html = renderHtml(report);
    const label = /<p class="spend-label" id="spend-label">(.*?)<\/p>/.exec(html)?.[1] ?? "";
    expect(label.replaceAll("&#39;", "'")).toMatch(ESTIMATE);
    expect(label).toMatch(HARNESS);
    expect(html.replaceAll("&#39;", "'")).toMatch(new RegExp(`pilot extrapolation</th><td>[0-9.]+ USD \\(.*${EXTRAPOLATION.source}`));
  });

  it("a ledger written before the label existed is labelled by its transport", () => {
    const { spendLabel: _dropped, ...old } = ledger;
    const r = buildReport({ ledger: old, ledgerSha256: SHA, record: null, manifest: DEMO });
    expect(r.spend.usd).toMatch(ESTIMATE);
    expect(r.spend.adjudicationUsd).toBeNull();
  });
});
