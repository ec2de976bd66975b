import { describe, expect, it } from "vitest";
import { EgressRecordSchema, LedgerSchema, type EgressRecord, type EgressRequest } from "../../src/ledger/schema.ts";
import { buildReport } from "../../src/report/build.ts";
import { renderHtml } from "../../src/report/html.ts";
import { renderMarkdown } from "../../src/report/markdown.ts";
import { DEMO, syntheticLedger } from "../support/adjudication-fixtures.ts";
import { completedObservation, sampleLedger } from "../support/ledger-sample.ts";

// The egress record of an attempt under --isolation strict (issue 9): its schema's arithmetic,
// the ledger header's isolation fields, and how the report shows refused requests.

const entry = (host: string, port: number, allowed: boolean, error?: string): EgressRequest => ({
  host,
  port,
  allowed,
  bytesUp: allowed ? 120 : 0,
  bytesDown: allowed ? 4000 : 0,
  startedAt: "2026-11-30T05:01:00.000Z",
  ms: 12,
  ...(error ? { error } : {}),
});

function record(entries: EgressRequest[], extra: Partial<EgressRecord> = {}): EgressRecord {
  const allowed = entries.filter((e) => e.allowed).length;
  return {
    requests: entries.length,
    allowed,
    refused: entries.length - allowed,
    bytesUp: entries.reduce((s, e) => s + e.bytesUp, 0),
    bytesDown: entries.reduce((s, e) => s + e.bytesDown, 0),
    entries,
    entriesDropped: 0,
    droppedConnections: 0,
    ...extra,
  };
}

const mixed = record([
  entry("api.anthropic.com", 443, true),
  entry("evil.example", 443, false, "not on the allowlist"),
  entry("10.0.0.1", 443, false, "raw IP"),
  entry("evil.example", 443, false, "not on the allowlist"),
]);

describe("EgressRecordSchema", () => {
  it("accepts a record whose totals agree with its entries", () => {
    expect(EgressRecordSchema.parse(mixed)).toEqual(mixed);
  });

  it("refuses totals that do not add up, a dropped count that hides entries, and unknown fields", () => {
    expect(EgressRecordSchema.safeParse({ ...mixed, refused: 2 }).error?.issues[0]?.message).toMatch(/allowed \+ refused is 3/);
    expect(EgressRecordSchema.safeParse({ ...mixed, requests: 5, refused: 4 }).error?.issues[0]?.message).toMatch(/4 entries \+ 0 dropped differ from 5 requests/);
    expect(EgressRecordSchema.safeParse({ ...mixed, requests: 5, refused: 4, entriesDropped: 1 }).success).toBe(true);
    expect(EgressRecordSchema.safeParse({ ...mixed, note: "x" }).success).toBe(false);
    expect(EgressRecordSchema.safeParse(record([{ ...entry("a.example", 70000, false) }])).success).toBe(false);
  });

  it("is what the ledger holds per observation, with the header's allowlist and runtime", () => {
    const ledger = sampleLedger({
      isolation: "strict",
      egressAllow: ["api.anthropic.com"],
      runtime: "runsc",
      status: "awaiting-adjudication",
      observations: [completedObservation(0, 0.002, { egress: mixed })],
    });
    ledger.budget = { ...ledger.budget, spentUsd: 0.002 };
    expect(LedgerSchema.parse(ledger).observations[0]!.egress).toEqual(mixed);
    const broken = structuredClone(ledger);
    broken.observations[0]!.egress!.allowed = 3;
    expect(LedgerSchema.safeParse(broken).success).toBe(false);
    expect(LedgerSchema.safeParse({ ...ledger, egressAllow: [""] }).success).toBe(false);
  });
});

describe("the report of a strict run", () => {
  const ledger = syntheticLedger({ mode: "pilot" });
  ledger.isolation = "strict";
  ledger.observations[0]!.egress = mixed;
  ledger.observations[1]!.egress = record([entry("api.anthropic.com", 443, true)]);

  it("lists, per attempt, requests, allowed and refused counts and the refused targets", () => {
    const report = buildReport({ ledger, ledgerSha256: "b".repeat(64), record: null, manifest: DEMO });
    expect(report.egress).toEqual([
      expect.objectContaining({ index: 0, requests: 4, allowed: 1, refused: 3, refusedTargets: ["evil.example:443", "10.0.0.1:443"] }),
      expect.objectContaining({ index: 1, requests: 1, allowed: 1, refused: 0, refusedTargets: [] }),
    ]);
    const md = renderMarkdown(report);
    expect(md).toContain("## Egress (isolation strict)");
    expect(md).toMatch(/\| 1 \| [^|]+ \| [^|]+ \| 1 \| 4 \| 1 \| 3 \| evil\.example:443, 10\.0\.0\.1:443 \|/);
    expect(renderHtml(report)).toContain("<h2>Egress (isolation strict)</h2>");
  });

  it("says when the proxy kept only part of a flood's record", () => {
    const flooded = structuredClone(ledger);
    flooded.observations[0]!.egress = { ...mixed, requests: 504, refused: 503, entriesDropped: 500 };
    expect(renderMarkdown(buildReport({ ledger: flooded, ledgerSha256: "b".repeat(64), record: null, manifest: DEMO }))).toContain("(500 requests beyond the record's bound, counted only)");
  });

  it("has no egress section when no attempt went through the proxy", () => {
    const report = buildReport({ ledger: syntheticLedger({ mode: "pilot" }), ledgerSha256: "b".repeat(64), record: null, manifest: DEMO });
    expect(report.egress).toBeUndefined();
    expect(renderMarkdown(report)).not.toContain("Egress");
  });
});
