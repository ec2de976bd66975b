import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { inject } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { compiledCli, compiledRunner } from "./compiled-cli.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** Set by tests/support/compiled-cli-setup.ts: this tier's runner starts use the compiled build. */
    compiledRunner: boolean;
  }
}

/** The launcher a person runs in a clone: the sources through tsx. */
export const LAUNCHER = resolve(PROJECT_ROOT, "bin", "study-runner.mjs");

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

/**
 * The script this tier's runner starts run: the compiled build of today's sources in the tiers
 * whose globalSetup builds it (host, integration, conformance: tests/support/compiled-cli.ts), the
 * launcher elsewhere (the unit tier starts no runner).
 */
export async function runnerEntry(): Promise<string> {
  return inject("compiledRunner") ? compiledRunner() : LAUNCHER;
}

/** Runs the `study-runner` command with a controlled environment, started as `runnerEntry` says. */
export async function runCli(args: string[], opts: CliOptions = {}): Promise<CliResult> {
  return runEntry(await runnerEntry(), args, opts);
}

/** Runs bin/study-runner.mjs, the launcher a person runs in a clone, in every tier: for the tests about the launcher. */
export function runLauncher(args: string[], opts: CliOptions = {}): Promise<CliResult> {
  return runEntry(LAUNCHER, args, opts);
}

/** The compiled command in every tier (tests/support/compiled-cli.ts), also where `runCli` starts the launcher. */
export async function runCompiledCli(args: string[], opts: CliOptions = {}): Promise<CliResult> {
  return runEntry(await compiledCli(), args, opts);
}

/** `node entry ...args` with runCli's environment: only PATH, HOME, DOCKER_HOST, TMPDIR of this process, then `opts.env`. */
export function runEntry(entry: string, args: string[], opts: CliOptions): Promise<CliResult> {
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
