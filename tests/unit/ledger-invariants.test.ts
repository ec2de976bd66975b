/**
 * The declarative list of the private records' invariants (src/verify/invariants.ts): every entry
 * is stated in docs/contract.md under its rule, and the rules the file alone proves are applied
 * by `ledger check` to ledgers the runner's own constructors build. The evidence digest's tree.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { compareEvidence, merkleRoot, type Evidence } from "../../src/ledger/evidence.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { checkAnyLedger } from "../../src/verify/check.ts";
import { ADJUDICATION_RECORD_INVARIANTS, SESSION_LEDGER_INVARIANTS, STUDY_LEDGER_INVARIANTS } from "../../src/verify/invariants.ts";
import { completedObservation, sampleLedger } from "../support/ledger-sample.ts";

const contract = readFileSync(join(PROJECT_ROOT, "docs", "contract.md"), "utf8");
const section = (rule: string) => {
  const start = contract.indexOf(`### ${rule}. `);
  if (start < 0) return "";
  const end = contract.indexOf("\n### ", start + 1);
  return contract.slice(start, end < 0 ? undefined : end);
};

describe("the invariants of the private records", () => {
  it("every invariant of every record kind is stated in docs/contract.md under its rule, with its id and statement", () => {
    const all = [...STUDY_LEDGER_INVARIANTS, ...ADJUDICATION_RECORD_INVARIANTS, ...SESSION_LEDGER_INVARIANTS];
    expect(all.length).toBeGreaterThan(10);
    const missing = all.filter((inv) => !section(inv.rule).includes(`\`${inv.id}\` (${kindOf(inv)}): ${inv.statement}`)).map((inv) => `${inv.rule} ${inv.id} (${kindOf(inv)})`);
    expect(missing).toEqual([]);
  });

  // contract: R153
  it("a pilot with a third observation, or awaiting adjudication with one: `ledger check` names the plan's size", () => {
    const three = sampleLedger({
      status: "running",
      observations: [completedObservation(0), completedObservation(1), completedObservation(2)],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0.006, cumulativeCapExceeded: false },
      scheduling: { concurrency: 1, pairs: "sequential", rateEvents: [] },
    });
    const checked = checkAnyLedger("three.json", Buffer.from(JSON.stringify(three)));
    expect(checked.state).toBe("invalid");
    expect(checked.problems).toContain("observations: a pilot plans 2 attempts, the ledger holds 3 (R153 status-follows-observations)");
    const one = sampleLedger({
      status: "awaiting-adjudication",
      observations: [completedObservation(0)],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0.002, cumulativeCapExceeded: false },
    });
    expect(checkAnyLedger("one.json", Buffer.from(JSON.stringify(one))).problems).toContain(
      "status: a pilot awaits adjudication only with both of its 2 attempts; it holds 1 (R153 status-follows-observations)",
    );
    const two = sampleLedger({
      status: "awaiting-adjudication",
      observations: [completedObservation(0), completedObservation(1)],
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0.004, cumulativeCapExceeded: false },
    });
    expect(checkAnyLedger("two.json", Buffer.from(JSON.stringify(two)))).toMatchObject({ state: "finished", valid: true, problems: [] });
  });

  // contract: R150
  it("a study ledger that passed its cap but awaits adjudication: `ledger check` names the flag and the status", () => {
    const passed = sampleLedger({
      status: "awaiting-adjudication",
      observations: [completedObservation(0, 0.05), completedObservation(1, 0.06)],
      budget: { capUsd: 0.1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0.11, cumulativeCapExceeded: true },
    });
    expect(checkAnyLedger("cap.json", Buffer.from(JSON.stringify(passed))).problems).toEqual([
      "budget.cumulativeCapExceeded: is true, but the status is awaiting-adjudication; passing the cap stops the run (blocked or running) (R150 cap-flag)",
    ]);
  });
});

function kindOf(inv: unknown): string {
  if ((STUDY_LEDGER_INVARIANTS as readonly unknown[]).includes(inv)) return "study ledger";
  if ((ADJUDICATION_RECORD_INVARIANTS as readonly unknown[]).includes(inv)) return "adjudication record";
  return "session ledger";
}

describe("the evidence digest", () => {
  const sha = (b: Buffer) => createHash("sha256").update(b).digest();
  const leaf = (name: string, hash: string) => sha(Buffer.concat([Buffer.from([0]), Buffer.from(name), Buffer.from([0]), Buffer.from(hash)]));
  const node = (a: Buffer, b: Buffer) => sha(Buffer.concat([Buffer.from([1]), a, b]));
  const files = [
    { name: "manifest", sha256: "c".repeat(64) },
    { name: "ledger", sha256: "a".repeat(64) },
    { name: "ledger.transcripts/0000.jsonl", sha256: "b".repeat(64) },
  ];

  // contract: R158
  it("is RFC 6962's tree over the leaves sorted by name, the last odd node carried up; any changed, missing or added file is named", () => {
    // Sorted: ledger, ledger.transcripts/0000.jsonl, manifest.
    const expected = node(node(leaf("ledger", "a".repeat(64)), leaf("ledger.transcripts/0000.jsonl", "b".repeat(64))), leaf("manifest", "c".repeat(64))).toString("hex");
    expect(merkleRoot(files)).toBe(expected);
    expect(merkleRoot([...files].reverse())).toBe(expected);
    expect(merkleRoot([])).toBe(sha(Buffer.alloc(0)).toString("hex"));
    const published: Evidence = { algorithm: "sha256-merkle-v1", root: expected, files };
    expect(compareEvidence(published, published)).toEqual([]);
    const changed = files.map((f) => (f.name === "ledger.transcripts/0000.jsonl" ? { ...f, sha256: "d".repeat(64) } : f));
    const now = { ...published, files: [...changed.filter((f) => f.name !== "manifest"), { name: "adjudication", sha256: "e".repeat(64) }] };
    now.root = merkleRoot(now.files);
    expect(compareEvidence(published, now)).toEqual([
      `manifest: the report committed to it (sha256 ${"c".repeat(64)}), but it is not there now`,
      `ledger.transcripts/0000.jsonl: changed since the report was written (sha256 ${"b".repeat(64)} then, ${"d".repeat(64)} now)`,
      `adjudication: was not part of the report's evidence (sha256 ${"e".repeat(64)}); it was added since, or the report was made without it`,
    ]);
  });
});
