/**
 * The full study (issue 12 acceptance): 36 attempts, each in its own container, through the
 * shipped command; every attempt completes and is reported on stderr as it starts and ends.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { planStudy } from "../../src/plan/plan.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { containersOfRun, ledgerOf, leftovers, preparePipeline, PROGRESS_LINE, runPipeline, stderrLines, summaryOf, type Pipeline } from "../support/pipeline.ts";

let p: Pipeline;
beforeAll(async () => {
  p = await preparePipeline("full");
}, 300_000);
afterAll(() => p?.cleanup());

describe("study-runner --run --transport cli, end to end", () => {
  it("runs all 36 attempts in plan order, all completed, with 72 progress lines", async () => {
    const r = await runPipeline(p, { mode: "run", timeoutMs: 400_000 });
    expect(r.code, r.stderr).toBe(0);
    const summary = summaryOf(r.stdout);
    expect(summary).toMatchObject({
      status: "awaiting-adjudication",
      mode: "full",
      attempts: { planned: 36, run: 36, byStatus: { completed: 36 } },
      usageComplete: true,
      extrapolatedFullRunUsd: null,
    });

    const lines = stderrLines(r.stderr);
    expect(lines).toHaveLength(72);
    for (const line of lines) expect(line).toMatch(PROGRESS_LINE);
    for (let i = 1; i <= 36; i++) {
      expect(lines[2 * (i - 1)]).toMatch(new RegExp(`^study-runner: \\[${i}/36\\] .*: started$`));
      expect(lines[2 * (i - 1) + 1]).toMatch(new RegExp(`^study-runner: \\[${i}/36\\] .*: completed, `));
    }

    const ledger = await ledgerOf(r.run);
    const plan = planStudy((await loadManifest(DEMO_MANIFEST)).manifest, "full");
    expect(ledger.observations.map((o) => [o.task, o.scenario, o.repetition])).toEqual(plan.map((a) => [a.taskId, a.scenario, a.repetition]));
    expect(ledger.observations.every((o) => o.status === "completed" && o.phase === "settled")).toBe(true);
    // Every attempt had a container of its own.
    expect(new Set(ledger.observations.map((o) => o.containerId)).size).toBe(36);
    // Every doc-bridge attempt's search reached the server through the runner's bridge.
    for (const o of ledger.observations.filter((x) => x.arm === "mcp")) {
      expect(o.mcp?.toolCalls, `attempt ${o.index}`).toEqual([expect.objectContaining({ name: "doc.search", isError: false })]);
    }
    const charged = ledger.observations.reduce((s, o) => s + o.chargedUsd!, 0);
    expect(ledger.budget.spentUsd).toBeCloseTo(charged, 9);
    expect(summary.spentUsd).toBe(ledger.budget.spentUsd);
    expect(await containersOfRun(p, ledger.runId)).toEqual([]);
    expect(await leftovers(r.run.tmp)).toEqual([]);
  }, 420_000);
});
