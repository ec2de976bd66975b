import type { Sandbox, SandboxSpec } from "../sandbox/sandbox.ts";
import { CONTAINER } from "../transport/cli/spec.ts";
import { runBounded } from "../sandbox/bounded.ts";

/** The test output kept in the ledger: its last 16 KiB. */
export const TEST_OUTPUT_KEEP_BYTES = 16 * 1024;
export const TEST_TIMEOUT_MS = 2 * 60 * 1000;

export interface TestRun {
  command: string[];
  exitCode: number | null;
  timedOut: boolean;
  output: string;
  truncated: boolean;
  wallTimeMs: number;
}

/**
 * The task's test command after `done`, in a sandbox of its own: the worktree read-only (tests
 * judge the agent's edits, they do not make more), no network and no endpoint, a read-only root,
 * no capabilities, an in-memory /tmp and HOME, the command as an argument array (no shell), bounded
 * time and output. Its exit code and the tail of its output are what is recorded.
 */
export function testSandboxSpec(o: { image: string; worktree: string; command: readonly string[]; labels: Record<string, string>; runtime?: string }): SandboxSpec {
  return {
    image: o.image,
    entrypoint: [o.command[0]!],
    cmd: o.command.slice(1),
    env: { HOME: CONTAINER.home, PATH: "/usr/local/bin:/usr/bin:/bin", LANG: "C.UTF-8", TMPDIR: "/tmp", CI: "1" },
    user: CONTAINER.user,
    workingDir: CONTAINER.workspace,
    worktree: { folder: o.worktree, target: CONTAINER.workspace, readOnly: true },
    userFolder: CONTAINER.home,
    memoryVolumes: [
      { target: "/tmp", bytes: 64 * 1024 ** 2, mode: "1777" },
      { target: CONTAINER.home, bytes: 16 * 1024 ** 2, owner: { uid: 1000, gid: 1000 }, mode: "0700" },
    ],
    endpoints: [],
    limits: { pidsLimit: 128, memoryBytes: 1024 ** 3, nanoCpus: 1e9 },
    security: { readOnlyRoot: true, dropAllCapabilities: true, noNewPrivileges: true },
    network: { mode: "none" },
    labels: o.labels,
    ...(o.runtime !== undefined ? { ociRuntime: o.runtime } : {}),
  };
}

export async function runTestCommand(
  sandbox: Sandbox,
  o: { image: string; worktree: string; command: readonly string[]; labels: Record<string, string>; timeoutMs?: number; runtime?: string },
): Promise<TestRun> {
  let stdout = "";
  let truncated = false;
  const raw = await runBounded(
    sandbox,
    testSandboxSpec(o),
    (line) => {
      stdout += `${line}\n`;
      if (stdout.length > TEST_OUTPUT_KEEP_BYTES) {
        stdout = stdout.slice(-TEST_OUTPUT_KEEP_BYTES);
        truncated = true;
      }
    },
    // A test run prints no result event, so the after-result grace never applies.
    { timeoutMs: o.timeoutMs ?? TEST_TIMEOUT_MS, stdoutLimitBytes: 1024 * 1024 },
  );
  let output = stdout + (raw.stderrTail ? `--- stderr ---\n${raw.stderrTail}` : "");
  if (output.length > TEST_OUTPUT_KEEP_BYTES) {
    output = output.slice(-TEST_OUTPUT_KEEP_BYTES);
    truncated = true;
  }
  return { command: [...o.command], exitCode: raw.exitCode, timedOut: raw.timedOut, output, truncated: truncated || raw.truncated, wallTimeMs: raw.wallTimeMs };
}
