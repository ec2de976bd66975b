import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { parseManifest } from "../../src/manifest/load.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";

const { manifest } = parseManifest(readFileSync(DEMO_MANIFEST), DEMO_MANIFEST);

describe("planStudy", () => {
  it("the pilot is the first task, both scenarios, one repetition", () => {
    const plan = planStudy(manifest, "pilot");
    expect(plan.map((a) => [a.taskId, a.scenario, a.repetition])).toEqual([
      ["ledgerlite-rounding", "repository-only", 1],
      ["ledgerlite-rounding", "doc-bridge", 1],
    ]);
  });

  it("the full run is every task x repetition x scenario, 36 for 6 x 3 x 2", () => {
    const plan = planStudy(manifest, "full");
    expect(plan).toHaveLength(36);
    expect(new Set(plan.map((a) => `${a.taskId}/${a.scenario}/${a.repetition}`)).size).toBe(36);
    expect(plan.map((a) => a.index)).toEqual([...Array(36).keys()]);
  });

  it("alternates the scenario order with the parity of task index + repetition index", () => {
    const plan = planStudy(manifest, "full");
    for (let i = 0; i < plan.length; i += 2) {
      const [a, b] = [plan[i]!, plan[i + 1]!];
      expect(a.taskId).toBe(b.taskId);
      expect(a.repetition).toBe(b.repetition);
      const even = (a.taskIndex + a.repetition - 1) % 2 === 0;
      expect([a.arm, b.arm]).toEqual(even ? ["repository", "mcp"] : ["mcp", "repository"]);
    }
    // Spelled out for the first two tasks, so a changed rule cannot hide behind the helper above.
    expect(plan.slice(0, 12).map((a) => a.arm[0])).toEqual(["r", "m", "m", "r", "r", "m", "m", "r", "r", "m", "m", "r"]);
  });

  it("keeps the manifest's task order and pins each attempt to its repository's commit", () => {
    const plan = planStudy(manifest, "full");
    expect([...new Set(plan.map((a) => a.taskId))]).toEqual(manifest.tasks.map((t) => t.id));
    for (const a of plan) expect(a.pin).toBe(manifest.repositories[a.repository]);
  });
});
