import type { Manifest } from "../manifest/schema.ts";
import type { Arm, Mode } from "../terms/terms.ts";

export type { Mode } from "../terms/terms.ts";

export interface PlannedAttempt {
  /** 0-based position in run order. */
  index: number;
  taskId: string;
  taskIndex: number;
  repository: string;
  pin: string;
  scenario: string;
  arm: Arm;
  /** 1-based repetition number. */
  repetition: number;
}

/**
 * The fixed, counterbalanced plan. Tasks in manifest order, repetitions in order; within a
 * (task, repetition) pair the repository-only arm goes first when task index + repetition
 * index is even, the doc-bridge arm first when it is odd.
 */
export function planStudy(manifest: Manifest, mode: Mode): PlannedAttempt[] {
  const tasks = mode === "pilot" ? manifest.tasks.slice(0, 1) : manifest.tasks;
  const repetitions = mode === "pilot" ? 1 : manifest.repetitions;
  const [first, second] = manifest.scenarios as [string, string];
  const attempts: PlannedAttempt[] = [];
  tasks.forEach((task, taskIndex) => {
    for (let r = 0; r < repetitions; r++) {
      const arms: Array<[string, Arm]> = [
        [first, "repository"],
        [second, "mcp"],
      ];
      if ((taskIndex + r) % 2 === 1) arms.reverse();
      for (const [scenario, arm] of arms) {
        attempts.push({
          index: attempts.length,
          taskId: task.id,
          taskIndex,
          repository: task.repository,
          pin: manifest.repositories[task.repository]!,
          scenario,
          arm,
          repetition: r + 1,
        });
      }
    }
  });
  return attempts;
}

/** Repositories the plan touches, in first-use order. */
export function plannedRepositories(plan: readonly PlannedAttempt[]): string[] {
  return [...new Set(plan.map((a) => a.repository))];
}
