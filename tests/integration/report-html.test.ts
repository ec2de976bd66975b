import { createHash } from "node:crypto";
import { chmod, copyFile, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ARM_COLOURS, CAVEAT_RED, HEADLINE_BACKGROUND, OUTCOME_COLOURS } from "../../src/report/html.ts";
import { readerP, readerUsd } from "../../src/report/headline.ts";
import { fmt } from "../../src/report/markdown.ts";
import type { ReportData } from "../../src/report/build.ts";
import { runCli } from "../support/cli.ts";
import { countColour, decodePng } from "../support/png.ts";
import { dumpDom, ensureChromium, screenshot } from "../support/chromium.ts";
import { syntheticLedger, syntheticRecord } from "../support/adjudication-fixtures.ts";

// The HTML report in Debian's headless Chromium (installed here when missing): a screenshot with
// non-blank charts, and the page text holding the totals the JSON report gives. The demo report's
// first screen (1280 × 800) is kept (mode 600) in $STUDY_TEST_ARTEFACTS, by default
// study-runner-artefacts under the system temp folder.

const ARTEFACTS = process.env.STUDY_TEST_ARTEFACTS ?? join(tmpdir(), "study-runner-artefacts");

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

/** A number as the headline prints it, read back: "+0.028" → 0.028, "-0.111" → -0.111. */
const numberAt = (text: string, re: RegExp): number[] => {
  const m = re.exec(text);
  expect(m, `${re} in ${text}`).not.toBeNull();
  return m!.slice(1).map(Number);
};

/**
 * The headline against the statistics (contract R193): its figures are the report's own, rounded
 * as printed; the first screen of the HTML at 1280 × 800 shows the headline box and the red
 * fake-model caveat; the Markdown's first 15 lines hold it.
 */
async function firstScreen(files: { markdown: string; html: string }, data: ReportData) {
  const h = data.headline;
  const score = data.analysis.metrics.find((m) => m.metric === "score")!;
  const [effect, n] = numberAt(h.sentences[0]!, /is ([+-]?[\d.]+) points per task over (\d+) tasks?/);
  expect(Math.abs(effect! - score.meanDiff!)).toBeLessThanOrEqual(0.0005);
  expect(n).toBe(score.n);
  if (score.bootstrapInterval) {
    const [lower, upper] = numberAt(h.sentences[0]!, /95% bootstrap interval ([+-]?[\d.]+) to ([+-]?[\d.]+)/);
    expect(Math.abs(lower! - score.bootstrapInterval.lower)).toBeLessThanOrEqual(0.0005);
    expect(Math.abs(upper! - score.bootstrapInterval.upper)).toBeLessThanOrEqual(0.0005);
  } else expect(h.sentences[0]).toContain("no interval with one task");
  expect(h.sentences[0]).toContain(`permutation p ${readerP(score.permutation!.p)}`);
  const excludesZero = score.bootstrapInterval !== null && (score.bootstrapInterval.lower > 0 || score.bootstrapInterval.upper < 0);
  expect(h.sentences[1]).toMatch(excludesZero && score.permutation!.p < 0.05 ? /is distinguishable from zero/ : /is not distinguishable from zero/);
  if (score.mde80 !== null) {
    const [mde] = numberAt(h.sentences[2]!, /detects at 80% power is ([\d.]+) points/);
    expect(Math.abs(mde! - score.mde80)).toBeLessThanOrEqual(0.0005);
  } else expect(h.sentences[2]).toMatch(/^This design has no MDE \(it needs two tasks or more\)/);
  expect(h.sentences[2]).toMatch(
    /would need (about \d+|more than \d+) tasks at \d+ repetitions? \(planning table\)|no study size detects an observed difference of 0|the tasks a study would need are unknown/,
  );
  for (const arm of ["repository", "mcp"] as const) {
    const b = data.behaviour.arms[arm];
    expect(h.sentences[3]).toContain(`${data.scenarios[arm]} ${readerUsd(b.costPerCorrectUsd!)} USD and ${(b.wallTimePerCorrectMs! / 1000).toFixed(1)} s`);
  }
  expect(h.caveats[0]).toMatch(/^A fake model answered .*no evidence about the model/);
  expect(h.caveats).toContainEqual(expect.stringMatching(/^This is a pilot \(2 attempts\)/));
  // Readers' numbers: no exponent anywhere in the report's text.
  expect(await readFile(files.markdown, "utf8")).not.toMatch(/\de-\d/);

  const md = (await readFile(files.markdown, "utf8")).split("\n").slice(0, 15).join("\n");
  for (const line of [...h.caveats, ...h.sentences]) expect(md).toContain(line);

  const png = join(work, "first-screen.png");
  await screenshot(chromium, pathToFileURL(files.html).href, png, "1280,800");
  await mkdir(ARTEFACTS, { recursive: true, mode: 0o700 });
  const kept = join(ARTEFACTS, "report-first-screen.png");
  await copyFile(png, kept);
  await chmod(kept, 0o600);
  const image = decodePng(await readFile(png));
  // The headline's box fills a good part of the first screen, and the caveat is painted in red on it.
  expect(countColour(image, HEADLINE_BACKGROUND)).toBeGreaterThan(100_000);
  expect(countColour(image, CAVEAT_RED)).toBeGreaterThan(500);
}

describe("the demo ends with a report", () => {
  // contract: R193
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
    // One run id everywhere: the ledger, the record and the reports' folder are named for the title's.
    expect(basename(summary.demo.ledger)).toBe(`${data.run.runId}.json`);
    expect(basename(summary.demo.adjudication)).toBe(`${data.run.runId}.adjudication.json`);
    expect(basename(dirname(summary.demo.report.html))).toBe(data.run.runId);
    await firstScreen(summary.demo.report, data);
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
