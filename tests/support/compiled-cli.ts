/**
 * The runner compiled once per state of its sources, for tests that start a command which only
 * reads files (`ledger verify`, `ledger check`, `report`) many times. The clone's launcher
 * (bin/study-runner.mjs) runs the sources through tsx, which costs about twice the CPU of the
 * compiled code at every start (docs/performance.md, "The test suite"); a test file that verifies
 * a ledger sixty times pays that sixty times. Every run, demo, session and adjudication of the suite
 * still starts from the launcher a person runs (`runCli`), and tests/integration/package.test.ts
 * runs the installed package's compiled command.
 *
 * The build is the package's (`npm pack`'s prepack: tsconfig.build.json, relative `.ts` imports
 * rewritten to `.js`), type checks left to `tsc --noEmit`, into `<root>/.test-dist-<key>/`: one
 * level under the project root like dist/, so every path the code resolves from its own location
 * (the project root, the demo manifest, docker/, the lock file and the sources the runner hash
 * covers) is the clone's. It is not dist/ itself, which the package test's `npm pack` deletes and
 * rebuilds while other files run. The key hashes every source, the tsconfigs and the compiler's
 * version, so an edited source gets a new build before its next test; the first file that asks
 * builds it under a lock, the others wait and find it made.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { readdir, readFile, rename, rm, stat } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { lock } from "proper-lockfile";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

/** Build folders are named `<prefix><key>`, directly in the project root (.gitignore). */
export const BUILD_PREFIX = ".test-dist-";
/** A build of older sources is removed when a newer one is made and it was not used for this long. */
const STALE_BUILD_MS = 60 * 60_000;

async function sourceKey(): Promise<string> {
  const hash = createHash("sha256");
  const tsc = createRequire(import.meta.url)("typescript/package.json") as { version: string };
  hash.update(`typescript ${tsc.version}\n`);
  for (const name of ["tsconfig.json", "tsconfig.build.json"]) hash.update(`${name}\0${await readFile(join(PROJECT_ROOT, name))}\0`);
  const files = (await readdir(join(PROJECT_ROOT, "src"), { recursive: true })).filter((f) => f.endsWith(".ts")).sort();
  for (const file of files) hash.update(`${file}\0${await readFile(join(PROJECT_ROOT, "src", file))}\0`);
  return hash.digest("hex").slice(0, 16);
}

function tscBuild(outDir: string): Promise<void> {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [tsc, "-p", join(PROJECT_ROOT, "tsconfig.build.json"), "--noCheck", "--outDir", outDir], { cwd: PROJECT_ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => (out += d.toString("utf8")));
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolvePromise() : reject(new Error(`tsc -p tsconfig.build.json --outDir ${outDir} exited ${code}: ${out.slice(-3000)}`))));
  });
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

/** The compiled command of today's sources (`<root>/.test-dist-<key>/cli/bin.js`), built if need be. */
export function compiledCli(): Promise<string> {
  built ??= (async () => {
    const name = `${BUILD_PREFIX}${await sourceKey()}`;
    const dir = join(PROJECT_ROOT, name);
    const bin = join(dir, "cli", "bin.js");
    if (existsSync(bin)) return bin;
    const release = await lock(PROJECT_ROOT, { lockfilePath: `${dir}.lock`, realpath: false, stale: 60_000, retries: { retries: 600, minTimeout: 200, maxTimeout: 500 } });
    try {
      if (existsSync(bin)) return bin;
      // Built beside and renamed into place: a reader never finds half a build.
      const temp = `${dir}.${process.pid}.tmp`;
      await rm(temp, { recursive: true, force: true });
      await tscBuild(temp);
      await rename(temp, dir);
      await pruneStale(name);
      return bin;
    } finally {
      await release();
    }
  })();
  return built;
}
