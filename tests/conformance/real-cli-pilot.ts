import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { expect } from "vitest";
import type { Ledger } from "../../src/ledger/schema.ts";
import { readLedger } from "../../src/ledger/store.ts";
import type { CliResult } from "../support/cli.ts";
import { assertLedgerMeteredEqualsTranscript } from "./support.ts";

/**
 * What a person looks at after `demo --pilot --real-cli` in `work`, on whichever engine: exit 0,
 * both attempts completed in the real pinned image through the gateway (three scripted turns each:
 * three requests forwarded, metered and whole, equal to the transcript), the scripted answer saying
 * that no model ran, the doc-bridge arm's two tool calls, and the API's folder removed. Returns the ledger.
 */
export async function assertRealCliPilot(run: CliResult, work: string): Promise<Ledger> {
  expect(run.code, run.stderr).toBe(0);
  const ledgerFile = (await readdir(join(work, "ledgers"))).find((f) => /^run-.*\.json$/.test(f) && !f.endsWith(".adjudication.json"))!;
  const ledger = await readLedger(join(work, "ledgers", ledgerFile));
  expect(ledger.image?.ref).toBe("study-runner/claude-code:2.1.296");
  expect(ledger.cliVersion).toBe("2.1.296");
  expect(ledger.isolation).toBe("offline");
  expect(ledger.credentials).toBe("gateway");
  expect(ledger.observations.map((o) => [o.arm, o.status])).toEqual([
    ["repository", "completed"],
    ["mcp", "completed"],
  ]);
  for (const o of ledger.observations) {
    expect(o.gateway!.requests.map((r) => [r.status, r.refused, r.complete])).toEqual([
      [200, null, true],
      [200, null, true],
      [200, null, true],
    ]);
    expect(o.gateway!.setupProblems).toEqual([]);
  }
  assertLedgerMeteredEqualsTranscript(ledger);
  // The scripted answer says that no model ran, so nobody mistakes it for one.
  for (const o of ledger.observations) expect(o.answer).toMatch(/^Scripted demo answer \(no model ran\)/);
  expect(ledger.observations[1]!.toolCallsByName).toEqual({ "mcp__doc-bridge__doc_search": 1, "mcp__doc-bridge__doc_get": 1 });
  // The API's folder (its CA and test token) is removed once the run ends.
  expect((await readdir(work)).filter((n) => n.startsWith("model-api-"))).toEqual([]);
  return ledger;
}
