/**
 * Start-up: wall time of `study-runner --help`, from the installed package next to the clone.
 *
 * - clone: `node bin/study-runner.mjs --help` in this checkout (tsx compiles the sources it loads);
 * - package: the command `npm install` linked, `node_modules/.bin/study-runner --help`, in a folder
 *   where this checkout's `npm pack` tarball was installed offline (tests/support/package.ts), running
 *   the compiled dist/ with Node alone.
 *
 * Each run is a fresh process, as a person types it; the two alternate (with `node -e 0`, the
 * floor), so all see the same load. `npx study-runner` adds npm's own start-up on top of the package's (measured separately,
 * fewer runs). The target: the package starts no slower than the clone (ratio package/clone ≤ 1).
 *
 * Then the package's command as one module against the compiled tree it was made of, in the same
 * installed package: `ledger verify` of a missing file (it loads the verifier's modules, the
 * statistics included, then exits 2), started as `node dist/cli/study-runner.mjs` (package.json
 * "bin") and as `node dist/cli/bin.js`, alternating. The target: the bundle at most 0.8 of the tree.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { PROJECT_ROOT } from "../src/util/paths.ts";
import { cleanEnv, packAndInstall, run } from "../tests/support/package.ts";
import { note, ratio, round, runMain, stats } from "./lib.ts";

const WARMUP = 2;
const RUNS = 15;
const NPX_RUNS = 5;

async function timed(command: string, args: string[], cwd: string, expect = "Usage: study-runner", code = 0): Promise<number> {
  const t0 = performance.now();
  const r = await run(command, args, { cwd, env: cleanEnv(), timeoutMs: 60_000 });
  const ms = performance.now() - t0;
  if (r.code !== code || !r.stdout.startsWith(expect)) throw new Error(`${command} ${args.join(" ")} exited ${r.code}: ${r.stderr.slice(-500)}`);
  return ms;
}

runMain("startup", async () => {
  const work = await mkdtemp(join(tmpdir(), "bench-startup-"));
  try {
    note("npm pack, then npm install --offline into an empty folder");
    const t0 = performance.now();
    const pkg = await packAndInstall(work);
    const packAndInstallS = round((performance.now() - t0) / 1000, 1);
    const clone: number[] = [];
    const installed: number[] = [];
    const floor: number[] = [];
    for (let i = 0; i < WARMUP + RUNS; i++) {
      note(`--help run ${i + 1} of ${WARMUP + RUNS}${i < WARMUP ? " (warm-up)" : ""}`);
      const c = await timed(process.execPath, [join(PROJECT_ROOT, "bin", "study-runner.mjs"), "--help"], PROJECT_ROOT);
      const p = await timed(pkg.bin, ["--help"], pkg.prefix);
      const f = await timed(process.execPath, ["-e", "0"], pkg.prefix, "");
      if (i >= WARMUP) {
        clone.push(c);
        installed.push(p);
        floor.push(f);
      }
    }
    const verify = ["ledger", "verify", join(work, "no-such-ledger.json")];
    const bundled: number[] = [];
    const tree: number[] = [];
    for (let i = 0; i < WARMUP + RUNS; i++) {
      note(`ledger verify run ${i + 1} of ${WARMUP + RUNS}${i < WARMUP ? " (warm-up)" : ""}`);
      const b = await timed(process.execPath, [join(pkg.root, "dist", "cli", "study-runner.mjs"), ...verify], pkg.prefix, "", 2);
      const t = await timed(process.execPath, [join(pkg.root, "dist", "cli", "bin.js"), ...verify], pkg.prefix, "", 2);
      if (i >= WARMUP) {
        bundled.push(b);
        tree.push(t);
      }
    }
    const npx: number[] = [];
    for (let i = 0; i < NPX_RUNS; i++) npx.push(await timed("npx", ["--offline", "study-runner", "--help"], pkg.prefix));
    const cloneStats = stats(clone);
    const packageStats = stats(installed);
    const packageOverClone = ratio(packageStats.median, cloneStats.median);
    const bundleStats = stats(bundled);
    const treeStats = stats(tree);
    const bundleOverTree = ratio(bundleStats.median, treeStats.median);
    return {
      unit: "ms",
      cloneHelpMs: cloneStats,
      packageHelpMs: packageStats,
      packageOverClone,
      nodeFloorMs: stats(floor),
      npxHelpMs: stats(npx),
      packAndInstallS,
      bundleVerifyMs: bundleStats,
      treeVerifyMs: treeStats,
      bundleOverTree,
      target: "package/clone <= 1, bundle/tree <= 0.8",
      targetMet: packageOverClone <= 1 && bundleOverTree <= 0.8,
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
});
