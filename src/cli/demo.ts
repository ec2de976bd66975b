import { mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { prepareDemo } from "../../study/demo/setup.ts";
import { DockerRuntime } from "../runtime/docker.ts";
import { DEMO_MANIFEST } from "../util/paths.ts";
import { runCommand } from "./run.ts";

/**
 * The bundled demo, end to end: the demo corpus at its pins, a doc-bridge index per checkout,
 * the fake claude image (built offline), a test login, then the study through the real
 * runner, containers and ledger. Only the model is fake: no network, no credential, no cost.
 */
export async function demoCommand(flags: { workdir?: string; pilot?: boolean; quiet?: boolean }): Promise<number> {
  const workdir = resolve(flags.workdir ?? join(tmpdir(), "study-runner-demo"));
  const setup = await prepareDemo(workdir, new DockerRuntime());
  const ledgers = join(workdir, "ledgers");
  await mkdir(ledgers, { recursive: true, mode: 0o700 });
  const mode = flags.pilot ? "pilot" : "run";
  const output = join(ledgers, `${mode}-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  process.stderr.write(`study-runner demo: corpus and test login in ${workdir}; ledger ${output}\n`);
  process.env.STUDY_MODEL ??= "claude-haiku-5-5";
  process.env.STUDY_BUDGET_USD ??= "1";
  return runCommand({
    manifest: DEMO_MANIFEST,
    transport: "cli",
    pilot: flags.pilot,
    run: !flags.pilot,
    approveBudget: true,
    root: Object.entries(setup.roots).map(([name, dir]) => `${name}=${dir}`),
    output,
    image: setup.image,
    isolation: "offline",
    claudeConfigDir: setup.loginDir,
    quiet: flags.quiet,
  });
}
