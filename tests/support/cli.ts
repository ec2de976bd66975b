import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { compiledCli } from "./compiled-cli.ts";

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  env?: Record<string, string | undefined>;
  cwd?: string;
  timeoutMs?: number;
  /** Gets the child's pid: the runner's own (the launcher runs it in-process), which labels its containers. */
  onSpawn?: (pid: number) => void;
}

/** Runs the shipped `study-runner` launcher as a user would, with a controlled environment. */
export function runCli(args: string[], opts: CliOptions = {}): Promise<CliResult> {
  return startCli(resolve(PROJECT_ROOT, "bin", "study-runner.mjs"), args, opts);
}

/**
 * The same command compiled (tests/support/compiled-cli.ts), for the commands that only read files
 * (`ledger verify`, `ledger check`, `report`) which a test starts many times: the same sources at
 * half the CPU of a start through tsx. Runs, demos, sessions and adjudications use `runCli`.
 */
export async function runCompiledCli(args: string[], opts: CliOptions = {}): Promise<CliResult> {
  return startCli(await compiledCli(), args, opts);
}

function startCli(entry: string, args: string[], opts: CliOptions): Promise<CliResult> {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, DOCKER_HOST: process.env.DOCKER_HOST, TMPDIR: process.env.TMPDIR };
  for (const [k, v] of Object.entries(opts.env ?? {})) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  for (const k of Object.keys(env)) if (env[k] === undefined) delete env[k];
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [entry, ...args], {
      cwd: opts.cwd ?? PROJECT_ROOT,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    if (child.pid !== undefined) opts.onSpawn?.(child.pid);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
    const timer = setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs ?? 120_000);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
}
