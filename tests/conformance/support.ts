/**
 * Shared set-up of the conformance suite: the REAL Claude Code binary (the pinned npm package,
 * installed into the cache when missing) in the real image (built offline, cached by its context
 * digest), the demo corpus with its doc-bridge indexes, a test login, and the scripted Messages
 * API. Every run here goes through the runner's model gateway (the scripted API is its upstream
 * over TLS on loopback, trusted through a test CA): a study run in this process, the shipped
 * command (its hidden test flags), or a container a test builds itself (testGateway,
 * openTestAttempt); each run's metered usage is held to its transcript's by one assertion.
 * `startApi` keeps the direct route (a unix socket the runner hands to every attempt container,
 * network none, relay on 127.0.0.1 inside) for a scenario that must bypass the gateway and says
 * why. Nothing here reaches a network or spends money.
 */
import { lstat, readdir, readFile } from "node:fs/promises";
import Docker from "dockerode";
import { join } from "node:path";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { realClaudeImage } from "../support/real-claude-image.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import type { ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { MODEL, runPilotStudy, TEST_TOKEN, type DirectApi, type StudyApi, type StudyRun, type StudyRunOptions as CalibrationRunOptions } from "../../src/calibrate/env.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import { Gateway, type GatewayRecord, type GatewayRequestRecord } from "../../src/gateway/gateway.ts";
import { stagePlaceholderLogin } from "../../src/gateway/credential.ts";
import type { PerMessageUsage, TranscriptFacts } from "../../src/transcript/reader.ts";

export { MODEL, TEST_TOKEN, prepareCorpus, startApi, startStudyApi, type Corpus, type ScriptedApiOptions, type StudyApi, type StudyRun } from "../../src/calibrate/env.ts";
export type ConformanceApi = DirectApi;

export const runtime = new DockerRuntime();
const docker = new Docker();

/** The real image of the pinned binary, once per test run (see tests/support/real-claude-image.ts). */
export function realImage(): Promise<{ tag: string; id: string }> {
  return realClaudeImage(runtime);
}

/** Requests to the Messages endpoint (the CLI sends nothing else with nonessential traffic off). */
export function messageRequests(api: ScriptedApi) {
  return api.requests.filter((r) => r.path.startsWith("/v1/messages"));
}

export type StudyRunOptions = Omit<CalibrationRunOptions, "runtime" | "cliVersion" | "ociRuntime"> & {
  /** --runtime: the OCI runtime of every container of the run (the engine's default when absent). */
  runtime?: string;
};

/**
 * Runs the study through the runner's own orchestrator (src/calibrate/env.ts), in this process, on
 * the real engine, for the pinned version; a run through the gateway has its metered usage held to
 * its transcript's.
 */
export async function runConformanceStudy(o: StudyRunOptions): Promise<StudyRun> {
  const { runtime: ociRuntime, ...rest } = o;
  const run = await runPilotStudy({ ...rest, runtime, cliVersion: CLAUDE_CODE_VERSION, ...(ociRuntime !== undefined ? { ociRuntime } : {}) });
  if (o.gateway ?? (o.api?.route === "gateway" ? o.api.gateway : undefined)) assertLedgerMeteredEqualsTranscript(run.ledger);
  return run;
}

/** What a transcript says was spent: its `modelUsage` summed over models (the ledger keeps the same four sums). */
export interface TranscriptUsage {
  inputTokens: number;
  outputTokens: number;
  cacheReadInputTokens: number;
  cacheCreationInputTokens: number;
}

/** The four sums of a transcript's `modelUsage` (zero when it has none: then any metered reply differs). */
export function modelUsageTotals(modelUsage: TranscriptFacts["modelUsage"]): TranscriptUsage {
  const entries = Object.values(modelUsage ?? {});
  const sum = (k: keyof TranscriptUsage) => entries.reduce((n, m) => n + m[k], 0);
  return { inputTokens: sum("inputTokens"), outputTokens: sum("outputTokens"), cacheReadInputTokens: sum("cacheReadInputTokens"), cacheCreationInputTokens: sum("cacheCreationInputTokens") };
}

/** The part of a gateway record (src/gateway/gateway.ts, or the ledger's copy of it) the assertion reads. */
type MeteredRecord = {
  requests: ReadonlyArray<
    Pick<GatewayRequestRecord, "messageId" | "refused" | "complete" | "inputTokens" | "outputTokens" | "cacheReadInputTokens" | "cacheWrite5mInputTokens" | "cacheWrite1hInputTokens">
  >;
};

/**
 * Metered usage equals the transcript's, held in every conformance scenario that goes through the
 * gateway, on top of the runner's own comparison (which makes a difference invalid-setup): the
 * replies the gateway metered, once per message id, sum to the transcript's input, output, cache
 * read and cache write tokens, and every metered reply was whole. `perMessage`, when given, is
 * also held message by message on the prompt side (the CLI's zero-usage `<synthetic>` error
 * stand-in excepted: it never came from the API). Throws, naming `label`, on any difference.
 */
export function assertMeteredEqualsTranscript(label: string, record: MeteredRecord, transcript: { [K in keyof TranscriptUsage]: number | null }, perMessage?: readonly PerMessageUsage[]): void {
  const metered = new Map(record.requests.filter((r) => r.messageId !== null && r.refused === null).map((r) => [r.messageId!, r]));
  const broken = [...metered.values()].filter((r) => !r.complete);
  if (broken.length > 0) throw new Error(`${label}: ${broken.length} metered replies broke off`);
  const sum = (f: (r: MeteredRecord["requests"][number]) => number | null) => [...metered.values()].reduce((n, r) => n + (f(r) ?? 0), 0);
  const got: TranscriptUsage = {
    inputTokens: sum((r) => r.inputTokens),
    outputTokens: sum((r) => r.outputTokens),
    cacheReadInputTokens: sum((r) => r.cacheReadInputTokens),
    cacheCreationInputTokens: sum((r) => (r.cacheWrite5mInputTokens ?? 0) + (r.cacheWrite1hInputTokens ?? 0)),
  };
  const differs = (Object.keys(got) as Array<keyof TranscriptUsage>).filter((k) => got[k] !== transcript[k]);
  if (differs.length > 0) throw new Error(`${label}: metered ${JSON.stringify(got)}, transcript ${JSON.stringify(transcript)}`);
  for (const m of perMessage ?? []) {
    const r = metered.get(m.messageId);
    if (!r && m.inputTokens + m.cacheReadInputTokens + m.cacheCreationInputTokens === 0) continue;
    const prompt = r && [r.inputTokens, r.cacheReadInputTokens, (r.cacheWrite5mInputTokens ?? 0) + (r.cacheWrite1hInputTokens ?? 0)];
    if (!prompt || prompt.join("/") !== [m.inputTokens, m.cacheReadInputTokens, m.cacheCreationInputTokens].join("/")) {
      throw new Error(`${label}: message ${m.messageId} metered prompt ${prompt?.join("/") ?? "none"}, transcript ${m.inputTokens}/${m.cacheReadInputTokens}/${m.cacheCreationInputTokens}`);
    }
  }
}

/** The assertion over a study ledger: every completed attempt's gateway record against its observation's sums. */
export function assertLedgerMeteredEqualsTranscript(ledger: Ledger): void {
  for (const o of ledger.observations) {
    if (o.status !== "completed") continue;
    if (!o.gateway) throw new Error(`observation ${o.index} ran through the gateway but has no gateway record`);
    assertMeteredEqualsTranscript(`observation ${o.index}`, o.gateway, o);
  }
}

/**
 * The gateway for a test that builds its attempt containers itself (attemptContainerSpec and
 * runBounded, to measure the CLI below the runner's own stage): the runner's Gateway for the
 * pinned model, the scripted API its upstream, the test login's token the credential it swaps in.
 */
export function testGateway(api: Extract<StudyApi, { route: "gateway" }>): Gateway {
  return new Gateway({ model: MODEL, upstream: api.gateway });
}

export interface TestGatewayAttempt {
  /** The attempt's socket: the container's `modelApiSocket`. */
  socketPath: string;
  /** A HOME staged with the attempt's placeholder login (as the runner stages it), for `homeDir`. */
  homeDir: string;
  placeholder: string;
  /** Stops the attempt's socket and returns what the gateway metered. */
  finish(): Promise<GatewayRecord>;
}

/** One attempt through `gateway`: its socket, and its placeholder login staged at `homeDir` (which must not exist). */
export async function openTestAttempt(gateway: Gateway, homeDir: string, o: { limitUsd?: number } = {}): Promise<TestGatewayAttempt> {
  // A high limit by default: these tests measure the CLI, not the ceiling (tests/conformance/gateway.test.ts does).
  const attempt = await gateway.openAttempt({ credential: TEST_TOKEN, limitUsd: o.limitUsd ?? 100 });
  await stagePlaceholderLogin(homeDir, attempt.placeholder);
  return { socketPath: attempt.socketPath, homeDir, placeholder: attempt.placeholder, finish: () => attempt.stop() };
}

/** tool_use blocks of a transcript, in order. */
export function toolUses(events: ReadonlyArray<Record<string, any>>): Array<{ id: string; name: string; input: any }> {
  return events.flatMap((e) => (e.type === "assistant" ? (e.message.content as any[]) : [])).filter((b) => b.type === "tool_use");
}

/** tool_result blocks of a transcript, in order. */
export function toolResults(events: ReadonlyArray<Record<string, any>>): Array<{ tool_use_id: string; is_error?: boolean; content: unknown }> {
  return events.flatMap((e) => (e.type === "user" && Array.isArray(e.message.content) ? (e.message.content as any[]) : [])).filter((b) => b.type === "tool_result");
}

/** Every regular file under `dir` (bounded), as text. */
async function filesUnder(dir: string, out: Array<{ path: string; text: string }> = [], depth = 0): Promise<Array<{ path: string; text: string }>> {
  if (depth > 12 || out.length > 5000) return out;
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const p = join(dir, name);
    const st = await lstat(p).catch(() => undefined);
    if (!st) continue;
    if (st.isDirectory()) await filesUnder(p, out, depth + 1);
    else if (st.isFile() && st.size < 8 * 1024 * 1024) out.push({ path: p, text: await readFile(p, "utf8").catch(() => "") });
  }
  return out;
}

export interface ContainerScan {
  id: string;
  networkMode: string;
  interfaces: string[];
  envHasRealToken: boolean;
  envNames: string[];
  mountFilesWithRealToken: string[];
  placeholderFiles: number;
}

/**
 * Inspects the running containers with these labels (an attempt's, while the scripted API holds
 * its request): environment, every file under its mounts (read on the host), network mode, and
 * the interfaces node sees inside. Each container is scanned once into `seen`.
 */
export async function scanContainers(seen: Map<string, ContainerScan>, labels: Record<string, string>): Promise<void> {
  const list = await docker.listContainers({ filters: { label: Object.entries(labels).map(([k, v]) => `${k}=${v}`), status: ["running"] } });
  for (const c of list) {
    if (seen.has(c.Id)) continue;
    const info = await docker.getContainer(c.Id).inspect();
    const env = info.Config.Env ?? [];
    const mountFilesWithRealToken: string[] = [];
    let placeholderFiles = 0;
    for (const m of info.Mounts) {
      for (const f of await filesUnder(m.Source)) {
        if (f.text.includes(TEST_TOKEN)) mountFilesWithRealToken.push(f.path);
        if (f.text.includes("study-runner-placeholder-")) placeholderFiles++;
      }
    }
    const exec = await docker
      .getContainer(c.Id)
      .exec({ Cmd: [IMAGE_LAYOUT.node, "-e", "process.stdout.write(JSON.stringify(Object.keys(require('os').networkInterfaces())))"], AttachStdout: true, AttachStderr: true, User: "1000:1000" });
    const stream = await exec.start({ hijack: true, stdin: false });
    const raw = await new Promise<Buffer>((resolve) => {
      const chunks: Buffer[] = [];
      stream.on("data", (d: Buffer) => chunks.push(d));
      stream.on("end", () => resolve(Buffer.concat(chunks)));
    });
    // The multiplexed stream has 8-byte frame headers; the JSON array is the printable part.
    const interfaces = JSON.parse(/\[.*\]/.exec(raw.toString("latin1"))?.[0] ?? "null") as string[];
    seen.set(c.Id, {
      id: c.Id,
      networkMode: info.HostConfig.NetworkMode ?? "",
      interfaces,
      envHasRealToken: env.some((e) => e.includes(TEST_TOKEN)),
      envNames: env.map((e) => e.split("=")[0]!),
      mountFilesWithRealToken,
      placeholderFiles,
    });
  }
}
