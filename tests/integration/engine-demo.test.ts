import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { runCli } from "../support/cli.ts";
import { startSecondEngine } from "../support/second-engine.ts";
import { demoAsMade, type DemoFiles } from "../support/shared-demo.ts";

/**
 * The whole demo (36 attempts, the blind adjudication, the reports) on an engine that shares no
 * files with the runner, compared by `npm run compare-demo` with the suite's demo on the local
 * engine: the same evidence, apart from times, ids and the ledger header's `sandbox`.
 */

const LOCAL_ENGINE = "unix:///var/run/docker.sock";
let secondEngine: string;
let work: string;

/** The last JSON object a command printed (the demo and `report --format inspect` end with one). */
const lastJson = <T>(stdout: string): T => JSON.parse(stdout.slice(stdout.lastIndexOf("\n{\n") + 1)) as T;

/** One side of a comparison as `compare-demo --reuse` reads it: the demo's files, its Inspect logs and its engine. */
async function side(name: string, workdir: string, demo: DemoFiles, dockerHost: string): Promise<void> {
  const inspect = await runCli(["report", "--ledger", demo.ledger, "--adjudication", demo.adjudication, "--format", "inspect", "--out-dir", join(work, `${name}-inspect`)]);
  expect(inspect.code, inspect.stderr).toBe(0);
  const files = { name, tree: PROJECT_ROOT, work: workdir, dockerHost, seconds: 0, ...demo, inspect: lastJson<{ inspect: string }>(inspect.stdout).inspect };
  await writeFile(join(work, `${name}.json`), JSON.stringify(files, null, 2));
}

const compareDemo = (dir: string) => spawnSync(process.execPath, [join(PROJECT_ROOT, "scripts", "compare-demo.mjs"), "--reuse", dir], { cwd: PROJECT_ROOT, encoding: "utf8" });

beforeAll(async () => {
  secondEngine = await startSecondEngine();
  work = await mkdtemp(join(tmpdir(), "sr-engine-demo-"));
}, 180_000);
afterAll(() => rm(work, { recursive: true, force: true }));

describe("the demo on an engine that shares no files with the runner", () => {
  // contract: R256
  it("writes the ledger, record, reports and Inspect logs the local engine's demo writes, apart from the sandbox header", async () => {
    // Read where it was made (nothing is written beside it): its record quotes its ledger by that path.
    const local = await demoAsMade();
    const run = await runCli(["demo", "--quiet", "--workdir", join(work, "current-work")], { env: { DOCKER_HOST: secondEngine }, timeoutMs: 1_200_000 });
    expect(run.code, run.stderr.slice(-3000)).toBe(0);
    const remote = lastJson<{ demo: DemoFiles }>(run.stdout).demo;
    const header = JSON.parse(await readFile(remote.ledger, "utf8")) as { sandbox?: { channel: string; endpoint: string } };
    expect(header.sandbox).toMatchObject({ channel: "engine-api", endpoint: secondEngine });

    await side("base", local.workdir, local.demo, LOCAL_ENGINE);
    await side("current", join(work, "current-work"), remote, secondEngine);
    const same = compareDemo(work);
    expect(same.status, same.stdout + same.stderr).toBe(0);
    for (const file of ["ledger", "adjudication record", "report.md", "report.json", "report.html", "inspect log #1", "inspect log #2"]) {
      expect(same.stdout).toContain(`${file}: same`);
    }
    expect(same.stdout).toContain('(explained) $.sandbox.channel: base "host-paths", current "engine-api"');

    // Told that both sides ran on the local engine, the header's difference is no longer explained.
    const current = JSON.parse(await readFile(join(work, "current.json"), "utf8")) as Record<string, unknown>;
    await writeFile(join(work, "current.json"), JSON.stringify({ ...current, dockerHost: LOCAL_ENGINE }));
    const claimed = compareDemo(work);
    expect(claimed.status).toBe(1);
    expect(claimed.stdout).toMatch(/ledger: 2 difference\(s\)\n {2}\$\.sandbox\.channel: base "host-paths", current "engine-api"/);
  }, 1_500_000);
});
