import { readFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { sumUsd } from "../../src/cost/money.ts";
import type { Ledger, Observation } from "../../src/ledger/schema.ts";
import { ManifestSchema, type Manifest } from "../../src/manifest/schema.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { itemIdFor } from "../../src/adjudicate/prompt.ts";
import { OUTCOME_SCORES, type AdjudicationRecord, type Item, type Outcome } from "../../src/adjudicate/schema.ts";
import { completedObservation, reservedObservation, sampleLedger } from "./ledger-sample.ts";

/** The bundled demo manifest, its bytes' hash and its parsed content. */
export const DEMO_BYTES = readFileSync(DEMO_MANIFEST);
export const DEMO_HASH = createHash("sha256").update(DEMO_BYTES).digest("hex");
export const DEMO: Manifest = ManifestSchema.parse(JSON.parse(DEMO_BYTES.toString("utf8")));

export interface SyntheticRun {
  mode: "pilot" | "full";
  /** The attempt (0-based) that ends `failed`; the run stops there (blocked). */
  failAt?: number;
  /** Per-observation answer override. */
  answers?: Record<number, string | null>;
}

/**
 * A ledger of the demo plan with made-up but consistent numbers: the doc-bridge arm uses more
 * input tokens and one more tool call, wall time varies by index. Valid against the ledger schema.
 */
export function syntheticLedger(run: SyntheticRun): Ledger {
  const plan = planStudy(DEMO, run.mode);
  const end = run.failAt === undefined ? plan.length : run.failAt + 1;
  const charged: number[] = [];
  const observations: Observation[] = plan.slice(0, end).map((a) => {
    const mcp = a.arm === "mcp";
    const base = {
      task: a.taskId,
      scenario: a.scenario,
      arm: a.arm,
      repository: a.repository,
      pin: a.pin,
      repetition: a.repetition,
    };
    if (a.index === run.failAt) {
      const o = reservedObservation(a.index, {
        ...base,
        phase: "settled",
        status: "failed",
        chargedUsd: 0.1,
        setupProblems: [],
        cliSubtype: "error_during_execution",
        exitCode: 1,
        wallTimeMs: 900,
        toolCalls: 1,
      });
      charged.push(0.1);
      return o;
    }
    const cost = mcp ? 0.0014 : 0.0011;
    charged.push(cost);
    const answer = run.answers && a.index in run.answers ? run.answers[a.index]! : `answer ${a.index}: see docs/x.md`;
    return completedObservation(a.index, cost, {
      ...base,
      inputTokens: (mcp ? 11_500 : 8_900) + a.index,
      outputTokens: mcp ? 200 : 150,
      cacheCreationInputTokens: 800,
      cacheReadInputTokens: mcp ? 3_200 : 2_400,
      toolCalls: mcp ? 4 : 3,
      toolCallsByName: mcp ? { Glob: 1, Grep: 1, Read: 1, "mcp__doc-bridge__doc_search": 1 } : { Glob: 1, Grep: 1, Read: 1 },
      wallTimeMs: 500 + 37 * a.index + (mcp ? 300 : 0),
      answer,
    });
  });
  const failed = run.failAt !== undefined;
  return sampleLedger({
    runId: `run-synthetic-${run.mode}`,
    protocol: { manifestPath: DEMO_MANIFEST, protocolHash: DEMO_HASH },
    corpus: Object.entries(DEMO.repositories).map(([repository, pin]) => ({ repository, pin })),
    mode: run.mode,
    budget: { capUsd: 5, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: sumUsd(charged), cumulativeCapExceeded: false },
    status: failed ? "blocked" : "awaiting-adjudication",
    ...(failed
      ? { statusReason: `attempt ${run.failAt! + 1} (${plan[run.failAt!]!.taskId}, ${plan[run.failAt!]!.scenario}, repetition ${plan[run.failAt!]!.repetition}) ended failed: exit code 1` }
      : {}),
    observations,
  });
}

/**
 * A record for `ledger` whose adjudicator runs were all free (no run), with `outcomes` per
 * observation index (default correct for completed, blocked otherwise); `omit` leaves items out
 * (a record that stopped early: status running).
 */
export function syntheticRecord(ledger: Ledger, ledgerSha256: string, opts: { outcomes?: Record<number, Outcome>; omit?: number[]; seed?: number } = {}): AdjudicationRecord {
  const order = ledger.observations.map((o) => o.index);
  const omit = new Set(opts.omit ?? []);
  const items: Item[] = [];
  for (const [position, index] of order.entries()) {
    if (omit.has(index)) break;
    const o = ledger.observations[index]!;
    const outcome: Outcome = opts.outcomes?.[index] ?? (o.status === "completed" ? "correct" : "blocked");
    const byAdjudicator = outcome !== "blocked";
    items.push({
      observationIndex: index,
      task: o.task,
      scenario: o.scenario,
      repetition: o.repetition,
      itemId: itemIdFor(ledger.runId, index),
      position,
      outcome,
      score: OUTCOME_SCORES[outcome] as Item["score"],
      decidedBy: "runner",
      reason: byAdjudicator ? "the answer is empty" : `the attempt ended ${o.status}; there is no answer to grade`,
      verdict: null,
      maskedTerms: {},
      run: null,
    });
    // Fixture items are "runner" decided for brevity; only blocked/incomplete may be runner-decided.
    if (byAdjudicator && outcome !== "incomplete") {
      const item = items.at(-1)!;
      item.decidedBy = "adjudicator";
      item.reason = "adjudicator verdict";
      item.verdict = {
        outcome: outcome as "correct" | "partial" | "incorrect",
        propositions: [{ id: "P1", verdict: outcome === "correct" ? "supported" : outcome === "partial" ? "partial" : "missing", citation: "valid", reason: "VERDICT-TEXT" }],
        contradictions: ["VERDICT-TEXT"],
        reasons: "VERDICT-TEXT",
      };
      item.run = {
        phase: "settled",
        reservationUsd: 0.1,
        startedAt: "2026-11-30T05:00:00.000Z",
        containerId: "e".repeat(64),
        exportHash: "c".repeat(64),
        model: "claude-haiku-5-5",
        tools: ["Glob", "Grep", "Read"],
        toolCalls: 2,
        toolCallsByName: { Read: 2 },
        inputTokens: 5000,
        outputTokens: 100,
        cacheCreationInputTokens: 0,
        cacheReadInputTokens: 0,
        numTurns: 3,
        cliSubtype: "success",
        isError: false,
        usageComplete: true,
        cliReportedCostUsd: 0.001,
        computedCostUsd: 0.001,
        costBasis: null,
        setupProblems: [],
        costProblem: null,
        exitCode: 0,
        timedOut: false,
        truncated: false,
        wallTimeMs: 800,
        status: "completed",
        chargedUsd: 0.001,
      };
    }
  }
  const spent = sumUsd(items.map((i) => i.run?.chargedUsd ?? 0));
  const complete = items.length === order.length;
  return {
    schemaVersion: 1,
    kind: "adjudication",
    adjudicationId: "adj-fixture",
    createdAt: "2026-11-30T06:00:00.000Z",
    method: "agent",
    humanReview: false,
    ledger: {
      path: "/private/ledger.json",
      runId: ledger.runId,
      protocolHash: ledger.protocol.protocolHash,
      sha256: ledgerSha256,
      status: ledger.status,
      mode: ledger.mode,
      observations: ledger.observations.length,
    },
    adjudicator: {
      model: "claude-haiku-5-5",
      answeringModel: ledger.model,
      sameModel: ledger.model === "claude-haiku-5-5",
      forcedSameModel: true,
      transport: "cli",
      image: { ref: "study-runner/fake-claude:2.1.296", id: "sha256:" + "f".repeat(64), binarySha256: "f".repeat(64) },
      cliVersion: "2.1.296",
      expectedCliVersion: "2.1.296",
      isolation: "offline",
    },
    order: { seed: opts.seed ?? 1, observationIndices: order },
    masking: { replacement: "[masked]", terms: ["scenario doc-bridge"] },
    budget: { capUsd: 1, itemBudgetUsd: 0.1, reservedUsd: 0, spentUsd: spent, cumulativeCapExceeded: false },
    status: complete ? "complete" : "running",
    items,
  };
}
