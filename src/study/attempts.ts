import type { Ledger, Observation } from "../ledger/schema.ts";
import type { PlannedAttempt } from "../plan/plan.ts";
import { runLoop, type Checkpoint, type LoopEnd, type LoopProgress, type RunKind } from "../loop/loop.ts";

/** What a transport tells the loop about its attempts; the naming and the plan are the study's. */
export type AttemptKind = Omit<RunKind<PlannedAttempt, Observation>, "noun" | "number" | "describe">;

/** Runs a study's planned attempts, in plan order, through the one bookkeeping loop. */
export function runAttempts(o: {
  kind: AttemptKind;
  plan: readonly PlannedAttempt[];
  ledger: Ledger;
  capUsd: number;
  persist(): Promise<void>;
  progress: LoopProgress<PlannedAttempt, Observation>;
  signal?: AbortSignal;
  checkpoint?: (point: Checkpoint) => void;
}): Promise<LoopEnd> {
  return runLoop({
    kind: {
      noun: "attempt",
      number: (a) => a.index + 1,
      describe: (a) => `attempt ${a.index + 1} (${a.taskId}, ${a.scenario}, repetition ${a.repetition})`,
      ...o.kind,
    },
    units: o.plan,
    book: o.ledger,
    capUsd: o.capUsd,
    doneStatus: "awaiting-adjudication",
    persist: o.persist,
    progress: o.progress,
    signal: o.signal,
    checkpoint: o.checkpoint,
  });
}
