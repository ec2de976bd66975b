/**
 * Concurrent attempts: the 36-attempt demo study with the REAL pinned CLI, the model scripted
 * behind a unix socket and answering each turn after a fixed delay (BENCH_TURN_DELAY_MS, default
 * 2000 ms: a stand-in for the model's thinking time, which dominates a real attempt), run through
 * `runStudy` at --concurrency 1, 2, 4 and 6 (BENCH_CONCURRENCY=1,2,4,6). Prints each run's wall
 * time and its speedup over concurrency 1 side by side, and whether every run's ledger holds the
 * same statuses, usage and charges per observation as the run at 1. Target: at least 3x at 4.
 *
 * Channels: `BENCH_CHANNELS=host-paths,engine-api` runs every level on each sandbox channel of
 * the same engine, side by side (the order alternating level by level), each through the runner's
 * gateway with the scripted API as its upstream on a loopback TLS port (a test CA; the engine-api
 * channel carries no login copy), and prints each level's engine-api / host-paths wall-time ratio.
 * Levels need not start with 1 then, and may repeat (`BENCH_CONCURRENCY=4,4`: both orders).
 * Target: engine-api within 10% of host-paths at --concurrency 4 (the median of its pairs).
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Writable } from "node:stream";
import { buildImage } from "../src/image/build.ts";
import { claudeCodeImageSpec } from "../src/image/specs.ts";
import { ensureClaudeBinary } from "../src/image/install.ts";
import { DockerRuntime } from "../src/sandbox/docker.ts";
import { loadManifest } from "../src/manifest/load.ts";
import { planStudy } from "../src/plan/plan.ts";
import { referenceEngineCommand } from "../src/mcp/preflight.ts";
import { buildIndex } from "../src/mcp/reference-server.ts";
import { readLedger } from "../src/ledger/store.ts";
import type { Ledger } from "../src/ledger/schema.ts";
import { runStudy } from "../src/study/run.ts";
import { startScriptedApi } from "../src/stand-ins/scripted-api/server.ts";
import { DEMO_MANIFEST } from "../src/util/paths.ts";
import { makeDemoCorpus } from "../src/demo/corpus.ts";
import { makeTestCa } from "../src/demo/test-ca.ts";
import type { SandboxChannel } from "../src/sandbox/docker-sandbox.ts";
import { writeTestLogin } from "../src/demo/setup.ts";
import { demoScripts } from "../src/demo/real-cli.ts";
import { median, note, round, runMain } from "./lib.ts";

const MODEL = "claude-haiku-5-5";
const TARGET = { concurrency: 4, speedup: 3 };
const CHANNEL_TARGET = { concurrency: 4, ratio: 1.1 };

/** What must not depend on the concurrency: per observation, in plan order. */
export function ledgerContents(ledger: Ledger): unknown[] {
  return ledger.observations.map((o) => ({
    index: o.index,
    task: o.task,
    arm: o.arm,
    repetition: o.repetition,
    status: o.status,
    inputTokens: o.inputTokens,
    outputTokens: o.outputTokens,
    cacheCreationInputTokens: o.cacheCreationInputTokens,
    cacheReadInputTokens: o.cacheReadInputTokens,
    toolCalls: o.toolCalls,
    toolCallsByName: o.toolCallsByName,
    reservationUsd: o.reservationUsd,
    cliReportedCostUsd: o.cliReportedCostUsd,
    computedCostUsd: o.computedCostUsd,
    chargedUsd: o.chargedUsd,
  }));
}

async function main(): Promise<Record<string, unknown>> {
  const delayMs = Number(process.env.BENCH_TURN_DELAY_MS ?? 2000);
  const levels = (process.env.BENCH_CONCURRENCY ?? "1,2,4,6").split(",").map(Number);
  const channels = process.env.BENCH_CHANNELS?.split(",") as SandboxChannel[] | undefined;
  if (channels && !channels.every((c) => c === "host-paths" || c === "engine-api")) throw new Error("BENCH_CHANNELS lists host-paths and/or engine-api");
  if (!channels && levels[0] !== 1) throw new Error("BENCH_CONCURRENCY must start with 1: speedups are over concurrency 1");
  const ca = channels ? makeTestCa() : undefined;
  const work = await mkdtemp(join(tmpdir(), "study-runner-bench-concurrency-"));
  try {
    const runtime = new DockerRuntime();
    const binary = process.env.CLAUDE_CODE_BINARY ?? (await ensureClaudeBinary()).path;
    const built = await buildImage(runtime, await claudeCodeImageSpec({ claudeBinary: binary }));
    const corpus = await makeDemoCorpus(join(work, "corpus"));
    for (const { dir } of Object.values(corpus)) await buildIndex(dir);
    const loaded = await loadManifest(DEMO_MANIFEST);
    const plan = planStudy(loaded.manifest, "full");
    const loginDir = join(work, "login");
    await writeTestLogin(loginDir);

    const runs: Array<{ concurrency: number; channel?: SandboxChannel; wallMs: number; speedup: number; maxInFlight: number; status: string }> = [];
    let reference: unknown[] | undefined;
    const differing: number[] = [];
    const order = (level: number): Array<SandboxChannel | undefined> => (!channels ? [undefined] : level % 2 === 0 ? channels : [...channels].reverse());
    for (const [level, concurrency] of levels.entries())
      for (const channel of order(level)) {
        const name = channel ? `${level}-${concurrency}-${channel}` : String(concurrency);
        const socketDir = join(work, `api-${name}`);
        await mkdir(socketDir, { mode: 0o755 });
        const script = demoScripts(loaded.manifest, plan);
        const api = ca
          ? await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, script, turnDelayMs: delayMs })
          : await startScriptedApi({ socketPath: join(socketDir, "api.sock"), script, turnDelayMs: delayMs });
        // Through the gateway on either channel, or the socket directly with the copied login.
        const route =
          ca && channel ? { credentials: "gateway" as const, gatewayUpstream: { url: api.url!, ca: ca.ca }, sandboxChannel: channel } : { modelApi: { socketPath: join(socketDir, "api.sock") } };
        const output = join(work, `ledger-${name}.json`);
        // Attempts in flight, from the progress lines.
        let inFlight = 0;
        let maxInFlight = 0;
        let pending = "";
        const stderr = new Writable({
          write(chunk: Buffer, _enc, done) {
            pending += chunk.toString("utf8");
            let nl: number;
            while ((nl = pending.indexOf("\n")) >= 0) {
              const line = pending.slice(0, nl);
              pending = pending.slice(nl + 1);
              if (/: started$/.test(line)) maxInFlight = Math.max(maxInFlight, ++inFlight);
              else if (/^study-runner: \[\d+\/\d+\] .*: \S+, /.test(line)) inFlight--;
            }
            done();
          },
        });
        note(`concurrency: ${plan.length} attempts at --concurrency ${concurrency}${channel ? ` on ${channel}` : ""}, each turn answered after ${delayMs} ms`);
        const t0 = performance.now();
        let code: number;
        try {
          code = await runStudy(
            {
              loaded,
              mode: "full",
              plan,
              fullPlanSize: plan.length,
              roots: new Map(Object.entries(corpus).map(([name, { dir }]) => [name, dir])),
              model: MODEL,
              capUsd: 5,
              attemptBudgetUsd: 0.1,
              output,
              image: built.id,
              expectedCliVersion: "2.1.296",
              isolation: "offline",
              docBridgeCommand: referenceEngineCommand(),
              claudeConfigDir: loginDir,
              ...route,
              timeoutMs: 180_000,
              concurrency,
            },
            { runtime, stdout: () => {}, stderr },
          );
        } finally {
          await api.close();
        }
        const wallMs = performance.now() - t0;
        const ledger = await readLedger(output);
        if (code !== 0) throw new Error(`--concurrency ${concurrency} exited ${code}: ${ledger.statusReason}`);
        const contents = ledgerContents(ledger);
        if (!reference) reference = contents;
        else if (JSON.stringify(contents) !== JSON.stringify(reference)) differing.push(concurrency);
        const base = runs.find((r) => r.channel === channel)?.wallMs ?? wallMs;
        runs.push({ concurrency, ...(channel ? { channel } : {}), wallMs: round(wallMs, 0), speedup: round(base / wallMs, 2), maxInFlight, status: ledger.status });
        note(`concurrency: --concurrency ${concurrency}${channel ? ` on ${channel}` : ""}: ${round(wallMs / 1000, 1)} s, ${round(base / wallMs, 2)}x`);
      }
    if (channels) return channelFigures(runs, levels, delayMs, differing, plan.length);
    const atTarget = runs.find((r) => r.concurrency === TARGET.concurrency);
    return {
      attempts: plan.length,
      turnDelayMs: delayMs,
      image: built.id.slice(0, 19),
      // Side by side: concurrency -> wall time (s) and speedup over 1.
      table: runs.map((r) => `${r.concurrency}: ${round(r.wallMs / 1000, 1)} s ${r.speedup}x`).join(" | "),
      runs,
      sameLedgerContents: differing.length === 0,
      differingAt: differing,
      target: `>= ${TARGET.speedup}x at --concurrency ${TARGET.concurrency}, same ledger contents`,
      targetMet: atTarget !== undefined && atTarget.speedup >= TARGET.speedup && differing.length === 0,
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** Each level's wall time on each channel, and engine-api's over host-paths. */
function channelFigures(
  runs: Array<{ concurrency: number; channel?: SandboxChannel; wallMs: number; maxInFlight: number }>,
  levels: number[],
  delayMs: number,
  differing: number[],
  attempts: number,
): Record<string, unknown> {
  // The runs of level i are the i-th pair, in either order.
  const ratios = levels.flatMap((c, i) => {
    const pair = runs.slice(i * 2, i * 2 + 2);
    const hp = pair.find((r) => r.channel === "host-paths");
    const api = pair.find((r) => r.channel === "engine-api");
    return hp && api ? [{ concurrency: c, first: pair[0]!.channel!, hostPathsMs: hp.wallMs, engineApiMs: api.wallMs, ratio: round(api.wallMs / hp.wallMs, 3) }] : [];
  });
  const atTarget = ratios.filter((r) => r.concurrency === CHANNEL_TARGET.concurrency).map((r) => r.ratio);
  const target = atTarget.length > 0 ? { ratio: median(atTarget) } : undefined;
  return {
    attempts,
    turnDelayMs: delayMs,
    credentials: "gateway",
    table: ratios.map((r) => `${r.concurrency}: host-paths ${round(r.hostPathsMs / 1000, 1)} s, engine-api ${round(r.engineApiMs / 1000, 1)} s, ${r.ratio}x`).join(" | "),
    runs,
    ratios,
    ...(target ? { medianRatioAtTarget: target.ratio } : {}),
    sameLedgerContents: differing.length === 0,
    target: `engine-api at most ${CHANNEL_TARGET.ratio}x host-paths at --concurrency ${CHANNEL_TARGET.concurrency}, same ledger contents`,
    targetMet: target !== undefined && target.ratio <= CHANNEL_TARGET.ratio && differing.length === 0,
  };
}

runMain("concurrency", main);
