/**
 * The runner compiled once per state of its sources, which the host, integration and conformance
 * tiers start instead of the launcher. The clone's launcher (bin/study-runner.mjs) runs the sources
 * through tsx, which costs about twice the CPU of the compiled code at every start
 * (docs/performance.md, "The test suite"), and those tiers start the runner some hundreds of times
 * (runs, demos, sessions, adjudications, `ledger verify`). Their globalSetup
 * (tests/support/compiled-cli-setup.ts) builds it and tells `runCli` and the pipeline helpers
 * (tests/support/cli.ts, pipeline.ts) to start it. The launcher stays covered: `runLauncher` and
 * `{ launcher: true }` start it where a test is about what a person running a clone gets (a whole
 * pilot in pipeline-pilot.test.ts, `--help` against the package's, the doctor's index command, the
 * doc-bridge index of the sources' engine; tests/host/compiled-cli.test.ts compares the two), and
 * tests/integration/package.test.ts runs the installed package's compiled command.
 *
 * The build is the package's (`npm pack`'s prepack: tsconfig.build.json, relative `.ts` imports
 * rewritten to `.js`; the same bytes, each file compiled alone: `transpileBuild`, checked against
 * the package's dist/ by tests/integration/package.test.ts), type checks left to `tsc --noEmit`,
 * into `<root>/.test-dist-<key>/`: one level under the project root like dist/, so every path the
 * code resolves from its own location (the project root, the demo manifest, docker/, the lock file
 * and the sources the runner hash covers, so a ledger records the clone's `runnerHash`) is the
 * clone's. It is not dist/ itself, which the package test's `npm pack` deletes and rebuilds while
 * other files run. The key hashes every source, the tsconfigs, the compiler's and bundler's
 * versions and this file, so an edited source gets a new build before its next test; the first
 * file that asks builds it under a lock, the others wait and find it made. What differs is what
 * the installed package differs in: the doc-bridge reference engine is the package's bundle of the
 * compiled server (its bundle hash and engine revision are the build's, not the clone's esbuild
 * bundle's), so `compiledRunner` also files the demo corpus's indexes for it. The command started
 * is the package's too: the tree's cli/bin.js and all it imports as one module
 * (src/cli/runner-bundle.ts), each module in it resolving paths from its own place in the tree.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { lock } from "proper-lockfile";
import ts from "typescript";
import { bundleCompiledRunner, RUNNER_BUNDLE_NAME } from "../../src/cli/runner-bundle.ts";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { defaultIndexRoot } from "../../src/mcp/index-store.ts";
import { bundleCompiledServer } from "../../src/mcp/reference-bundle.ts";
import { DEMO_MANIFEST, PROJECT_ROOT } from "../../src/util/paths.ts";

/** Build folders are named `<prefix><key>`, directly in the project root (.gitignore). */
export const BUILD_PREFIX = ".test-dist-";
/** A build of older sources is removed when a newer one is made and it was not used for this long. */
const STALE_BUILD_MS = 60 * 60_000;
/** A process waits for another's build (or indexes) for up to about five minutes. */
const LOCK_RETRIES = { retries: 600, minTimeout: 200, maxTimeout: 500 };

async function sourceKey(): Promise<string> {
  const hash = createHash("sha256");
  // The compiler, and the bundler of the package's engine (bundleCompiledServer).
  const version = (name: string) => (createRequire(import.meta.url)(`${name}/package.json`) as { version: string }).version;
  hash.update(`typescript ${version("typescript")}\nesbuild ${version("esbuild")}\n`);
  for (const name of ["tsconfig.json", "tsconfig.build.json"]) hash.update(`${name}\0${await readFile(join(PROJECT_ROOT, name))}\0`);
  // How it builds (this file): a change to the build is a new build, as a change to a source is.
  hash.update(`build\0${await readFile(fileURLToPath(import.meta.url))}\0`);
  const files = (await readdir(join(PROJECT_ROOT, "src"), { recursive: true })).filter((f) => f.endsWith(".ts")).sort();
  for (const file of files) hash.update(`${file}\0${await readFile(join(PROJECT_ROOT, "src", file))}\0`);
  return hash.digest("hex").slice(0, 16);
}

/** `node ...args`; resolves with what it printed, rejects naming `what` when it fails. */
function node(what: string, args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, args, { cwd: opts.cwd, env: opts.env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => (out += d.toString("utf8")));
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolvePromise(out) : reject(new Error(`${what} exited ${code}: ${out.slice(-3000)}`))));
  });
}

/**
 * The sources compiled as tsconfig.build.json says, each file on its own by the pinned compiler
 * (`transpileModule`): the same bytes as `tsc -p tsconfig.build.json --noCheck`, because
 * tsconfig.json sets `isolatedModules` (no file's output depends on another's, as tsx and esbuild
 * need too), without building the whole program first: 4.4 s of CPU and 2.9 s against 9.9 s and
 * 6.5 s here, and a globalSetup holds every test until it is done.
 */
async function transpileBuild(outDir: string): Promise<void> {
  const configFile = join(PROJECT_ROOT, "tsconfig.build.json");
  const config = ts.getParsedCommandLineOfConfigFile(
    configFile,
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(`${configFile}: ${ts.flattenDiagnosticMessageText(d.messageText, "\n")}`);
      },
    },
  );
  if (config?.errors.length) throw new Error(`${configFile}: ${config.errors.map((d) => ts.flattenDiagnosticMessageText(d.messageText, " ")).join("; ")}`);
  if (!config?.options.rootDir) throw new Error(`${configFile}: no rootDir to compile from`);
  if (!config.options.isolatedModules) throw new Error(`${configFile}: isolatedModules is off, so files cannot be compiled one at a time`);
  // Every file is an ES module ("type": "module"), which transpileModule cannot tell from NodeNext alone.
  const compilerOptions = { ...config.options, module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler };
  for (const file of config.fileNames) {
    if (file.endsWith(".d.ts")) continue;
    const emitted = ts.transpileModule(await readFile(file, "utf8"), { compilerOptions, fileName: file, reportDiagnostics: true });
    if (emitted.diagnostics?.length) throw new Error(`${file}: ${emitted.diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, " ")).join("; ")}`);
    const target = join(outDir, relative(config.options.rootDir, file).replace(/\.ts$/, ".js"));
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, emitted.outputText);
  }
}

/** Older builds nobody used for an hour. */
async function pruneStale(keep: string): Promise<void> {
  for (const name of await readdir(PROJECT_ROOT)) {
    if (!name.startsWith(BUILD_PREFIX) || name === keep) continue;
    const path = join(PROJECT_ROOT, name);
    const s = await stat(path).catch(() => undefined);
    if (s?.isDirectory() && Date.now() - s.mtimeMs > STALE_BUILD_MS) await rm(path, { recursive: true, force: true });
  }
}

let built: Promise<string> | undefined;

/** The compiled command of today's sources (`<root>/.test-dist-<key>/cli/study-runner.mjs`, the package's "bin"), built if need be. */
export function compiledCli(): Promise<string> {
  built ??= (async () => {
    const name = `${BUILD_PREFIX}${await sourceKey()}`;
    const dir = join(PROJECT_ROOT, name);
    const bin = join(dir, "cli", RUNNER_BUNDLE_NAME);
    if (existsSync(bin)) return bin;
    const release = await lock(PROJECT_ROOT, { lockfilePath: `${dir}.lock`, realpath: false, stale: 60_000, retries: LOCK_RETRIES });
    try {
      if (existsSync(bin)) return bin;
      // Built beside and renamed into place: a reader never finds half a build.
      const temp = `${dir}.${process.pid}.tmp`;
      await rm(temp, { recursive: true, force: true });
      await transpileBuild(temp);
      // The package's engine beside its compiled server, as the package's build makes it.
      bundleCompiledServer(join(temp, "mcp"), PROJECT_ROOT);
      // And the command as one module, as the package's build makes it.
      await bundleCompiledRunner(temp);
      await rename(temp, dir);
      await pruneStale(name);
      return bin;
    } finally {
      await release();
    }
  })();
  return built;
}

/**
 * The doc-bridge indexes of the demo corpus as the build's reference server names them. An index
 * is filed under the engine revision, the hash of the server's own file (src/mcp/reference-server.ts),
 * so the compiled server looks for other files than the ones a test's `prepareDemo` (the sources,
 * in this process) writes. The demo corpus is the same commits wherever it is made, and indexes
 * are filed by repository and pin, not by folder: built once into this process's index folder
 * (where the runner finds the test's own), with the export's exclusions (`index --manifest
 * --repository`, as `demo` builds them), they serve every demo checkout a test makes. The files are
 * listed beside the build and made again when one is missing.
 */
async function compiledDemoIndexes(buildDir: string): Promise<void> {
  const indexRoot = defaultIndexRoot();
  const record = join(buildDir, `demo-indexes-${createHash("sha256").update(indexRoot).digest("hex").slice(0, 16)}.json`);
  const made = async () => {
    const files = await readFile(record, "utf8").then(
      (t) => JSON.parse(t) as string[],
      () => undefined,
    );
    return files?.every((f) => existsSync(f)) === true;
  };
  if (await made()) return;
  const release = await lock(buildDir, { lockfilePath: `${record}.lock`, realpath: false, stale: 60_000, retries: LOCK_RETRIES });
  const work = await mkdtemp(join(tmpdir(), "sr-compiled-indexes-"));
  try {
    if (await made()) return;
    const server = join(buildDir, "mcp", "reference-server.js");
    const files: string[] = [];
    for (const [name, { dir }] of Object.entries(await makeDemoCorpus(join(work, "corpus")))) {
      const env = { PATH: process.env.PATH, HOME: process.env.HOME, STUDY_RUNNER_DOC_INDEX: indexRoot };
      const out = await node(`${server} index --repository ${name}`, [server, "index", "--manifest", DEMO_MANIFEST, "--repository", name], { cwd: dir, env });
      const file = / into (\S+)\n?$/.exec(out)?.[1];
      if (file === undefined) throw new Error(`${server} index --repository ${name} named no index file: ${out.slice(-1000)}`);
      files.push(file);
    }
    await writeFile(`${record}.tmp`, JSON.stringify(files));
    await rename(`${record}.tmp`, record);
  } finally {
    await rm(work, { recursive: true, force: true });
    await release();
  }
}

let runner: Promise<string> | undefined;

/**
 * The compiled command ready to run the demo corpus: `compiledCli()` and the demo's doc-bridge
 * indexes for its reference server. What `runCli` starts in the integration and conformance tiers.
 */
export function compiledRunner(): Promise<string> {
  runner ??= (async () => {
    const bin = await compiledCli();
    await compiledDemoIndexes(dirname(dirname(bin)));
    return bin;
  })();
  return runner;
}
