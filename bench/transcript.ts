/**
 * Transcript: parse and validate a 4 MiB stream-json transcript (the seed's output bound).
 *
 * - Throughput of the runner's own stdout path: `runBounded` on the in-memory runtime (chunks
 *   of 64 KiB, as the engine's attach stream delivers them: UTF-8 decode, line split, result
 *   detection) feeding `TranscriptReader`, then `finish()`; and of the reader alone over
 *   pre-split lines. MB/s are 10^6 bytes per second.
 * - Memory: one child process per size (MEMORY_SIZES) streams a generated transcript through
 *   the same path without holding it, after two warm-up runs; it reports how far RSS rose
 *   above its level before the run (sampled at every line) and the heap still live after a
 *   full GC, i.e. what the reader keeps.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { runBounded } from "../src/sandbox/bounded.ts";
import { dockerSandbox } from "../src/sandbox/docker-sandbox.ts";
import { FakeRuntime } from "../tests/support/fake-runtime.ts";
import type { ContainerSpec } from "../src/sandbox/port.ts";
import { TranscriptReader, type TranscriptFacts } from "../src/transcript/reader.ts";
import { measure, note, ratio, round, runMain, stats } from "./lib.ts";
import { TRANSCRIPT_MODEL, TRANSCRIPT_INIT, TRANSCRIPT_TOOLS, TRANSCRIPT_VERSION, transcriptLines, type TranscriptShape } from "./gen.ts";

const MIB = 1024 * 1024;
const CHUNK = 64 * 1024;
const TARGET_MB_PER_S = 50;
/** 1 MiB and the 4 MiB bound, and 64 MiB (16x the bound's events) to show what grows with events. */
const MEMORY_SIZES = [1 * MIB, 4 * MIB, 64 * MIB];

const SPEC: ContainerSpec = {
  image: "bench/transcript:latest",
  cmd: [],
  env: {},
  mounts: [],
  tmpfs: {},
  readOnlyRootfs: true,
  networkMode: "none",
  capDrop: ["ALL"],
  securityOpt: ["no-new-privileges"],
  labels: {},
};

const newReader = () => new TranscriptReader({ arm: "repository", model: TRANSCRIPT_MODEL, expectedTools: [...TRANSCRIPT_TOOLS], cliVersion: TRANSCRIPT_VERSION, init: TRANSCRIPT_INIT });

/** Writes `chunks()` to the container's stdout, honouring backpressure. */
function streamingRuntime(chunks: () => Iterable<Buffer>): FakeRuntime {
  const runtime = new FakeRuntime({
    program: async ({ stdout }) => {
      for (const chunk of chunks()) if (!stdout.write(chunk)) await once(stdout, "drain");
      return 0;
    },
  });
  runtime.addImage(SPEC.image);
  return runtime;
}

/** The transcript's bytes cut into CHUNK-sized pieces, whatever the line boundaries. */
function* chunked(lines: Iterable<string>): Generator<Buffer> {
  let parts: Buffer[] = [];
  let size = 0;
  for (const line of lines) {
    const b = Buffer.from(`${line}\n`);
    parts.push(b);
    size += b.length;
    while (size >= CHUNK) {
      const all = Buffer.concat(parts);
      yield all.subarray(0, CHUNK);
      parts = [all.subarray(CHUNK)];
      size = all.length - CHUNK;
    }
  }
  if (size > 0) yield Buffer.concat(parts);
}

async function throughRunner(runtime: FakeRuntime, limit: number): Promise<TranscriptFacts> {
  const reader = newReader();
  const raw = await runBounded(dockerSandbox(runtime).containers, SPEC, (line) => reader.pushLine(line), { stdoutLimitBytes: limit });
  if (raw.truncated || raw.exitCode !== 0) throw new Error(`runBounded ended truncated=${raw.truncated} exit=${raw.exitCode}`);
  return reader.finish();
}

function checkClean(facts: TranscriptFacts, shape: TranscriptShape): void {
  if (facts.setupProblems.length > 0 || !facts.usageComplete || facts.lines !== shape.lines || facts.toolCalls !== shape.toolCalls) {
    throw new Error(`the generated transcript did not read clean: ${JSON.stringify({ problems: facts.setupProblems.slice(0, 3), lines: facts.lines, expected: shape.lines })}`);
  }
}

/**
 * Child: streams a transcript of `size` bytes through runBounded + reader without holding it,
 * and prints how far RSS rose above its level before the run. Two warm-up runs of 4 MiB come
 * first, so the JIT and V8's heap sizing have settled and the figure is what this run adds.
 */
async function memoryChild(size: number): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error("run the memory child with --expose-gc");
  const run = async (bytes: number, onLine?: () => void) => {
    const shape: TranscriptShape = { lines: 0, bytes: 0, toolCalls: 0 };
    const runtime = streamingRuntime(() => chunked(transcriptLines(bytes, 1, shape)));
    const reader = newReader();
    const raw = await runBounded(
      dockerSandbox(runtime).containers,
      SPEC,
      (line) => {
        reader.pushLine(line);
        onLine?.();
      },
      { stdoutLimitBytes: Math.max(bytes, 4 * MIB) },
    );
    if (raw.truncated || raw.exitCode !== 0) throw new Error(`runBounded ended truncated=${raw.truncated} exit=${raw.exitCode}`);
    const facts = reader.finish();
    checkClean(facts, shape);
    return { facts, shape };
  };
  for (let i = 0; i < 2; i++) await run(4 * MIB);
  gc();
  gc();
  const baseRss = process.memoryUsage.rss();
  const baseHeap = process.memoryUsage().heapUsed;
  let peakRss = baseRss;
  const { facts, shape } = await run(size, () => {
    const rss = process.memoryUsage.rss();
    if (rss > peakRss) peakRss = rss;
  });
  gc();
  gc();
  const retained = process.memoryUsage().heapUsed - baseHeap;
  process.stdout.write(
    `${JSON.stringify({
      size,
      bytes: shape.bytes,
      events: shape.lines,
      toolCalls: facts.toolCalls,
      baseRssMiB: round(baseRss / MIB, 1),
      peakRssGrowthMiB: round((peakRss - baseRss) / MIB, 1),
      // What the reader still holds (facts, its id maps) after a full GC.
      retainedHeapKiB: round(retained / 1024, 0),
      processMaxRssMiB: round(process.resourceUsage().maxRSS / 1024, 1),
    })}\n`,
  );
}

async function runChild(size: number): Promise<Record<string, number>> {
  const child = spawn(process.execPath, ["--expose-gc", "--import", "tsx", fileURLToPath(import.meta.url), "--memory-child", String(size)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString("utf8")));
  const [code] = (await once(child, "exit")) as [number | null];
  if (code !== 0) throw new Error(`memory child for ${size} bytes exited ${code}`);
  return JSON.parse(out.trim().split("\n").at(-1)!) as Record<string, number>;
}

async function main(): Promise<Record<string, unknown>> {
  const size = 4 * MIB;
  const shape: TranscriptShape = { lines: 0, bytes: 0, toolCalls: 0 };
  const lines = [...transcriptLines(size, 1, shape)];
  const chunks = [...chunked(lines)];
  note(`transcript: ${shape.bytes} bytes, ${shape.lines} events, ${shape.toolCalls} tool calls`);

  const runtime = streamingRuntime(() => chunks);
  let facts: TranscriptFacts | undefined;
  const runner = await measure(async () => (facts = await throughRunner(runtime, size)), { warmup: 3, runs: 9 });
  checkClean(facts!, shape);
  const readerOnly = await measure(
    () => {
      const reader = newReader();
      for (const line of lines) reader.pushLine(line);
      facts = reader.finish();
    },
    { warmup: 3, runs: 9 },
  );
  checkClean(facts!, shape);
  const mbps = (ms: number) => round(shape.bytes / 1e6 / (ms / 1000), 1);
  const runnerStats = stats(runner);
  const readerStats = stats(readerOnly);

  note("transcript: peak memory per size, one child each");
  const memory: Record<string, number>[] = [];
  for (const s of MEMORY_SIZES) memory.push(await runChild(s));
  const at = (s: number) => memory.find((m) => m.size === s)!;
  const big = at(MEMORY_SIZES.at(-1)!);
  const bound = at(4 * MIB);
  // What the reader keeps once the stream has passed, per event: its id maps (one entry per
  // tool-use id and per API message, src/transcript/reader.ts). Zero would be "independent
  // of the number of events"; the transcript itself is never held.
  const retainedPerEvent = round(((big.retainedHeapKiB! - bound.retainedHeapKiB!) * 1024) / (big.events! - bound.events!), 0);
  const independent = big.retainedHeapKiB! - bound.retainedHeapKiB! < 1024;
  const throughput = mbps(runnerStats.median);
  return {
    bytes: shape.bytes,
    events: shape.lines,
    toolCalls: shape.toolCalls,
    runnerPathMs: runnerStats,
    runnerPathMBps: throughput,
    readerOnlyMs: readerStats,
    readerOnlyMBps: mbps(readerStats.median),
    targetMBps: TARGET_MB_PER_S,
    throughputTargetMet: throughput >= TARGET_MB_PER_S,
    throughputVsTarget: ratio(throughput, TARGET_MB_PER_S),
    memory,
    retainedBytesPerEvent: retainedPerEvent,
    // The transcript is not held when the peak rises by far less than the bytes that passed.
    peakGrowthPerInputMiB: round(big.peakRssGrowthMiB! / (big.bytes! / MIB), 2),
    memoryIndependentOfEvents: independent,
    targetMet: throughput >= TARGET_MB_PER_S && independent,
  };
}

const memIndex = process.argv.indexOf("--memory-child");
if (memIndex >= 0) {
  memoryChild(Number(process.argv[memIndex + 1])).catch((err: unknown) => {
    process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  });
} else {
  runMain("transcript", main);
}
