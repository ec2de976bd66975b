import type { Checkpoint } from "./loop.ts";

/**
 * TEST-ONLY (docs/reliability.md): with STUDY_RUNNER_TEST_KILL_AT=<point> in the environment of
 * the shipped command, the runner kills itself with SIGKILL at that checkpoint, so a test can stop
 * it at an exact place between ledger writes and check what a crash there leaves. Read once, at
 * the command's entry; the run itself only ever sees an injected `checkpoint` function.
 */
export function killAtCheckpoint(env: NodeJS.ProcessEnv): ((point: Checkpoint) => void) | undefined {
  const at = env.STUDY_RUNNER_TEST_KILL_AT;
  if (!at) return undefined;
  return (point) => {
    if (point === at) process.kill(process.pid, "SIGKILL");
  };
}
