/**
 * Where a calibration runs a Claude Code version (contract R223): the demo corpus at its pins with
 * a doc-bridge index per checkout, a test login that authenticates nothing, and the scripted
 * Messages API (src/stand-ins/scripted-api) standing in for the model, reached either through the
 * runner's model gateway (its upstream on a loopback TLS port, trusted through a throw-away CA) or
 * directly on a unix socket through the in-container relay. Every run goes through the runner's
 * own orchestrator, containers (network none) and ledger. Nothing reaches a network or spends
 * money. The conformance suite runs on the same set-up (tests/conformance/support.ts).
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { makeDemoCorpus } from "../demo/corpus.ts";
import { writeTestLogin } from "../demo/setup.ts";
import { makeTestCa, type TestCa } from "../demo/test-ca.ts";
import { readLedger } from "../ledger/store.ts";
import type { Ledger } from "../ledger/schema.ts";
import { loadManifest } from "../manifest/load.ts";
import { referenceEngineCommand } from "../mcp/preflight.ts";
import { buildIndex } from "../mcp/reference-server.ts";
import { planStudy, type PlannedAttempt } from "../plan/plan.ts";
import type { ContainerRuntime } from "../sandbox/port.ts";
import type { ScriptInput } from "../stand-ins/scripted-api/script.ts";
import { startScriptedApi, type ScriptedApi } from "../stand-ins/scripted-api/server.ts";
import { runStudy, type StudyConfig } from "../study/run.ts";
import type { StudySummary } from "../study/summary.ts";
import type { Arm } from "../terms/terms.ts";
import { DEMO_MANIFEST } from "../util/paths.ts";

/** The protocol's model in every calibration run; the scripted API echoes the requested model. */
export const MODEL = "claude-haiku-5-5";
/** The test login's token: a placeholder that authenticates nothing. */
export const TEST_TOKEN = "test-access-token-not-a-real-credential";

export interface Corpus {
  work: string;
  roots: Map<string, string>;
  /** Folder holding the test login's .credentials.json (what --claude-config-dir names). */
  loginDir: string;
  cleanup(): Promise<void>;
}

/** The demo corpus at its pins, a doc-bridge index per checkout, and a test login, in a fresh folder under the system temp dir. */
export async function prepareCorpus(name: string): Promise<Corpus> {
  const work = await mkdtemp(join(tmpdir(), `sr-calibrate-${name}-`));
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

export type DirectApi = ScriptedApi & { socketPath: string };

/** What a caller may ask of the scripted API: whole request bodies, a hook on each request (while its attempt waits for the reply). */
export type ScriptedApiOptions = Pick<Parameters<typeof startScriptedApi>[0], "recordBodies" | "onRequest">;

/** A scripted API on a socket in a folder of its own, which uid 1000 in the container may enter. */
export async function startApi(script: ScriptInput | readonly ScriptInput[], options: ScriptedApiOptions = {}): Promise<DirectApi> {
  const dir = await mkdtemp(join(tmpdir(), "sr-calibrate-api-"));
  await chmod(dir, 0o755);
  const api = await startScriptedApi({ socketPath: join(dir, "api.sock"), script, recordBodies: options.recordBodies, onRequest: options.onRequest });
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

/** The scripted API as a study run reaches it: through the gateway unless the scenario says why not. */
export type StudyApi = ScriptedApi & ({ route: "gateway"; gateway: { url: string; ca: string } } | { route: "direct"; socketPath: string });

/**
 * The scripted API for a study run: by default on a loopback TLS port, the upstream of the
 * runner's gateway, so the run meters every reply and holds it to the transcript (a difference is
 * invalid-setup). `direct` names why a scenario must reach the API without the gateway (what the
 * CLI sends before any shape check, or a scripted usage no request could produce).
 */
export async function startStudyApi(script: ScriptInput | readonly ScriptInput[], options: ScriptedApiOptions & { direct?: string } = {}): Promise<StudyApi> {
  if (options.direct !== undefined) {
    if (options.direct.trim() === "") throw new Error("startStudyApi: say why the scenario bypasses the gateway");
    return { ...(await startApi(script, options)), route: "direct" };
  }
  testCa ??= makeTestCa();
  const api = await startScriptedApi({ port: 0, tls: { key: testCa.key, cert: testCa.cert }, script, recordBodies: options.recordBodies, onRequest: options.onRequest });
  return Object.assign(api, { route: "gateway" as const, gateway: { url: api.url!, ca: testCa.ca } });
}

/** How a CLI unit reaches the scripted API in a run kind's config: the gateway with its upstream, or the socket directly with a copied login. */
export function apiRoute(api: StudyApi): Pick<StudyConfig, "credentials" | "gatewayUpstream" | "modelApi"> {
  return api.route === "gateway" ? { credentials: "gateway", gatewayUpstream: { url: api.gateway.url, ca: api.gateway.ca } } : { credentials: "login-copy", modelApi: { socketPath: api.socketPath } };
}

export interface StudyRun {
  code: number;
  summary: StudySummary;
  ledger: Ledger;
  /** Where the run wrote its ledger (its transcripts beside it). */
  ledgerPath: string;
  /** stdout lines of each attempt, by plan index. */
  lines: Map<number, string[]>;
  /** Parsed events of each attempt (every line must be JSON). */
  events(index: number): Array<Record<string, any>>;
  stderr: string;
}

export interface StudyRunOptions {
  corpus: Corpus;
  runtime: ContainerRuntime;
  /** The Claude Code version the image must report (its profile is the one the run's guards read). */
  cliVersion: string;
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
  /** --runtime: the OCI runtime of every container of the run (the engine's default when absent). */
  ociRuntime?: string;
}

/** Runs the demo pilot (or one arm of it) through the runner's own orchestrator, in this process, on the real engine. */
export async function runPilotStudy(o: StudyRunOptions): Promise<StudyRun> {
  const loaded = await loadManifest(DEMO_MANIFEST);
  const pilot = planStudy(loaded.manifest, "pilot");
  const plan: PlannedAttempt[] = o.plan === "pilot" ? pilot : pilot.filter((a) => a.arm === o.plan).map((a) => ({ ...a, index: 0 }));
  const route = o.gateway ? ({ credentials: "gateway", gatewayUpstream: o.gateway } as const) : apiRoute(o.api!);
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
    expectedCliVersion: o.cliVersion,
    isolation: "offline",
    docBridgeCommand: referenceEngineCommand(),
    claudeConfigDir: o.corpus.loginDir,
    ...route,
    timeoutMs: o.timeoutMs,
    ...(o.ociRuntime !== undefined ? { runtime: o.ociRuntime } : {}),
    quiet: true,
  } as StudyConfig;
  const lines = new Map<number, string[]>();
  let stdout = "";
  let stderr = "";
  const code = await runStudy(config, {
    runtime: o.runtime,
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
  return {
    code,
    summary: JSON.parse(stdout) as StudySummary,
    ledger,
    ledgerPath: config.output,
    lines,
    events: (index) => (lines.get(index) ?? []).filter((l) => l !== "").map((l) => JSON.parse(l) as Record<string, any>),
    stderr,
  };
}
