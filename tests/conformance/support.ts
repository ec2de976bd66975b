/**
 * Shared set-up of the conformance suite: the REAL Claude Code binary (the pinned npm package,
 * installed into the cache when missing) in the real image (built offline, cached by its context
 * digest), the demo corpus with its doc-bridge indexes, a test login, and the scripted Messages
 * API on a unix socket that the runner hands to every attempt container (network none, relay on
 * 127.0.0.1 inside). Nothing here reaches a network or spends money.
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
  /** The scripted API on a unix socket, reached directly through the relay (login-copy mode). */
  api?: { socketPath: string };
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
    ...(o.gateway ? { credentials: "gateway" as const, gatewayUpstream: { url: o.gateway.url, ca: o.gateway.ca } } : { modelApi: { socketPath: o.api!.socketPath } }),
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
  return {
    code,
    summary: JSON.parse(stdout) as StudySummary,
    ledger: await readLedger(config.output),
    lines,
    events: (index) => (lines.get(index) ?? []).filter((l) => l !== "").map((l) => JSON.parse(l) as Record<string, any>),
    stderr,
  };
}

/** tool_use blocks of a transcript, in order. */
export function toolUses(events: ReadonlyArray<Record<string, any>>): Array<{ id: string; name: string; input: any }> {
  return events.flatMap((e) => (e.type === "assistant" ? (e.message.content as any[]) : [])).filter((b) => b.type === "tool_use");
}

/** tool_result blocks of a transcript, in order. */
export function toolResults(events: ReadonlyArray<Record<string, any>>): Array<{ tool_use_id: string; is_error?: boolean; content: unknown }> {
  return events.flatMap((e) => (e.type === "user" && Array.isArray(e.message.content) ? (e.message.content as any[]) : [])).filter((b) => b.type === "tool_result");
}
