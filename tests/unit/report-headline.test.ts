/**
 * The report's headline (contract R193): the caveats that make a run no evidence, first and in
 * every format; figures as a reader needs them; the run's status after adjudication.
 */
import { describe, expect, it } from "vitest";
import { buildReport } from "../../src/report/build.ts";
import { renderHtml } from "../../src/report/html.ts";
import { renderMarkdown } from "../../src/report/markdown.ts";
import { num } from "../../src/report/sections.ts";
import { readerP, readerUsd } from "../../src/report/headline.ts";
import { DEMO, syntheticLedger, syntheticRecord } from "../support/adjudication-fixtures.ts";

const SHA = "c".repeat(64);

describe("the headline", () => {
  // contract: R193
  it("names a blocked run, an unfinished adjudication and a test model as caveats, before anything else in every format", () => {
    const ledger = { ...syntheticLedger({ mode: "full", failAt: 7 }), modelApi: "test" as const };
    const record = syntheticRecord(ledger, SHA, { omit: [5] });
    const report = buildReport({ ledger, ledgerSha256: SHA, record, manifest: DEMO });
    expect(report.headline.caveats).toEqual([
      expect.stringMatching(/^A fake model answered .*no evidence about the model/),
      expect.stringMatching(/^The run is blocked: attempt 8 .*; its figures cover only what ran\.$/),
      "The adjudication is running: some attempts have no verdict.",
    ]);
    const md = renderMarkdown(report).split("\n");
    expect(md[0]).toBe(`# Study report: ${ledger.runId}`);
    for (const c of report.headline.caveats) expect(md.slice(0, 15)).toContain(`- ${c}`);
    for (const s of report.headline.sentences) expect(md.slice(0, 15)).toContain(s);
    const html = renderHtml(report);
    expect(html.indexOf('<section id="headline">')).toBeLessThan(html.indexOf("<h2"));
    expect(html).toContain('<div class="caveats">');
    // The spend lines say what a fake model's USD is.
    expect(renderMarkdown(report)).toContain("A fake model answered: every USD figure here is a list-price estimate of its token counts, and nothing was paid.");
  });

  // contract: R193
  it("says no adjudication and a complete run plainly, and the run table says what happened after adjudication", () => {
    const ledger = syntheticLedger({ mode: "full" });
    const none = buildReport({ ledger, ledgerSha256: SHA, record: null, manifest: DEMO });
    expect(none.headline.caveats).toEqual(["No adjudication record was given: correctness is unknown, so there is no effect on the score."]);
    expect(none.headline.sentences[0]).toMatch(/^No task has a score in both arms/);
    expect(renderMarkdown(none)).toContain("| completed, awaiting adjudication |");
    const done = buildReport({ ledger, ledgerSha256: SHA, record: syntheticRecord(ledger, SHA), manifest: DEMO });
    expect(done.headline.caveats).toEqual([]);
    expect(renderMarkdown(done)).toContain("| completed and adjudicated |");
    expect(renderMarkdown(done)).not.toContain("awaiting-adjudication");
    expect(renderHtml(done)).not.toContain('<div class="caveats">');
  });

  // contract: R193
  it("prints a float residue of a zero variance as 0, and p-values and USD rounded for a reader", () => {
    expect(num(7.053e-38, "variance")).toBe("0");
    expect(num(1.5e-9, "variance")).toBe("1.5e-9");
    expect(readerP(1)).toBe("= 1.00");
    expect(readerP(0.004)).toBe("= 0.004");
    expect(readerP(0.0001)).toBe("< 0.001");
    expect(readerUsd(0.0016333)).toBe("0.0016");
    expect(readerUsd(1.55088)).toBe("1.55");
    expect(readerUsd(0)).toBe("0");
  });
});

describe("no statistic without data", () => {
  // contract: R195
  it("prints — with the reason for McNemar and the sign test with no scored pair or task, in every format", () => {
    const ledger = syntheticLedger({ mode: "full" });
    const report = buildReport({ ledger, ledgerSha256: SHA, record: null, manifest: DEMO });
    expect(report.analysis.outcomes.mcnemar).toMatchObject({ pairs: 0, p: null });
    expect(report.analysis.outcomes.sign.p).toBeNull();
    expect(JSON.parse(JSON.stringify(report)).analysis.outcomes.mcnemar.p).toBeNull();
    const md = renderMarkdown(report);
    expect(md).toMatch(/\| exact McNemar \| 0 attempt pairs \| .* \| — \(no attempt pair has a score in both arms\) \|/);
    expect(md).toMatch(/\| exact sign test \| 0 tasks \| .* \| — \(no task has a score in both arms\) \|/);
    const html = renderHtml(report);
    expect(html).toContain("<td>— (no attempt pair has a score in both arms)</td>");
    expect(html).toContain("<td>— (no task has a score in both arms)</td>");
  });
});
