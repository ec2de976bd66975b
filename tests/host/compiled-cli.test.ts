/**
 * The compiled runner the host, integration and conformance tiers start instead of the launcher
 * (tests/support/compiled-cli.ts) must be the same program: what it prints for the read-only
 * commands is what a person's `node bin/study-runner.mjs` prints.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { LAUNCHER, runCompiledCli, runEntry, runLauncher, runnerEntry } from "../support/cli.ts";
import { BUILD_PREFIX, compiledCli, compiledRunner } from "../support/compiled-cli.ts";
import { completedObservation, sampleLedger } from "../support/ledger-sample.ts";

let dir: string;
let ledger: string;

// The build (tests/support/compiled-cli.ts) when this state of the sources has none yet.
beforeAll(() => compiledCli(), 300_000);

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "sr-compiled-cli-"));
  ledger = join(dir, "ledger.json");
  const l = sampleLedger({ status: "awaiting-adjudication", observations: [completedObservation(0)] });
  l.budget.spentUsd = l.observations[0]!.chargedUsd!;
  await writeFile(ledger, JSON.stringify(l, null, 2), { mode: 0o600 });
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe("the tests' compiled runner", () => {
  it("is built one level under the project root, as dist/ is, so it resolves the clone's files", async () => {
    const bin = await compiledCli();
    expect(basename(dirname(dirname(bin)))).toMatch(new RegExp(`^\\${BUILD_PREFIX}[0-9a-f]{16}$`));
    expect(dirname(dirname(dirname(bin)))).toBe(PROJECT_ROOT);
  });

  it("is what this tier's runner starts run (`runCli`), not the launcher", async () => {
    expect(await runnerEntry()).toBe(await compiledRunner());
    expect(await runnerEntry()).not.toBe(LAUNCHER);
  });

  it("prints what the launcher prints for ledger check, ledger verify and report, with the same exit codes", async () => {
    for (const args of [["ledger", "check", ledger, "--json"], ["ledger", "verify", ledger], ["report", "--ledger", ledger, "--format", "json"], ["--version"]]) {
      const [launcher, compiled] = await Promise.all([runLauncher(args), runCompiledCli(args)]);
      expect(compiled, args.join(" ")).toEqual(launcher);
    }
    // Not two empty answers: the check read the ledger.
    const check = JSON.parse((await runCompiledCli(["ledger", "check", ledger, "--json"])).stdout) as { state: string };
    expect(check.state).toBeTypeOf("string");
  }, 120_000);

  // contract: R163
  it("starts from one module, as the package's command does: ledger verify loads no other file of the compiled tree", async () => {
    const bin = await compiledCli();
    const tree = dirname(dirname(bin));
    // Every module Node's ES loader loads, named in a file (the hook runs on the loader's own thread).
    const loaded = join(dir, "loaded.txt");
    const hook = join(dir, "hook.mjs");
    await writeFile(
      hook,
      `import { appendFileSync } from "node:fs";\nexport async function load(url, context, next) { appendFileSync(${JSON.stringify(loaded)}, url + "\\n"); return next(url, context); }\n`,
    );
    const register = join(dir, "register.mjs");
    await writeFile(register, `import { register } from "node:module";\nregister(${JSON.stringify(pathToFileURL(hook).href)});\n`);
    const r = await runEntry(bin, ["ledger", "verify", ledger], { env: { NODE_OPTIONS: `--import=${pathToFileURL(register).href}` } });
    expect(r, r.stderr).toEqual(await runLauncher(["ledger", "verify", ledger]));
    const urls = (await readFile(loaded, "utf8")).split("\n").filter((u) => u.startsWith("file:"));
    expect(urls.length).toBeGreaterThan(0);
    expect(urls.filter((u) => fileURLToPath(u).startsWith(`${tree}/`))).toEqual([pathToFileURL(bin).href]);
  }, 120_000);
});
