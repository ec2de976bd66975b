/**
 * Shared set-up of the conformance suite: the REAL Claude Code binary (the pinned npm package,
 * installed into the cache when missing) in the real image (built offline, cached by its context
 * digest), the demo corpus with its doc-bridge indexes, a test login, and the scripted Messages
 * API. A study run here goes through the runner's model gateway by default (the scripted API is
 * its upstream over TLS on loopback, trusted through a test CA), so every scenario's metered usage
 * is held to its transcript's; `startApi` keeps the direct route (a unix socket the runner hands
 * to every attempt container, network none, relay on 127.0.0.1 inside) for the commands tested
 * through the binary and for scenarios that must bypass the gateway. Nothing here reaches a
 * network or spends money.
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { realClaudeImage } from "../support/real-claude-image.ts";
import { DockerRuntime } from "../../src/runtime/docker.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/scripted-api/server.ts";
import type { ScriptInput } from "../../src/scripted-api/script.ts";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { buildIndex } from "../../src/mcp/reference-server.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import { planStudy, type PlannedAttempt } from "../../src/plan/plan.ts";
import type { Arm } from "../../src/terms/terms.ts";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { runStudy, type StudyConfig } from "../../src/study/run.ts";
import type { StudySummary } from "../../src/study/summary.ts";
import { readLedger } from "../../src/ledger/store.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { makeTestCa, type TestCa } from "../support/test-ca.ts";

/** The pinned model of the protocol; the scripted API echoes the requested model. */
export const MODEL = "claude-haiku-5-5";
/** The test login's token: a placeholder that authenticates nothing. */
export const TEST_TOKEN = "test-access-token-not-a-real-credential";

export const runtime = new DockerRuntime();

/** The real image of the pinned binary, once per test run (see tests/support/real-claude-image.ts). */
export function realImage(): Promise<{ tag: string; id: string }> {
  return realClaudeImage(runtime);
}

export interface Corpus {
  work: string;
  roots: Map<string, string>;
  /** Folder holding the test login's .credentials.json (what --claude-config-dir names). */
  loginDir: string;
  cleanup(): Promise<void>;
}

/** The demo corpus at its pins, a doc-bridge index per checkout, and a test login. */
export async function prepareCorpus(name: string): Promise<Corpus> {
  const work = await mkdtemp(join(tmpdir(), `sr-conf-${name}-`));
  const corpus = await makeDemoCorpus(join(work, "corpus"));
  for (const { dir } of Object.values(corpus)) await buildIndex(dir);
  const loginDir = join(work, "login");
  await writeTestLogin(loginDir, TEST_TOKEN);
  return {
    work,
    roots: new Map(Object.entries(corpus).map(([n, { dir }]) => [n, dir])),
    loginDir,
    cleanup: () => rm(work, { recursive: true, force: true }),
  };
}

export type ConformanceApi = ScriptedApi & { socketPath: string };

/** A scripted API on a socket in a folder of its own, which uid 1000 in the container may enter. */
export async function startApi(script: ScriptInput | readonly ScriptInput[], options: { recordBodies?: boolean } = {}): Promise<ConformanceApi> {
  const dir = await mkdtemp(join(tmpdir(), "sr-conf-api-"));
  await chmod(dir, 0o755);
  const api = await startScriptedApi({ socketPath: join(dir, "api.sock"), script, recordBodies: options.recordBodies });
  return {
    ...api,
    socketPath: api.socketPath!,
    requests: api.requests,
    claims: api.claims,
    close: async () => {
      await api.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

let testCa: TestCa | undefined;

/** The scripted API as a study run here reaches it: through the gateway unless the scenario says why not. */
export type StudyApi = ScriptedApi & ({ route: "gateway"; gateway: { url: string; ca: string } } | { route: "direct"; socketPath: string });

/**
 * The scripted API for runConformanceStudy: by default on a loopback TLS port, the upstream of the
 * runner's gateway, so the run meters every reply and holds it to the transcript (a difference is
 * invalid-setup). `direct` names why a scenario must reach the API without the gateway (a scripted
 * usage no request could produce, which the gateway would rightly refuse as invalid-setup).
 */
export async function startStudyApi(script: ScriptInput | readonly ScriptInput[], options: { recordBodies?: boolean; direct?: string } = {}): Promise<StudyApi> {
  if (options.direct !== undefined) {
    if (options.direct.trim() === "") throw new Error("startStudyApi: say why the scenario bypasses the gateway");
    return { ...(await startApi(script, options)), route: "direct" };
  }
  testCa ??= makeTestCa();
  const api = await startScriptedApi({ port: 0, tls: { key: testCa.key, cert: testCa.cert }, script, recordBodies: options.recordBodies });
  return Object.assign(api, { route: "gateway" as const, gateway: { url: api.url!, ca: testCa.ca } });
}

/** Requests to the Messages endpoint (the CLI sends nothing else with nonessential traffic off). */
export function messageRequests(api: ScriptedApi) {
  return api.requests.filter((r) => r.path.startsWith("/v1/messages"));
}

export interface StudyRun {
  code: number;
  summary: StudySummary;
  ledger: Ledger;
  /** stdout lines of each attempt, by plan index. */
  lines: Map<number, string[]>;
  /** Parsed events of each attempt (every line must be JSON). */
  events(index: number): Array<Record<string, any>>;
  stderr: string;
}

export interface StudyRunOptions {
  corpus: Corpus;
  /** The scripted API (startStudyApi): through the gateway, or on a unix socket reached directly through the relay (login-copy mode). */
  api?: StudyApi;
  /** Or: through the runner's model gateway, with this HTTPS upstream and the CA it trusts. */
  gateway?: { url: string; ca: string };
  image: string;
  /** The pilot (both arms of the first task), or one attempt of that task in one arm. */
  plan: "pilot" | Arm;
  attemptBudgetUsd?: number;
  capUsd?: number;
  timeoutMs?: number;
}

/** Runs the study through the runner's own orchestrator, in this process, on the real engine. */
export async function runConformanceStudy(o: StudyRunOptions): Promise<StudyRun> {
  const loaded = await loadManifest(DEMO_MANIFEST);
  const pilot = planStudy(loaded.manifest, "pilot");
  const plan: PlannedAttempt[] = o.plan === "pilot" ? pilot : pilot.filter((a) => a.arm === o.plan).map((a) => ({ ...a, index: 0 }));
  const gateway = o.gateway ?? (o.api?.route === "gateway" ? o.api.gateway : undefined);
  const outDir = await mkdtemp(join(o.corpus.work, "ledger-"));
  const config: StudyConfig = {
    loaded,
    mode: "pilot",
    plan,
    fullPlanSize: planStudy(loaded.manifest, "full").length,
    roots: o.corpus.roots,
    model: MODEL,
    capUsd: o.capUsd ?? 1,
    attemptBudgetUsd: o.attemptBudgetUsd ?? 0.1,
    output: join(outDir, "ledger.json"),
    image: o.image,
    expectedCliVersion: CLAUDE_CODE_VERSION,
    isolation: "offline",
    docBridgeCommand: referenceEngineCommand(),
    claudeConfigDir: o.corpus.loginDir,
    ...(gateway
      ? { credentials: "gateway" as const, gatewayUpstream: { url: gateway.url, ca: gateway.ca } }
      : { credentials: "login-copy" as const, modelApi: { socketPath: (o.api as Extract<StudyApi, { route: "direct" }>).socketPath } }),
    timeoutMs: o.timeoutMs,
    quiet: true,
  };
  const lines = new Map<number, string[]>();
  let stdout = "";
  let stderr = "";
  const code = await runStudy(config, {
    runtime,
    stdout: (t) => (stdout += t),
    stderr: new Writable({
      write(chunk, _enc, cb) {
        stderr += String(chunk);
        cb();
      },
    }),
    onTranscriptLine: (attempt, line) => {
      const list = lines.get(attempt.index) ?? [];
      list.push(line);
      lines.set(attempt.index, list);
    },
  });
  const ledger = await readLedger(config.output);
  if (gateway) assertMeteredEqualsTranscript(ledger);
  return {
    code,
    summary: JSON.parse(stdout) as StudySummary,
    ledger,
    lines,
    events: (index) => (lines.get(index) ?? []).filter((l) => l !== "").map((l) => JSON.parse(l) as Record<string, any>),
    stderr,
  };
}

/**
 * Held in every scenario run through the gateway, on top of the runner's own comparison (which
 * makes a difference invalid-setup): each completed attempt's metered input and output tokens,
 * summed over the replies the gateway saw, are the ledger's (the transcript's) totals.
 */
function assertMeteredEqualsTranscript(ledger: Ledger): void {
  for (const o of ledger.observations) {
    if (o.status !== "completed") continue;
    if (!o.gateway) throw new Error(`observation ${o.index} ran through the gateway but has no gateway record`);
    // One record per message id, as the runner's comparison counts them.
    const metered = [...new Map(o.gateway.requests.filter((r) => r.messageId !== null && r.refused === null).map((r) => [r.messageId, r])).values()];
    const input = metered.reduce((n, r) => n + (r.inputTokens ?? 0), 0);
    const output = metered.reduce((n, r) => n + (r.outputTokens ?? 0), 0);
    if (input !== o.inputTokens || output !== o.outputTokens) {
      throw new Error(`observation ${o.index}: metered ${input} input / ${output} output tokens, transcript ${o.inputTokens} / ${o.outputTokens}`);
    }
  }
}

/** tool_use blocks of a transcript, in order. */
export function toolUses(events: ReadonlyArray<Record<string, any>>): Array<{ id: string; name: string; input: any }> {
  return events.flatMap((e) => (e.type === "assistant" ? (e.message.content as any[]) : [])).filter((b) => b.type === "tool_use");
}

/** tool_result blocks of a transcript, in order. */
export function toolResults(events: ReadonlyArray<Record<string, any>>): Array<{ tool_use_id: string; is_error?: boolean; content: unknown }> {
  return events.flatMap((e) => (e.type === "user" && Array.isArray(e.message.content) ? (e.message.content as any[]) : [])).filter((b) => b.type === "tool_result");
}
