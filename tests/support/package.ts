/**
 * The installable package as a user gets it: `npm pack` in this checkout (its prepack compiles
 * dist/ and ships the lock file), then `npm install <tarball>` into an empty folder. The
 * dependencies travel inside the tarball (package.json "bundleDependencies"), so the install
 * runs with --offline: no registry, no network. Shared by tests/integration/package.test.ts
 * and bench/startup.ts.
 */
import { spawn } from "node:child_process";
import { mkdir, readdir } from "node:fs/promises";
import { join } from "node:path";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The environment of npm and of the installed command: none of the npm_* variables `npm test` sets, so the child sees what a person's shell would. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k) && k !== "INIT_CWD" && k !== "NODE_OPTIONS" && v !== undefined) env[k] = v;
  return { ...env, ...extra };
}

/** Runs `command args` in `cwd`; rejects only when it cannot start or outlives `timeoutMs`. */
export function run(command: string, args: readonly string[], opts: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number }): Promise<Run> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(command, args, { cwd: opts.cwd, env: opts.env ?? cleanEnv(), stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
    const timeoutMs = opts.timeoutMs ?? 600_000;
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${command} ${args.join(" ")} did not finish within ${timeoutMs} ms; stderr: ${stderr.slice(-2000)}`));
    }, timeoutMs);
    child.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
}

async function ok(command: string, args: readonly string[], cwd: string): Promise<Run> {
  const r = await run(command, args, { cwd });
  if (r.code !== 0) throw new Error(`${command} ${args.join(" ")} in ${cwd} exited ${r.code}: ${(r.stderr || r.stdout).slice(-3000)}`);
  return r;
}

export interface InstalledPackage {
  /** The tarball `npm pack` wrote. */
  tarball: string;
  /** The folder the package was installed into (empty before). */
  prefix: string;
  /** The installed package's root: `<prefix>/node_modules/study-runner`. */
  root: string;
  /** The command npm linked: `<prefix>/node_modules/.bin/study-runner`. */
  bin: string;
}

/** `npm pack` into `dir`, then `npm install --offline <tarball>` in the empty `dir/install`. */
export async function packAndInstall(dir: string): Promise<InstalledPackage> {
  const packed = await ok("npm", ["pack", "--json", "--pack-destination", dir], PROJECT_ROOT);
  // The JSON report follows the prepack's output (tsc prints nothing when it succeeds).
  const report = JSON.parse(packed.stdout.slice(packed.stdout.indexOf("["))) as Array<{ filename: string }>;
  const tarball = join(dir, report[0]!.filename);
  const prefix = join(dir, "install");
  await mkdir(prefix);
  if ((await readdir(prefix)).length !== 0) throw new Error(`${prefix} is not empty`);
  await ok("npm", ["install", "--offline", "--no-audit", "--no-fund", tarball], prefix);
  return { tarball, prefix, root: join(prefix, "node_modules", "study-runner"), bin: join(prefix, "node_modules", ".bin", "study-runner") };
}
