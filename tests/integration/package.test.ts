/**
 * The installable package (README, "Install"): `npm pack` in this checkout, installed with
 * --offline into an empty temporary folder outside it, then run there as a user would, the whole
 * demo included (CI runs no second pack and demo of its own: .ci/run).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chmod, mkdtemp, readdir, readFile, realpath, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, relative, sep } from "node:path";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { computeRunnerHash } from "../../src/ledger/runner-hash.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { runLauncher } from "../support/cli.ts";
import { compiledCli } from "../support/compiled-cli.ts";
import { cleanEnv, packAndInstall, run, type InstalledPackage } from "../support/package.ts";

let work: string;
let pkg: InstalledPackage;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-package-"));
  // Where `npm install -g` or a project folder would put it: readable by every user. A runner that is
  // root drops the reference doc-bridge engine to uid 65534, which must read the engine's files.
  await chmod(work, 0o755);
  pkg = await packAndInstall(work);
}, 1_200_000);
afterAll(() => rm(work, { recursive: true, force: true }));

/** The installed command, run in the install folder with a person's environment. */
const installed = (args: string[], timeoutMs = 120_000) => run(pkg.bin, args, { cwd: pkg.prefix, timeoutMs });

describe("the installed package", () => {
  it("installs into an empty folder as the one top-level package, with no TypeScript toolchain, and links its command to the compiled entry", async () => {
    expect(await readdir(join(pkg.prefix, "node_modules"))).toEqual(expect.arrayContaining(["study-runner"]));
    expect((await readdir(join(pkg.prefix, "node_modules"))).filter((n) => !n.startsWith("."))).toEqual(["study-runner"]);
    const deps = await readdir(join(pkg.root, "node_modules"));
    expect(deps).toEqual(expect.arrayContaining(["commander", "dockerode", "zod"]));
    for (const toolchain of ["tsx", "typescript", "esbuild", "vitest"]) expect(deps, toolchain).not.toContain(toolchain);
    // The command is the compiled tree's cli/bin.js as one module (src/cli/runner-bundle.ts).
    expect(await realpath(pkg.bin)).toBe(join(await realpath(pkg.root), "dist", "cli", "study-runner.mjs"));
  });

  it("--version prints the package's version and the pinned Claude Code version; --help is the clone's", async () => {
    const { version } = JSON.parse(await readFile(join(PROJECT_ROOT, "package.json"), "utf8")) as { version: string };
    expect(pkg.tarball.endsWith(`study-runner-${version}.tgz`)).toBe(true);
    const v = await run("npx", ["--offline", "study-runner", "--version"], { cwd: pkg.prefix });
    expect(v).toMatchObject({ code: 0, stdout: `study-runner ${version} (pinned Claude Code CLI ${CLAUDE_CODE_VERSION})\n` });
    const help = await installed(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: study-runner \[options\] \[command\]/);
    expect(help.stdout).toMatch(/^ {2}-V, --version +print the runner's version and the Claude\s+Code version it pins$/m);
    expect(help.stdout).toBe((await runLauncher(["--help"])).stdout);
  });

  // contract: R163
  it("every compiled module loads with Node alone (no tsx, no .ts import left)", async () => {
    const dist = join(pkg.root, "dist");
    const modules = (await readdir(dist, { recursive: true })).filter((f) => f.endsWith(".js") && f !== join("cli", "bin.js")).map((f) => join(dist, f));
    expect(modules.length).toBeGreaterThan(100);
    const script = `for (const m of ${JSON.stringify(modules)}) await import(m); process.stdout.write(String(${modules.length}));`;
    const r = await run(process.execPath, ["--input-type=module", "-e", script], { cwd: pkg.prefix, env: cleanEnv() });
    expect(r.stderr).toBe("");
    expect(r).toMatchObject({ code: 0, stdout: String(modules.length) });
    const tsx = await run(process.execPath, ["--input-type=module", "-e", "import.meta.resolve('tsx')"], { cwd: pkg.root, env: cleanEnv() });
    expect(tsx.code).not.toBe(0);
  });

  // contract: R163
  it("is what the other tiers' runner starts run: the compiled build of the tests is the package's dist/, module for module, byte for byte", async () => {
    // The tests' build compiles each file alone (tests/support/compiled-cli.ts); the package's prepack runs tsc on the whole program.
    const built = dirname(dirname(await compiledCli()));
    const dist = join(pkg.root, "dist");
    // The bundles too: the command (cli/study-runner.mjs) and the doc-bridge engine (mcp/reference-engine.mjs).
    const modules = async (root: string) => (await readdir(root, { recursive: true })).filter((f) => f.endsWith(".js") || f.endsWith(".mjs")).sort();
    const shipped = await modules(dist);
    expect(shipped.length).toBeGreaterThan(100);
    expect(await modules(built)).toEqual(shipped);
    for (const f of shipped) expect((await readFile(join(built, f))).equals(await readFile(join(dist, f))), f).toBe(true);
  });

  // contract: R163
  it("records the runner hash of the clone it was packed from (same sources, image inputs, package.json and lock file)", async () => {
    const url = new URL(`file://${join(pkg.root, "dist", "ledger", "runner-hash.js")}`).href;
    const r = await run(
      process.execPath,
      ["--input-type=module", "-e", `const m = await import(${JSON.stringify(url)}); process.stdout.write(await m.computeRunnerHash(${JSON.stringify(pkg.root)}));`],
      {
        cwd: pkg.prefix,
      },
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(await computeRunnerHash(PROJECT_ROOT));
    // The lock file ships under the one name npm publishes it with; the clone keeps its own.
    expect(await readFile(join(pkg.root, "npm-shrinkwrap.json"))).toEqual(await readFile(join(PROJECT_ROOT, "package-lock.json")));
    await expect(stat(join(PROJECT_ROOT, "npm-shrinkwrap.json"))).rejects.toThrow(/ENOENT/);
  });

  it("ships the runtime's files and none of the checkout's tests, benchmarks or build configuration", async () => {
    const files = (await readdir(pkg.root, { recursive: true })).map((f) => f.split(sep).join("/")).filter((f) => !f.startsWith("node_modules/"));
    for (const f of [
      "dist/cli/bin.js",
      "dist/cli/study-runner.mjs",
      "src/stand-ins/fake-claude/claude.cjs",
      "docker/claude-code/Dockerfile",
      "docker/helpers/with-relay.cjs",
      "study/demo/manifest.json",
      "src/demo/corpus.ts",
      "CHANGELOG.md",
      "README.md",
    ]) {
      expect(files, f).toContain(f);
    }
    const top = new Set(files.map((f) => f.split("/")[0]));
    for (const absent of ["tests", "bench", "scripts", "bin", ".ci", "tsconfig.json", "tsconfig.build.json", "vitest.config.ts", "biome.jsonc", "package-lock.json"])
      expect(top.has(absent), absent).toBe(false);
  });

  it("doctor runs from the package and finds the bundled demo study inside it", async () => {
    const r = await installed(["doctor", "--transport", "cli"]);
    expect(r.stderr).not.toMatch(/internal error/);
    // Exit 2 is the doctor's verdict on an unconfigured machine (no login, no roots); 3 would be a fault.
    expect(r.code).toBeLessThanOrEqual(2);
    expect(r.stdout).toMatch(/^ok {4}node /m);
    expect(r.stdout).toMatch(/^ok {4}docker /m);
    expect(r.stdout).toContain(`ok    manifest         ${join(pkg.root, "study", "demo", "manifest.json")}`);
  });

  // contract: R163
  it("demo from the package runs the whole study in containers built from the package's docker/, adjudicates it and writes the report", async () => {
    const workdir = join(work, "demo");
    // Two attempts at a time (the demo's own flag): the same 36 attempts, adjudication and reports, in less
    // of the suite's time (docs/performance.md, "The test suite"); one at a time is the shared demo's.
    const r = await installed(["demo", "--quiet", "--concurrency", "2", "--workdir", workdir], 900_000);
    expect(r.stderr).not.toMatch(/internal error/);
    expect(r.code, r.stderr).toBe(0);
    // The run's and the adjudication's summaries come first; the last JSON object names the files.
    const { demo } = JSON.parse(r.stdout.slice(r.stdout.lastIndexOf('{\n  "demo"'))) as { demo: { ledger: string; adjudication: string; report: Record<string, string> } };
    expect(relative(workdir, demo.ledger).startsWith("..")).toBe(false);
    const ledger = JSON.parse(await readFile(demo.ledger, "utf8")) as { runnerHash: string; docBridge: { bundleHash: string }; observations: Array<{ status: string }> };
    expect(ledger.runnerHash).toBe(await computeRunnerHash(PROJECT_ROOT));
    expect(ledger.observations.map((o) => o.status)).toEqual(Array(36).fill("completed"));
    // Its doc-bridge arm ran the package's bundle of its compiled server (one module to load, as a
    // clone's engine is), hashed with the server's files and the lock file it shipped with.
    const url = (file: string) => JSON.stringify(new URL(`file://${join(pkg.root, "dist", "mcp", file)}`).href);
    const script = `const { referenceEngineCommand } = await import(${url("preflight.js")}); const { engineBundle } = await import(${url("bundle-hash.js")});
const command = referenceEngineCommand(); const b = await engineBundle(command, process.cwd());
process.stdout.write(JSON.stringify({ command, bundleHash: b.bundleHash, labels: b.files.map((f) => f.label) }));`;
    const e = await run(process.execPath, ["--input-type=module", "-e", script], { cwd: pkg.prefix, env: cleanEnv() });
    expect(e.code, e.stderr).toBe(0);
    const engine = JSON.parse(e.stdout) as { command: string[]; bundleHash: string; labels: string[] };
    expect(engine.command[1]).toMatch(/\/dist\/mcp\/reference-engine\.mjs$/);
    expect(engine.labels).toEqual(expect.arrayContaining(["argv[1] reference-engine.mjs", "dist/mcp/reference-server.js", "npm-shrinkwrap.json"]));
    expect(ledger.docBridge.bundleHash).toBe(engine.bundleHash);
    expect((await readFile(demo.adjudication)).length).toBeGreaterThan(0);
    const reportFiles = Object.values(demo.report);
    expect(reportFiles.length).toBeGreaterThan(0);
    for (const f of reportFiles) expect((await readFile(f)).length, f).toBeGreaterThan(0);
  }, 1_000_000);
});
