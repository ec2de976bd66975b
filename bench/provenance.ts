/**
 * The doc-bridge engine's provenance at a run's preflight (src/mcp/bundle-hash.ts): the sha256 of
 * what the engine command runs, node itself (about 100 MB) and the reference server's files, for
 * each checkout of the study. The demo study has three. Measured side by side, alternating: the
 * provenance of three checkouts against the bundle of one, in CPU milliseconds of this process
 * (its thread pool's reads included). Each file that resolves to the same path in every checkout
 * is read once, so the target: three checkouts cost at most 1.25 times one.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { engineBundle, engineProvenance } from "../src/mcp/bundle-hash.ts";
import { referenceEngineCommand } from "../src/mcp/preflight.ts";
import { note, ratio, runMain, stats } from "./lib.ts";

const WARMUP = 2;
const RUNS = 10;
const TARGET_RATIO = 1.25;

async function cpuMs(f: () => Promise<unknown>): Promise<number> {
  const before = process.cpuUsage();
  await f();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000;
}

runMain("provenance", async () => {
  const work = await mkdtemp(join(tmpdir(), "bench-provenance-"));
  try {
    const command = referenceEngineCommand();
    const checkouts = ["ledgerlite", "queuekit", "routekit"].map((repository) => ({ repository, dir: work, engineRevision: undefined }));
    note(`provenance: ${command.join(" ")}, ${checkouts.length} checkouts against one, ${RUNS} runs each`);
    const one: number[] = [];
    const three: number[] = [];
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const a = await cpuMs(() => engineBundle(command, work));
      const b = await cpuMs(() => engineProvenance(command, checkouts));
      if (i >= WARMUP) {
        one.push(a);
        three.push(b);
      }
    }
    const r = { oneCheckout: stats(one), threeCheckouts: stats(three) };
    const threeOverOne = ratio(r.threeCheckouts.median, r.oneCheckout.median);
    return { cpuMs: r, threeOverOne, targetRatio: TARGET_RATIO, targetMet: threeOverOne <= TARGET_RATIO };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
});
