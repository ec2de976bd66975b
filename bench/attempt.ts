/**
 * Attempt overhead: one attempt through the real orchestrator (`runStudy`) with the fake claude
 * image, whose default "ok" behaviour answers at once, next to the floor of starting the same
 * image through the same engine.
 *
 * The attempt is the loop body of `runStudy` for a repository-arm attempt of the demo study:
 * reservation and ledger write, export at the pin, login copy under the lock, the hardened
 * container (create, attach, start, wait, inspect, remove), the transcript, login write-back,
 * cost, settlement and ledger write. It is timed from one attempt's "started" progress line to
 * the next one's (the last: to runStudy's return), so nothing of the loop is left out;
 * preflight (engine ping, reaping, the version probe) is per run, not per attempt, and is not
 * counted. The first attempt of every run is a warm-up.
 *
 * Floors (same image, same engine, nothing mounted, no limits):
 * - `docker run --rm --network none <image> --version` through the docker CLI: the floor,
 *   the one the 1.5x target is judged against;
 * - the same create/attach/start/wait/remove through the engine API (`DockerRuntime`), which
 *   leaves out the docker CLI's own start-up: the stricter comparison, reported beside it.
 * Rounds interleave floors and attempts, so a change in the machine's load hits both alike.
 *
 * gVisor: each round also runs the same attempts with `--runtime runsc` and the same docker CLI
 * floor with `--runtime runsc`, as the engine registers it (docs/isolation.md, "gVisor"; CI:
 * ptrace, network none, host unix sockets open). Reported beside runc: the runsc attempt against
 * its own floor, and both against runc's. There is no target: it is the price of the user-space
 * kernel, for a study to weigh.
 *
 * Channels: each round also runs the same attempts through the gateway (the engine-api channel's
 * credentials) on both sandbox channels of the same engine, `host-paths` (folders and sockets bound
 * in) and `engine-api` (content copied into volumes, sockets carried by the relay's stream,
 * src/sandbox/engine-api.ts), one after the other. Target (docs/performance.md, "attempt"):
 * engine-api at most 1.25x host-paths at the median, and its own part (the attempt minus the
 * container's run, from "cli:container-started" to "cli:container-ended") at most 80 ms more than
 * host-paths' own part.
 *
 * `BENCH_ATTEMPT_ONLY=channels` runs the channels' attempts alone (no floors, no runc or runsc
 * attempts), and `BENCH_ROUNDS` sets the rounds (4): to compare two trees of the runner on a busy
 * machine, one after the other, several times.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { measure, median, note, ratio, round, runMain, stats } from "./lib.ts";
import { demoBenchConfig, medianSplit, prepareDemoBench, runTimedStudy } from "./study.ts";

const execFileP = promisify(execFile);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const CHANNELS_ONLY = process.env.BENCH_ATTEMPT_ONLY === "channels";
const ATTEMPTS_PER_ROUND = 3;
const FLOORS_PER_ROUND = 3;
const TARGET_RATIO = 1.5;
const GVISOR = "runsc";
const CHANNEL_TARGET_RATIO = 1.25;
const CHANNEL_TARGET_OWN_MS = 80;
const CHANNELS = ["host-paths", "engine-api"] as const;

async function main(): Promise<Record<string, unknown>> {
  const work = await mkdtemp(join(tmpdir(), "study-runner-bench-attempt-"));
  try {
    note("attempt: demo corpus, fake image, test login");
    // The runner's timing marks (src/util/marks.ts) tell where each attempt's time went.
    const bench = await prepareDemoBench(work);
    const { runtime, image } = bench;
    const repositoryArm = bench.full.filter((a) => a.arm === "repository");
    const splits: Record<string, number>[] = [];

    const attemptMs: number[] = [];
    const containerMs: number[] = [];
    const runnerOwnMs: number[] = [];
    const cliFloor: number[] = [];
    const apiFloor: number[] = [];
    const gvisor = { attemptMs: [] as number[], containerMs: [] as number[], floor: [] as number[] };
    const channels = Object.fromEntries(CHANNELS.map((c) => [c, { attemptMs: [] as number[], ownMs: [] as number[], splits: [] as Record<string, number>[] }]));
    if (!(await runtime.ping()).runtimes.includes(GVISOR)) throw new Error(`the engine has no runtime '${GVISOR}': register it as docs/isolation.md ("gVisor") says`);
    const bare = {
      image,
      cmd: ["--version"],
      env: {},
      mounts: [],
      tmpfs: {},
      readOnlyRootfs: false,
      networkMode: "none" as const,
      capDrop: [],
      securityOpt: [],
      labels: { "study-runner.bench": "floor" },
    };
    /** The round's floors and its runc and runsc attempts. */
    const floorsAndRuntimes = async (round: number, plan: typeof repositoryArm): Promise<void> => {
      cliFloor.push(...(await measure(() => execFileP("docker", ["run", "--rm", "--network", "none", image, "--version"]), { warmup: round === 0 ? 2 : 0, runs: FLOORS_PER_ROUND })));
      apiFloor.push(
        ...(await measure(
          async () => {
            const id = await runtime.create(bare);
            try {
              const { stdout, stderr } = await runtime.attach(id);
              stdout.resume();
              stderr.resume();
              await runtime.start(id);
              await runtime.wait(id);
            } finally {
              await runtime.remove(id);
            }
          },
          { warmup: round === 0 ? 2 : 0, runs: FLOORS_PER_ROUND },
        )),
      );

      const config = (name: string, ociRuntime?: string) => demoBenchConfig(bench, plan, `${name}-${round}`, ociRuntime);
      const timed = await runTimedStudy(config("runc"), runtime);
      for (const { ms, observation, split } of timed.slice(1)) {
        attemptMs.push(ms);
        splits.push(split!);
        containerMs.push(observation.wallTimeMs!);
        runnerOwnMs.push(ms - observation.wallTimeMs!);
      }
      gvisor.floor.push(
        ...(await measure(() => execFileP("docker", ["run", "--rm", "--runtime", GVISOR, "--network", "none", image, "--version"]), { warmup: round === 0 ? 1 : 0, runs: FLOORS_PER_ROUND })),
      );
      for (const { ms, observation } of (await runTimedStudy(config("runsc", GVISOR), runtime)).slice(1)) {
        if (observation.runtime !== GVISOR) throw new Error(`a gVisor attempt ran under ${observation.runtime}`);
        gvisor.attemptMs.push(ms);
        gvisor.containerMs.push(observation.wallTimeMs!);
      }
    };
    for (let round = 0; round < ROUNDS; round++) {
      note(`attempt: round ${round + 1}/${ROUNDS}`);
      // One warm-up attempt, then the measured ones; each round takes the next attempts of the
      // plan, so the three demo repositories all take part.
      const start = (round * (ATTEMPTS_PER_ROUND + 1)) % (repositoryArm.length - ATTEMPTS_PER_ROUND);
      // Indices are the run order the ledger checks (observations[i].index === i).
      const plan = repositoryArm.slice(start, start + ATTEMPTS_PER_ROUND + 1).map((a, index) => ({ ...a, index }));
      if (!CHANNELS_ONLY) await floorsAndRuntimes(round, plan);
      // The channels alternate which goes first, so neither always runs on a machine the other warmed.
      for (const channel of round % 2 === 0 ? CHANNELS : [...CHANNELS].reverse()) {
        const c = channels[channel]!;
        for (const { ms, split } of (await runTimedStudy(demoBenchConfig(bench, plan, `${channel}-${round}`, undefined, { credentials: "gateway", sandboxChannel: channel }), runtime)).slice(1)) {
          c.attemptMs.push(ms);
          c.splits.push(split!);
          const run = split!["cli:container-started → cli:container-ended"];
          if (run === undefined) throw new Error(`no "cli:container-started → cli:container-ended" step in a ${channel} attempt's marks`);
          c.ownMs.push(ms - run);
        }
      }
    }

    if (CHANNELS_ONLY) return { channels: channelFigures(channels) };
    const a = stats(attemptMs);
    const cli = stats(cliFloor);
    const api = stats(apiFloor);
    const r = ratio(a.median, cli.median);
    const g = { attempt: stats(gvisor.attemptMs), floor: stats(gvisor.floor) };
    return {
      attempts: attemptMs.length,
      attemptMs: a,
      // runBounded's wall time: create .. inspect, the container's whole life (remove not included).
      containerMs: stats(containerMs),
      // The attempt minus runBounded's wall time: export, login, transcript, cost, ledger, remove.
      runnerOwnMs: { median: round(median(runnerOwnMs), 1) },
      // Median milliseconds of each step of a runc attempt, between the runner's timing marks:
      // "cli:container-started → cli:container-ended" is the container's run (the wrapper, the
      // CLI, the engine's wait), "ledger:write → ledger:written" the three ledger writes.
      splitMs: medianSplit(splits),
      floorDockerRunMs: cli,
      floorEngineApiMs: api,
      ratioToFloor: r,
      ratioToEngineApiFloor: ratio(a.median, api.median),
      targetRatio: TARGET_RATIO,
      floor: "docker run --rm --network none <fake image> --version (docker CLI)",
      targetMet: r <= TARGET_RATIO,
      channels: channelFigures(channels),
      gvisor: {
        runtime: GVISOR,
        attempts: gvisor.attemptMs.length,
        attemptMs: g.attempt,
        containerMs: stats(gvisor.containerMs),
        floorDockerRunMs: g.floor,
        // The runsc attempt against runsc's own floor: the runner's overhead under gVisor.
        ratioToFloor: ratio(g.attempt.median, g.floor.median),
        // What gVisor costs: runsc against runc, for the attempt and for the bare floor.
        ratioToRuncAttempt: ratio(g.attempt.median, a.median),
        floorRatioToRunc: ratio(g.floor.median, cli.median),
        floor: "docker run --rm --runtime runsc --network none <fake image> --version (docker CLI)",
      },
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** engine-api beside host-paths: medians, the ratio and the own parts against their targets. */
function channelFigures(channels: Record<string, { attemptMs: number[]; ownMs: number[]; splits: Record<string, number>[] }>): Record<string, unknown> {
  const hp = channels["host-paths"]!;
  const api = channels["engine-api"]!;
  const r = ratio(median(api.attemptMs), median(hp.attemptMs));
  const ownAdded = round(median(api.ownMs) - median(hp.ownMs), 1);
  return {
    credentials: "gateway",
    attempts: api.attemptMs.length,
    hostPaths: { attemptMs: stats(hp.attemptMs), ownMs: { median: round(median(hp.ownMs), 1) }, splitMs: medianSplit(hp.splits) },
    engineApi: { attemptMs: stats(api.attemptMs), ownMs: { median: round(median(api.ownMs), 1) }, splitMs: medianSplit(api.splits) },
    ratio: r,
    targetRatio: CHANNEL_TARGET_RATIO,
    // What the engine-api channel adds to the runner's own part of an attempt (all but the container's run).
    ownAddedMs: ownAdded,
    targetOwnAddedMs: CHANNEL_TARGET_OWN_MS,
    targetMet: r <= CHANNEL_TARGET_RATIO && ownAdded <= CHANNEL_TARGET_OWN_MS,
  };
}

runMain("attempt", main);
