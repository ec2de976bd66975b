import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { makeDemoCorpus } from "../../study/demo/corpus.ts";
import { DEMO_MANIFEST } from "../util/paths.ts";
import { runCommand } from "./run.ts";

/**
 * The bundled demo: makes the three demo repositories (deterministic, so they match the
 * pins in study/demo/manifest.json) and runs the demo study over them.
 */
export async function demoCommand(flags: { workdir?: string }): Promise<number> {
  const workdir = resolve(flags.workdir ?? join(tmpdir(), "study-runner-demo"));
  const corpus = await makeDemoCorpus(join(workdir, "corpus"));
  process.stderr.write(`study-runner demo: corpus in ${join(workdir, "corpus")}\n`);
  return runCommand({
    manifest: DEMO_MANIFEST,
    transport: "cli",
    dryRun: true,
    run: true,
    root: Object.entries(corpus).map(([name, { dir }]) => `${name}=${dir}`),
  });
}
