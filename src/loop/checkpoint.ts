import type { Checkpoint } from "./loop.ts";

/**
 * TEST-ONLY (docs/reliability.md): with STUDY_RUNNER_TEST_KILL_AT=<point> in the environment of
 * the shipped command, the runner kills itself with SIGKILL at that checkpoint, so a test can stop
 * it at an exact place between ledger writes and check what a crash there leaves. The command
 * parses the variable once at its entry (src/cli/config/environment.ts); the run itself only ever
 * sees an injected `checkpoint` function.
 */
export function killAtCheckpoint(at: Checkpoint | undefined): ((point: Checkpoint) => void) | undefined {
  if (!at) return undefined;
  return (point) => {
    if (point === at) process.kill(process.pid, "SIGKILL");
  };
}
