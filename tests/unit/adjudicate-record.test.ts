import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdjudicationRecordSchema, type AdjudicationRecord } from "../../src/adjudicate/schema.ts";
import { createRecord, readRecord, writeRecord } from "../../src/adjudicate/store.ts";
import { syntheticLedger, syntheticRecord } from "../support/adjudication-fixtures.ts";

const SHA = "a".repeat(64);
const ledger = syntheticLedger({ mode: "full", failAt: 9 });
const base = () => syntheticRecord(ledger, SHA, { outcomes: { 2: "partial", 3: "incorrect" } });

function problems(record: unknown): string[] {
  const r = AdjudicationRecordSchema.safeParse(record);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
}

describe("the adjudication record's schema", () => {
  it("accepts a consistent record: one item per observation, the blocked one included", () => {
    const r = base();
    expect(problems(r)).toEqual([]);
    expect(r.items).toHaveLength(ledger.observations.length);
    expect(r.items.find((i) => i.observationIndex === 9)).toMatchObject({ outcome: "blocked", score: null });
  });

  it("scores by the rubric: blocked is missing, never a zero", () => {
    const r = base();
    r.items[9]!.score = 0;
    expect(problems(r)).toEqual(["items.9.score: must be null for blocked"]);
    const s = base();
    s.items[2]!.score = 1;
    expect(problems(s)).toEqual(["items.2.score: must be 0.5 for partial"]);
  });

  it("keeps the adjudicator's outcome equal to its verdict, and the runner to blocked or incomplete", () => {
    const r = base();
    r.items[0]!.outcome = "partial";
    r.items[0]!.score = 0.5;
    expect(problems(r)).toEqual(["items.0.outcome: differs from the verdict's outcome"]);
    const s = base();
    Object.assign(s.items[9]!, { outcome: "correct", score: 1 });
    expect(problems(s)).toEqual(["items.9.decidedBy: the runner only decides blocked or incomplete"]);
  });

  it("keeps the budget equal to the runs' charges and open reservations", () => {
    const r = base();
    r.budget.spentUsd += 0.01;
    expect(problems(r)[0]).toMatch(/^budget\.spentUsd: is .* but settled charges plus open reservations sum to/);
  });

  it("allows the answering model as adjudicator only when forced", () => {
    const r = base();
    r.adjudicator.forcedSameModel = false;
    expect(problems(r)).toEqual(["adjudicator.forcedSameModel: the answering model may adjudicate only with --force-same-model"]);
  });

  it("calls a record complete only with one decided item per observation, in the recorded order", () => {
    const r = syntheticRecord(ledger, SHA, { omit: [4] });
    expect(problems(r)).toEqual([]);
    expect(r.status).toBe("running");
    expect(problems({ ...r, status: "complete" })).toEqual(["status: complete needs one decided item per observation"]);
    const swapped = base();
    [swapped.items[0], swapped.items[1]] = [swapped.items[1]!, swapped.items[0]!];
    expect(problems(swapped).some((p) => /items follow order\.observationIndices/.test(p))).toBe(true);
    expect(problems({ ...base(), order: { seed: 1, observationIndices: [0, 0, 1] } })[0]).toMatch(/permutation/);
  });

  it("always says method agent and no human review", () => {
    expect(problems({ ...base(), humanReview: true })).toHaveLength(1);
    expect(problems({ ...base(), method: "human" })).toHaveLength(1);
  });
});

describe("the record as a private file", () => {
  let dir = "";
  let checkout = "";
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "adj-store-"));
    checkout = join(dir, "checkout");
    await mkdir(checkout);
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));
  const context = () => ({ checkouts: [checkout], projectRoot: join(dir, "project") });

  it("is created exclusively with mode 600, rewritten atomically after validation, and read back", async () => {
    const path = join(dir, "adj.json");
    const record = base();
    const handle = await createRecord(path, record, context());
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    await expect(createRecord(path, record, context())).rejects.toThrow(/already exists; an adjudication record is never overwritten/);
    const next: AdjudicationRecord = { ...record, statusReason: "stopped", status: "blocked" };
    await writeRecord(handle, next);
    expect((await readRecord(path)).status).toBe("blocked");
    await expect(writeRecord(handle, { ...next, budget: { ...next.budget, spentUsd: 9 } })).rejects.toThrow(/does not match its schema/);
    expect((await readRecord(path)).budget.spentUsd).toBe(next.budget.spentUsd);
    expect((await stat(path)).mode & 0o777).toBe(0o600);
  });

  it("is refused inside a checkout", async () => {
    await expect(createRecord(join(checkout, "adj.json"), base(), context())).rejects.toThrow(/is inside the checkout/);
  });

  it("never quotes its content when it is damaged", async () => {
    const path = join(dir, "damaged.json");
    await writeFile(path, '{"verdict": "private answer words"');
    const err = await readRecord(path).catch((e: Error) => e);
    expect(String(err)).toMatch(/is not valid JSON/);
    expect(String(err)).not.toContain("private answer words");
    expect(await readFile(path, "utf8")).toContain("private");
  });
});
