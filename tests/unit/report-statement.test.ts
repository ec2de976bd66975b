import { describe, expect, it } from "vitest";
import { AGENT_ADJUDICATION_STATEMENT, buildReport } from "../../src/report/build.ts";
import { renderHtml } from "../../src/report/html.ts";
import { renderMarkdown } from "../../src/report/markdown.ts";
import { renderJson } from "../../src/report/write.ts";
import { DEMO, syntheticLedger, syntheticRecord } from "../support/adjudication-fixtures.ts";

const SHA = "c".repeat(64);
const ledger = syntheticLedger({ mode: "full", failAt: 4 });
const record = syntheticRecord(ledger, SHA);

describe("the agent-adjudication statement of every report", () => {
  // contract: R94
  it("opens and closes the Markdown and the HTML report, and is in the JSON, with or without a record", () => {
    expect(AGENT_ADJUDICATION_STATEMENT).toMatch(/agent-adjudicated.*There is no human review\.$/);
    for (const r of [record, null]) {
      const report = buildReport({ ledger, ledgerSha256: SHA, record: r, manifest: DEMO });
      const md = renderMarkdown(report);
      const html = renderHtml(report);
      const firstSection = (text: string, heading: string) => text.indexOf(heading);
      const lastSection = (text: string, heading: string) => text.lastIndexOf(heading);
      expect(md.indexOf(AGENT_ADJUDICATION_STATEMENT)).toBeGreaterThan(-1);
      expect(md.indexOf(AGENT_ADJUDICATION_STATEMENT)).toBeLessThan(firstSection(md, "\n## "));
      expect(md.lastIndexOf(AGENT_ADJUDICATION_STATEMENT)).toBeGreaterThan(lastSection(md, "\n## "));
      expect(html.indexOf(AGENT_ADJUDICATION_STATEMENT)).toBeGreaterThan(-1);
      expect(html.indexOf(AGENT_ADJUDICATION_STATEMENT)).toBeLessThan(firstSection(html, "<h2"));
      expect(html.lastIndexOf(AGENT_ADJUDICATION_STATEMENT)).toBeGreaterThan(lastSection(html, "<h2"));
      expect(JSON.parse(renderJson(report)).statement).toBe(AGENT_ADJUDICATION_STATEMENT);
    }
  });

  // contract: R88
  it("says so in every format when the adjudicator used the answering model", () => {
    expect(record.adjudicator.sameModel).toBe(true);
    const report = buildReport({ ledger, ledgerSha256: SHA, record, manifest: DEMO });
    const said = /Departure from the protocol: the adjudicator was the answering model claude-haiku-5-5 \(--force-same-model\)/;
    expect(renderMarkdown(report)).toMatch(said);
    expect(renderHtml(report)).toMatch(said);
    expect(JSON.parse(renderJson(report)).adjudication.sameModel).toBe(true);
  });
});
