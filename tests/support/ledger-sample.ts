import type { Ledger, Observation } from "../../src/ledger/schema.ts";
import { reservedObservation as makeReservedObservation } from "../../src/study/observation.ts";

const HASH = "a".repeat(64);
const PIN = "b".repeat(40);

/** A valid header of a cli pilot run with no observations yet. */
export function sampleLedger(overrides: Partial<Ledger> = {}): Ledger {
  return {
    schemaVersion: 1,
    runId: "run-1",
    createdAt: "2026-11-30T05:00:00.000Z",
    protocol: { manifestPath: "/studies/minimal.json", protocolHash: HASH },
    runnerHash: HASH,
    corpus: [{ repository: "ledgerlite", pin: PIN, root: "/checkouts/ledgerlite" }],
    docBridge: { engineRevision: null, bundleHash: null, denyList: ["mcp__doc-bridge__gate_status"] },
    image: { ref: "study-runner/claude:2.1.296", id: "sha256:" + HASH, binarySha256: HASH },
    cliVersion: "2.1.296",
    expectedCliVersion: "2.1.296",
    transport: "cli",
    isolation: "network-none",
    model: "claude-haiku-5-5",
    prices: { "claude-haiku-5-5": { tier1: { input: 0.1, output: 0.5 }, tier2: { input: 0.5, output: 2.5 } } },
    mode: "pilot",
    budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false },
    adjudication: { method: "agent", humanReview: false },
    status: "running",
    observations: [],
    ...overrides,
  };
}

/** An observation just reserved (nothing known yet): the runner's own constructor. */
export function reservedObservation(index: number, overrides: Partial<Observation> = {}): Observation {
  const planned = { index, taskId: "t1", taskIndex: 0, repository: "ledgerlite", pin: PIN, scenario: "repository-only", arm: "repository" as const, repetition: 1 };
  const base = makeReservedObservation(planned, { transport: "cli", cliVersion: "2.1.296", expectedCliVersion: "2.1.296", attemptBudgetUsd: 0.1, reservationUsd: 0.1 });
  return { ...base, ...overrides };
}

/** A completed, settled observation charged `charged` USD. */
export function completedObservation(index: number, charged = 0.002, overrides: Partial<Observation> = {}): Observation {
  return reservedObservation(index, {
    phase: "settled",
    startedAt: "2026-11-30T05:01:00.000Z",
    model: "claude-haiku-5-5",
    tools: ["Glob", "Grep", "Read"],
    mcpServers: [],
    toolCallsByName: { Read: 2 },
    toolCalls: 2,
    inputTokens: 5000,
    outputTokens: 65,
    cacheCreationInputTokens: 500,
    cacheReadInputTokens: 700,
    numTurns: 2,
    cliSubtype: "success",
    isError: false,
    usageComplete: true,
    cliReportedCostUsd: charged,
    computedCostUsd: charged,
    costBasis: { tier: "tier1", source: "per-message" },
    chargedUsd: charged,
    wallTimeMs: 12_000,
    status: "completed",
    answer: "private answer text",
    exportHash: "c".repeat(64),
    containerId: "d".repeat(64),
    ...overrides,
  });
}
