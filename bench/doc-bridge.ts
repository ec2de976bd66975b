/**
 * The doc-bridge arm beside the repository-only arm: attempts of both arms of the demo study,
 * in the plan's order (the arms alternate), through the real orchestrator (`runStudy`) with the
 * fake claude image, each timed from its "started" progress line to the next one's (as in the
 * attempt benchmark). A doc-bridge attempt also has its engine (the bundled reference server,
 * a fresh process per attempt in its own sandbox), the fake's MCP client and the relay in the
 * container, the handshake and one doc.search through the bridge. Target (issue 28): the
 * doc-bridge attempt at most 1.5x the repository-only one at the median. The demo benchmark
 * measures the same pair inside a whole demo run; this one leaves out the demo's adjudication, so
 * it takes a minute rather than several on a loaded machine.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { note, ratio, runMain, stats } from "./lib.ts";
import { demoBenchConfig, medianSplit, prepareDemoBench, runTimedStudy, type TimedAttempt } from "./study.ts";

const ROUNDS = 3;
/** Per round: one warm-up attempt, then this many measured ones (half of each arm). */
const ATTEMPTS_PER_ROUND = 8;
const TARGET_RATIO = 1.5;

async function main(): Promise<Record<string, unknown>> {
  const work = await mkdtemp(join(tmpdir(), "study-runner-bench-doc-bridge-"));
  try {
    note("doc-bridge: demo corpus, indexes, fake image, test login");
    const bench = await prepareDemoBench(work);
    const full = bench.full;
    const measured: TimedAttempt[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      note(`doc-bridge: round ${round + 1}/${ROUNDS}`);
      const start = (round * (ATTEMPTS_PER_ROUND + 1)) % (full.length - ATTEMPTS_PER_ROUND);
      const plan = full.slice(start, start + ATTEMPTS_PER_ROUND + 1).map((a, index) => ({ ...a, index }));
      const timed = await runTimedStudy(demoBenchConfig(bench, plan, `round-${round}`), bench.runtime);
      measured.push(...timed.slice(1));
    }
    const arm = (name: string) => measured.filter((t) => t.observation.arm === name);
    const [repository, mcp] = [arm("repository"), arm("mcp")];
    if (mcp.some((t) => (t.observation.mcp?.connections ?? 0) !== 1)) throw new Error("a doc-bridge attempt did not connect to its server exactly once");
    const r = { repository: stats(repository.map((t) => t.ms)), mcp: stats(mcp.map((t) => t.ms)) };
    const ratioToRepository = ratio(r.mcp.median, r.repository.median);
    return {
      attemptMs: r,
      ratioToRepository,
      targetRatio: TARGET_RATIO,
      targetMet: ratioToRepository <= TARGET_RATIO,
      containerMs: { repository: stats(repository.map((t) => t.observation.wallTimeMs!)), mcp: stats(mcp.map((t) => t.observation.wallTimeMs!)) },
      // Median milliseconds of each step between the runner's timing marks (src/util/marks.ts).
      splitMs: { repository: medianSplit(repository.map((t) => t.split ?? {})), mcp: medianSplit(mcp.map((t) => t.split ?? {})) },
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

runMain("doc-bridge", main);
