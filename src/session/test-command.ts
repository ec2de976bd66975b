import type { ContainerRuntime, ContainerSpec } from "../sandbox/port.ts";
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
 * The task's test command after `done`, in a container of its own: the worktree mounted
 * read-only (tests judge the agent's edits, they do not make more), no network, a read-only root,
 * no capabilities, a tmpfs /tmp and HOME, the command as an argument array (no shell), bounded
 * time and output. Its exit code and the tail of its output are what is recorded.
 */
export function testContainerSpec(o: { image: string; worktree: string; command: readonly string[]; labels: Record<string, string>; runtime?: string }): ContainerSpec {
  return {
    image: o.image,
    entrypoint: [o.command[0]!],
    cmd: o.command.slice(1),
    env: { HOME: CONTAINER.home, PATH: "/usr/local/bin:/usr/bin:/bin", LANG: "C.UTF-8", TMPDIR: "/tmp", CI: "1" },
    user: CONTAINER.user,
    workingDir: CONTAINER.workspace,
    mounts: [{ source: o.worktree, target: CONTAINER.workspace, readOnly: true }],
    tmpfs: { "/tmp": "rw,nosuid,nodev,size=64m,mode=1777", [CONTAINER.home]: "rw,nosuid,nodev,size=16m,uid=1000,gid=1000,mode=0700" },
    readOnlyRootfs: true,
    networkMode: "none",
    capDrop: ["ALL"],
    securityOpt: ["no-new-privileges"],
    pidsLimit: 128,
    memoryBytes: 1024 ** 3,
    nanoCpus: 1e9,
    labels: o.labels,
    ...(o.runtime !== undefined ? { runtime: o.runtime } : {}),
  };
}

export async function runTestCommand(
  runtime: ContainerRuntime,
  o: { image: string; worktree: string; command: readonly string[]; labels: Record<string, string>; timeoutMs?: number; runtime?: string },
): Promise<TestRun> {
  let stdout = "";
  let truncated = false;
  const raw = await runBounded(
    runtime,
    testContainerSpec(o),
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
