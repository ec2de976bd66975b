import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ARM_COLOURS, OUTCOME_COLOURS } from "../../src/report/html.ts";
import { fmt } from "../../src/report/markdown.ts";
import type { ReportData } from "../../src/report/build.ts";
import { runCli } from "../support/cli.ts";
import { countColour, decodePng } from "../support/png.ts";
import { dumpDom, ensureChromium, screenshot } from "../support/chromium.ts";
import { syntheticLedger, syntheticRecord } from "../support/adjudication-fixtures.ts";

// The HTML report in Debian's headless Chromium (installed here when missing): a screenshot with
// non-blank charts, and the page text holding the totals the JSON report gives.

let chromium = "";
let work = "";
beforeAll(async () => {
  chromium = ensureChromium();
  work = await mkdtemp(join(tmpdir(), "sr-report-"));
}, 600_000);
afterAll(() => rm(work, { recursive: true, force: true }));

/** The page's visible text as Chromium parsed it (tags dropped, entities decoded, spaces collapsed). */
function pageText(dom: string): string {
  return dom
    .replace(/<style[\s\S]*?<\/style>/g, " ")
    .replace(/<[^>]+>/g, " ")
    .replaceAll("&lt;", "<")
    .replaceAll("&gt;", ">")
    .replaceAll("&quot;", '"')
    .replaceAll("&amp;", "&")
    .replace(/\s+/g, " ");
}

async function render(html: string, name: string) {
  const png = join(work, `${name}.png`);
  const url = pathToFileURL(html).href;
  // Tall enough for every chart: the statistics, behaviour and instruction-file sections come first.
  await screenshot(chromium, url, png, "1000,9000");
  return { image: decodePng(await readFile(png)), text: pageText(await dumpDom(chromium, url)) };
}

describe("the demo ends with a report", () => {
  it("writes Markdown, JSON and HTML into its workdir; the HTML renders with charts and the JSON totals", async () => {
    const workdir = join(work, "demo");
    const r = await runCli(["demo", "--pilot", "--quiet", "--workdir", workdir], { timeoutMs: 600_000 });
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout.slice(r.stdout.indexOf('{\n  "demo"'))) as { demo: { ledger: string; adjudication: string; report: { markdown: string; json: string; html: string } } };
    for (const path of [summary.demo.ledger, summary.demo.adjudication, summary.demo.report.markdown, summary.demo.report.json, summary.demo.report.html]) {
      expect(path.startsWith(workdir)).toBe(true);
      await stat(path);
    }
    expect((await stat(summary.demo.adjudication)).mode & 0o777).toBe(0o600);
    const data = JSON.parse(await readFile(summary.demo.report.json, "utf8")) as ReportData;
    // The demo follows the protocol: a different model adjudicates, with no flag.
    expect(data.adjudication).toMatchObject({ status: "complete", sameModel: false, forcedSameModel: false, humanReview: false });
    expect(data.adjudication!.model).not.toBe(data.adjudication!.answeringModel);
    expect(data.attempts.map((a) => a.outcome).every((o) => o !== "missing" && o !== "blocked")).toBe(true);
    expect(data.extrapolation.applies).toBe(true);
    expect(await readFile(summary.demo.report.markdown, "utf8")).toContain("There is no human review.");

    const { image, text } = await render(summary.demo.report.html, "demo");
    // Non-blank charts: the dots of both arms and the outcome bar were painted.
    expect(countColour(image, ARM_COLOURS.repository)).toBeGreaterThan(100);
    expect(countColour(image, ARM_COLOURS.mcp)).toBeGreaterThan(100);
    expect(countColour(image, OUTCOME_COLOURS.correct)).toBeGreaterThan(1000);
    const t = data.totals;
    for (const shown of [
      `input tokens ${fmt(t.inputTokens)}`,
      `output tokens ${fmt(t.outputTokens)}`,
      `cache-write tokens ${fmt(t.cacheCreationInputTokens)}`,
      `cache-read tokens ${fmt(t.cacheReadInputTokens)}`,
      `tool calls ${fmt(t.toolCalls)}`,
      `answering charged USD ${fmt(t.answeringChargedUsd, "USD")}`,
      `adjudication charged USD ${fmt(t.adjudicationChargedUsd, "USD")}`,
      `total charged USD ${fmt(t.totalChargedUsd, "USD")}`,
      `${fmt(data.extrapolation.fullRunUsd, "USD")} USD`,
      data.statement,
    ]) {
      expect(text).toContain(shown);
    }
    expect(t.inputTokens).toBeGreaterThan(0);
  }, 600_000);

  it("a blank page fails the chart check (the check can fail)", async () => {
    const blank = join(work, "blank.html");
    await writeFile(blank, "<!DOCTYPE html><html><body></body></html>");
    const { image } = await render(blank, "blank");
    expect(countColour(image, ARM_COLOURS.repository)).toBe(0);
    expect(countColour(image, OUTCOME_COLOURS.correct)).toBe(0);
  }, 120_000);
});

describe("a blocked run and an adjudication with a missing item", () => {
  it("are reported with the gaps shown in the page and in the outcome chart", async () => {
    const ledger = syntheticLedger({ mode: "full", failAt: 7 });
    const ledgerPath = join(work, "blocked.ledger.json");
    const bytes = `${JSON.stringify(ledger, null, 2)}\n`;
    await writeFile(ledgerPath, bytes, { mode: 0o600 });
    const sha = createHash("sha256").update(bytes).digest("hex");
    const recordPath = join(work, "blocked.adjudication.json");
    await writeFile(recordPath, JSON.stringify(syntheticRecord(ledger, sha, { outcomes: { 1: "partial" }, omit: [5] })), { mode: 0o600 });
    const out = join(work, "blocked-report");
    const r = await runCli(["report", "--ledger", ledgerPath, "--adjudication", recordPath, "--out-dir", out]);
    expect(r.code, r.stderr).toBe(0);
    const files = JSON.parse(r.stdout) as { json: string; html: string };
    const data = JSON.parse(await readFile(files.json, "utf8")) as ReportData;
    expect(data.totals.notRun).toBe(28);

    const { image, text } = await render(files.html, "blocked");
    // 28 never-run and 3 unadjudicated attempts are drawn as missing, not left out of the bar.
    expect(countColour(image, OUTCOME_COLOURS.missing)).toBeGreaterThan(1000);
    expect(countColour(image, OUTCOME_COLOURS.partial)).toBeGreaterThan(100);
    expect(text).toContain("the run is blocked: attempt 8 (ledgerlite-periods, repository-only, repetition 1) ended failed");
    expect(text).toContain("correctness missing (missing: the adjudication record has no item for this observation");
    expect(text).toContain("ledgerlite-periods / repository-only / repetition 2: not run");
    expect(text).toContain("the adjudication is running");
    expect(text).toContain("rep 1: no pair (repository-only failed)");
    expect(text).toContain("rep 2: no pair (repository-only not run, doc-bridge not run)");
    expect(text).toContain(`attempts not run ${fmt(data.totals.notRun)}`);

    // Writing again into the same folder never overwrites a report.
    const again = await runCli(["report", "--ledger", ledgerPath, "--adjudication", recordPath, "--out-dir", out]);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/already exists/);
  }, 300_000);
});
