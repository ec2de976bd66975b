import { jsonObjectLine } from "../util/json-line.ts";
import { randomUUID } from "node:crypto";
import { resolve } from "node:path";
import { expectedInit } from "../claude/init-expectation.ts";
import { mkdir } from "node:fs/promises";
import { createHash } from "node:crypto";
import { resolveLogin, type LoginLock } from "../credentials/login.ts";
import { lockUnitLogin } from "../credentials/unit-login.ts";
import { cliRunInput, runCliInContainer, type CliRunDeps, type CliRunResult } from "../transport/cli/run.ts";
import { emptyRunFacts } from "../transport/cli/record.ts";
import { runLoop, type Book, type Checkpoint, type LoopEnd, type RunKind, type UnitContext, type UnitOutcome } from "../loop/loop.ts";
import type { Reservation } from "../budget/budget.ts";
import { pico, sumUsd } from "../cost/money.ts";
import type { AttemptStatus } from "../terms/terms.ts";
import { isFakeClaudeImage, probeVersion, useRunProfile } from "../image/build.ts";
import { requireProfileFor } from "../profile/load.ts";
import { networkFor, type IsolationProfile } from "../isolation/profile.ts";
import { runnerLabels } from "../sandbox/reaper.ts";
import type { ContainerRuntime, EngineInfo } from "../sandbox/port.ts";
import type { Sandbox } from "../sandbox/sandbox.ts";
import { chooseSandboxChannel, sandboxHeader } from "../transport/cli/preflight.ts";
import { assertRuntimeOffered, resolveOciRuntime, runtimeNeeds } from "../isolation/oci-runtime.ts";
import { sessionCallTranscript, TranscriptStore } from "../ledger/transcripts.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { ExitCode, RefusalError, UsageError } from "../util/errors.ts";
import { answerPrompt, readSessionResult, SESSION_INIT_TOOLS, sessionArguments, sessionPrompt, type ResultReading } from "./args.ts";
import { budgetReached, callShareUsd, sessionSpentUsd } from "./money.ts";
import { collectSessionCall, makeWorktree, removeSessionStorage, sessionPaths, stageSessionCall } from "./state.ts";
import { createSessionLedger, readSessionLedger, writeSessionLedger } from "./store.ts";
import { runTestCommand } from "./test-command.ts";
import { dockerSandbox, type SandboxChannel } from "../sandbox/docker-sandbox.ts";
import { exportSourceFor } from "../export/options.ts";
import { planExport } from "../export/export.ts";
import { readJsonAs } from "../util/json-file.ts";
import { gatewayForRun, gatewayUnits, type GatewayRunOptions, type RunGateway } from "../gateway/run.ts";
import {
  MAX_QUESTIONS,
  RETRYABLE_STATES,
  SESSION_LEDGER_KIND,
  SessionManifestSchema,
  type HarnessEvent,
  type Session,
  type SessionCall,
  type SessionLedger,
  type SessionManifest,
  type SessionResult,
  type SessionTask,
} from "./schema.ts";

/** What a pass needs besides the ledger: the things that are not recorded (sockets, test hooks). */
export interface SessionRuntimeOptions extends GatewayRunOptions {
  claudeConfigDir?: string;
  /** A Messages API on a host unix socket (the scripted API); needs isolation offline. */
  modelApi?: { socketPath: string };
  isolation: IsolationProfile;
  fake?: { behaviourFile?: string; recordsDir?: string };
  timeoutMs?: number;
  /** The manifest's path when it moved since the start (its sha256 must still match). */
  manifestPath?: string;
  /** --sandbox-channel: how the containers get their content and reach the runner's sockets; the files probe chooses when absent (contract R244). */
  sandboxChannel?: SandboxChannel;
}

/** What a session's calls need of the OCI runtime: network none or the bridge, the gateway's or the Messages API's socket. */
function sessionRuntimeNeeds(o: SessionRuntimeOptions) {
  const gateway = o.credentials === "gateway";
  return runtimeNeeds({ network: o.isolation === "standard" && !gateway && !o.modelApi ? "bridge" : "none", gateway, modelApiSocket: o.modelApi !== undefined });
}

export interface SessionDeps {
  runtime: ContainerRuntime;
  /** Where the calls and test commands run: the Docker provider over `runtime` on the chosen channel when absent. */
  sandbox?: Sandbox;
  /** Test-only (docs/reliability.md): stops the process at a named point of a call. */
  checkpoint?: (point: Checkpoint) => void;
  now?: () => Date;
  signal?: AbortSignal;
  say?: (line: string) => void;
  /** Every stdout line of every call, as it arrives (a conformance measurement reads the init events). */
  onTranscriptLine?: (session: Session, call: SessionCall, line: string) => void;
}

export interface StartConfig extends SessionRuntimeOptions {
  manifestPath: string;
  /** --runtime: the OCI runtime of every container of these sessions (the engine's default when absent). */
  ociRuntime?: string;
  roots: ReadonlyMap<string, string>;
  output: string;
  model: string;
  image: string;
  expectedCliVersion: string;
  capUsd: number;
  callBudgetUsd: number;
  sessionBudgetUsd: number;
}

export async function loadSessionManifest(path: string): Promise<{ manifest: SessionManifest; sha256: string; bytes: Buffer }> {
  const { value, bytes } = await readJsonAs(path, SessionManifestSchema, { name: `the session manifest ${path}`, readFix: "check --manifest", mismatch: "is invalid", written: "by-hand" });
  return { manifest: value, sha256: createHash("sha256").update(bytes).digest("hex"), bytes };
}

/**
 * Starts one session per task: the ledger (with each session's generated id) and the worktrees
 * exist before the first launch, then every session gets its first call, and sessions answered
 * by the manifest's scripted answers are resumed until each is done, parked or ended.
 */
export async function startSessions(config: StartConfig, deps: SessionDeps): Promise<{ exitCode: number; ledgerPath: string; ledger: SessionLedger }> {
  const { manifest, sha256, bytes: manifestBytes } = await loadSessionManifest(config.manifestPath);
  const problems: string[] = [];
  for (const repo of new Set(manifest.tasks.map((t) => t.repository))) if (!config.roots.has(repo)) problems.push(`--root ${repo}=PATH is missing: the checkout of '${repo}' at its pin`);
  if (!(config.capUsd > 0)) problems.push("--cap-usd must be a positive number of USD");
  if (!(config.callBudgetUsd > 0)) problems.push("--call-budget-usd must be a positive number of USD");
  if (!(config.sessionBudgetUsd > 0)) problems.push("--session-budget-usd must be a positive number of USD");
  if (problems.length) throw new UsageError(problems.join("\n"), problems);
  // Each repository's export listed once with the export's own code before anything is made or
  // reserved: the pin rule, the answer keys and every limit (contract R121, R124).
  for (const repo of new Set(manifest.tasks.map((t) => t.repository))) {
    try {
      await planExport({
        ...(await exportSourceFor({ path: config.manifestPath, bytes: manifestBytes, manifest }, repo, config.roots.get(repo)!)),
        parentDir: sessionPaths(`${resolve(config.output)}.sessions`, randomUUID()).root,
      });
    } catch (err) {
      if (err instanceof UsageError) problems.push(...err.problems.map((p) => `repository '${repo}': ${p}`));
      else throw err;
    }
  }
  if (problems.length) throw new UsageError(problems.join("\n"), problems);
  const engine = await deps.runtime.ping();
  assertRuntimeOffered(engine, config.ociRuntime, "--runtime");
  const probed = await probeVersion(deps.runtime, config.image, { labels: runnerLabels("sessions", "probe"), runtime: config.ociRuntime });
  if (probed.version !== config.expectedCliVersion) throw new RefusalError(`the image ${config.image} reports Claude Code ${probed.version}, not the expected ${config.expectedCliVersion}`);
  useRunProfile(probed, config.image, config.expectedCliVersion);
  const channel = await sessionChannel(deps.runtime, engine, probed.imageId, config, "sessions");
  const ociRuntime = await resolveOciRuntime(deps.runtime, engine, {
    name: config.ociRuntime,
    flag: "--runtime",
    image: config.image,
    labels: runnerLabels("sessions", "probe"),
    needs: sessionRuntimeNeeds(config),
    channel: channel.header.channel,
  });

  const runId = randomUUID();
  // Refused (nothing made, nothing reserved) before the ledger exists when the gateway cannot run.
  const fakeImage = await isFakeClaudeImage(deps.runtime, probed.imageId);
  const gateway = await gatewayForRun(config, { model: config.model, login: resolveLogin({ configDir: config.claudeConfigDir }), holder: runId, limit: callLimit(config.callBudgetUsd), fakeImage });
  const now = () => (deps.now?.() ?? new Date()).toISOString();
  const ledger: SessionLedger = {
    kind: SESSION_LEDGER_KIND,
    schemaVersion: 1,
    runId,
    createdAt: now(),
    manifestPath: config.manifestPath,
    manifestSha256: sha256,
    roots: Object.fromEntries(config.roots),
    model: config.model,
    image: probed.imageId,
    runtime: ociRuntime,
    sandbox: channel.header,
    expectedCliVersion: config.expectedCliVersion,
    capUsd: config.capUsd,
    callBudgetUsd: config.callBudgetUsd,
    sessionBudgetUsd: config.sessionBudgetUsd,
    maxQuestions: MAX_QUESTIONS,
    storageDir: `${config.output}.sessions`,
    status: "running",
    budget: { reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false },
    sessions: [],
    events: [],
  };
  const ledgerPath = await createSessionLedger(config.output, ledger, { checkouts: config.roots, projectRoot: PROJECT_ROOT });
  ledger.storageDir = `${ledgerPath}.sessions`;
  // Beside the ledger, so the same checks (outside every checkout and the project) hold for it; private.
  await mkdir(ledger.storageDir, { mode: 0o700 });
  for (const task of manifest.tasks) ledger.sessions.push(await newSession(ledger, { path: config.manifestPath, bytes: manifestBytes, manifest }, task, config.roots, null));
  // Each call's raw stream-json is kept beside the ledger, like an attempt's (contract R162).
  await TranscriptStore.create(ledgerPath);
  // The session ids are on disk before any container starts.
  await writeSessionLedger(ledgerPath, ledger);
  // What the sandboxes made in the background or ahead is gone before the pass ends (contract R257).
  const exitCode = await advanceSessions(ledgerPath, ledger, manifest, config, deps, { gateway, fakeImage, sandbox: channel.sandbox }).finally(() =>
    Promise.all([gateway?.close(), (deps.sandbox ?? channel.sandbox).settle()]),
  );
  return { exitCode, ledgerPath, ledger };
}

/**
 * The channel every container of a pass runs on (contract R244, R247): `--sandbox-channel`, else
 * the files probe's answer, refused before anything is reserved when it cannot carry the calls
 * (the login-copy mode on engine-api). Chosen again at every resume: the engine may have changed.
 */
async function sessionChannel(runtime: ContainerRuntime, engine: EngineInfo, imageId: string, o: SessionRuntimeOptions, runId: string) {
  const gateway = o.credentials === "gateway";
  const route = { isolation: o.isolation, gateway, modelApiSocket: o.modelApi !== undefined, session: true };
  const channel = await chooseSandboxChannel(runtime, imageId, { runId, route, ...(o.sandboxChannel !== undefined ? { channel: o.sandboxChannel } : {}) });
  return { header: sandboxHeader(engine, channel), sandbox: dockerSandbox(runtime, channel) };
}

/**
 * A new session of `task` (its id generated here, its worktree a fresh export at the pin): the
 * first of the task, or a retry of `retryOf`, an ended session of the same task, with the next
 * attempt number. Nothing of the earlier session is handed on: not its worktree, not its CLI
 * session files, not its answers (contract R115).
 */
async function newSession(
  ledger: SessionLedger,
  manifestFile: { path: string; bytes: Buffer; manifest: SessionManifest },
  task: SessionManifest["tasks"][number],
  roots: ReadonlyMap<string, string>,
  retryOf: Session | null,
): Promise<Session> {
  const id = randomUUID();
  const made = await makeWorktree(ledger.storageDir, id, {
    ...(await exportSourceFor(manifestFile, task.repository, roots.get(task.repository)!)),
    labels: { run: ledger.runId, attempt: `session-${task.id}` },
  });
  return {
    id,
    taskId: task.id,
    repository: task.repository,
    attempt: retryOf ? retryOf.attempt + 1 : 1,
    ...(retryOf ? { retryOf: retryOf.id } : {}),
    state: "new",
    stateReason: null,
    worktree: made.worktree,
    exportHash: made.exportHash,
    questions: [],
    calls: [],
    spentUsd: 0,
    lastTotalCostUsd: 0,
    lastComputedCostUsd: 0,
    messageUsage: [],
    summary: null,
    test: null,
  };
}

/**
 * `study-runner sessions retry`: a new session of a task whose latest session ended
 * too-many-questions or failed, recorded as a retry of it (the next attempt number, `retryOf`),
 * then run with every other ready session as `resume` runs them.
 */
export async function retrySession(
  ledgerPath: string,
  taskOrSession: string,
  options: SessionRuntimeOptions,
  deps: SessionDeps,
): Promise<{ exitCode: number; ledger: SessionLedger; session: Session }> {
  const { ledger, manifest, manifestPath, bytes } = await readForResume(ledgerPath, options);
  const named = ledger.sessions.find((s) => s.id === taskOrSession || s.taskId === taskOrSession);
  if (!named) throw new UsageError(`the ledger has no session or task ${taskOrSession}; give a task id (or session id) that \`study-runner sessions status\` lists`);
  const latest = ledger.sessions.filter((s) => s.taskId === named.taskId).reduce((a, b) => (b.attempt > a.attempt ? b : a));
  if (!RETRYABLE_STATES.has(latest.state)) {
    throw new UsageError(
      `task ${latest.taskId}: its latest session ${latest.id} (attempt ${latest.attempt}) is ${latest.state}; only a session that ended ${[...RETRYABLE_STATES].join(" or ")} is retried`,
    );
  }
  const task = manifest.tasks.find((t) => t.id === latest.taskId)!;
  const session = await newSession(ledger, { path: manifestPath, bytes, manifest }, task, new Map(Object.entries(ledger.roots)), latest);
  ledger.sessions.push(session);
  // The retry and its new session id are on disk before its container starts.
  await writeSessionLedger(ledgerPath, ledger);
  const continued = await continueSessions(ledgerPath, ledger, manifest, options, deps);
  return { ...continued, session };
}

/** Continues every answered session (same worktree, same session id) and any session not started yet. */
export async function resumeSessions(ledgerPath: string, options: SessionRuntimeOptions, deps: SessionDeps): Promise<{ exitCode: number; ledger: SessionLedger }> {
  const { ledger, manifest } = await readForResume(ledgerPath, options);
  return continueSessions(ledgerPath, ledger, manifest, options, deps);
}

/** The ledger and its manifest, refused when the manifest changed since the sessions started. */
async function readForResume(ledgerPath: string, options: SessionRuntimeOptions): Promise<{ ledger: SessionLedger; manifest: SessionManifest; manifestPath: string; bytes: Buffer }> {
  const ledger = await readSessionLedger(ledgerPath);
  // The version's measured resume must be one a session can use, before anything is settled, added or reserved (contract R265).
  requireProfileFor(ledger.expectedCliVersion, "sessions");
  const manifestPath = options.manifestPath ?? ledger.manifestPath;
  const { manifest, sha256, bytes } = await loadSessionManifest(manifestPath);
  if (sha256 !== ledger.manifestSha256) throw new RefusalError(`the manifest ${manifestPath} changed since the sessions started (sha256 ${sha256}, recorded ${ledger.manifestSha256})`);
  return { ledger, manifest, manifestPath, bytes };
}

async function continueSessions(
  ledgerPath: string,
  ledger: SessionLedger,
  manifest: SessionManifest,
  options: SessionRuntimeOptions,
  deps: SessionDeps,
): Promise<{ exitCode: number; ledger: SessionLedger }> {
  // A call left open by a killed runner never gets a result: it is settled failed with its
  // reservation charged, its harness.result written and its session ended, and the command ends
  // blocked with exit 1, as a call that fails inside a pass does (contract R160). Nothing else
  // runs in this command: the next `resume` continues the other sessions.
  const settledNow: string[] = [];
  for (const s of ledger.sessions) {
    const open = s.calls.find((c) => c.phase !== "settled");
    if (open) {
      Object.assign(open, {
        phase: "settled",
        status: "failed",
        chargedUsd: open.reservationUsd,
        statusReason: "the runner stopped during this call; its outcome is unknown and its reservation stays charged",
      });
      ledger.events.push({
        at: (deps.now?.() ?? new Date()).toISOString(),
        type: "harness.result",
        session: s.id,
        status: "failed",
        num_turns: open.numTurns,
        duration_ms: open.durationMs,
        total_cost_usd: null,
        call_cost_usd: open.callCostUsd,
      });
      await endSession(ledger, s, "failed", "a call was interrupted by the runner's end; a session is never continued from an unknown state");
      settledNow.push(`call ${open.index} of session ${s.id} (${s.taskId})`);
    }
  }
  if (settledNow.length > 0) {
    const open = ledger.sessions.flatMap((s) => s.calls.filter((c) => c.phase !== "settled"));
    ledger.budget.reservedUsd = sumUsd(open.map((c) => c.reservationUsd));
    ledger.status = "blocked";
    ledger.statusReason = `${settledNow.join(", ")} ${settledNow.length === 1 ? "was" : "were"} left open by a runner that stopped: settled failed with the reservation charged; \`study-runner resume\` continues the other sessions`;
    await writeSessionLedger(ledgerPath, ledger);
    deps.say?.(ledger.statusReason);
    return { exitCode: ExitCode.blocked, ledger };
  }
  // A resume runs under the runtime the sessions started with, checked again: the engine may have changed since.
  const engine = await deps.runtime.ping();
  const what = `the runtime the session ledger records`;
  if (ledger.runtime !== undefined) assertRuntimeOffered(engine, ledger.runtime, what);
  const channel = await sessionChannel(deps.runtime, engine, ledger.image, options, ledger.runId);
  if (ledger.runtime !== undefined) {
    const labels = runnerLabels(ledger.runId, "probe");
    await resolveOciRuntime(deps.runtime, engine, { name: ledger.runtime, flag: what, image: ledger.image, labels, needs: sessionRuntimeNeeds(options), channel: channel.header.channel });
  }
  ledger.sandbox = channel.header;
  const fakeImage = await isFakeClaudeImage(deps.runtime, ledger.image);
  const gateway = await gatewayForRun(options, {
    model: ledger.model,
    login: resolveLogin({ configDir: options.claudeConfigDir }),
    holder: ledger.runId,
    limit: callLimit(ledger.callBudgetUsd),
    fakeImage,
  });
  const exitCode = await advanceSessions(
    ledgerPath,
    ledger,
    manifest,
    {
      ...options,
      model: ledger.model,
      image: ledger.image,
      expectedCliVersion: ledger.expectedCliVersion,
      roots: new Map(Object.entries(ledger.roots)),
      capUsd: ledger.capUsd,
      callBudgetUsd: ledger.callBudgetUsd,
      sessionBudgetUsd: ledger.sessionBudgetUsd,
    },
    deps,
    { gateway, fakeImage, sandbox: channel.sandbox },
  ).finally(() => Promise.all([gateway?.close(), (deps.sandbox ?? channel.sandbox).settle()]));
  return { exitCode, ledger };
}

async function endSession(ledger: SessionLedger, s: Session, state: Session["state"], reason: string | null): Promise<void> {
  s.state = state;
  s.stateReason = reason;
  await removeSessionStorage(ledger.storageDir, s.id);
  s.worktree = null;
}

type PassConfig = SessionRuntimeOptions & Pick<StartConfig, "model" | "image" | "expectedCliVersion" | "roots" | "capUsd" | "callBudgetUsd" | "sessionBudgetUsd">;

/** The per-call limit the gateway must be able to hold one request under. */
const callLimit = (usd: number) => ({ usd, flag: "--call-budget-usd" });

const ready = (s: Session) => s.state === "new" || s.state === "answered";

/** A harness event as the runner writes it: `at` is added when it is recorded. */
type NewEvent = HarnessEvent extends infer E ? (E extends HarnessEvent ? Omit<E, "at"> : never) : never;

/** What every step of a pass reads: the ledger and its file, the manifest, the configuration and the run's services. */
interface SessionPass {
  ledgerPath: string;
  ledger: SessionLedger;
  manifest: SessionManifest;
  config: PassConfig;
  deps: SessionDeps;
  fakeImage: boolean;
  gateway: RunGateway | undefined;
  /** Where this pass's calls and test commands run. */
  sandbox: Sandbox;
  transcripts: TranscriptStore;
  login: ReturnType<typeof resolveLogin>;
  say(line: string): void;
  now(): Date;
  event(e: NewEvent): void;
}

/** How this pass's calls reach the model: the login lock each holds, or the gateway's units. */
interface CallRoute {
  locks: Map<Session, LoginLock>;
  viaGateway: ReturnType<typeof gatewayUnits<Session>> | undefined;
}

/** What the call's result event says, read from its stream as it arrives. */
interface ResultEvent {
  structuredOutput: unknown;
  resultText: string | null;
  sessionId: string | null;
  durationMs: number | null;
}

/** Passes over the ready sessions, one call each, through the one loop, until none is ready or a pass stops. */
async function advanceSessions(
  ledgerPath: string,
  ledger: SessionLedger,
  manifest: SessionManifest,
  config: PassConfig,
  deps: SessionDeps,
  route: { gateway: RunGateway | undefined; fakeImage: boolean; sandbox: Sandbox },
): Promise<number> {
  const now = () => deps.now?.() ?? new Date();
  const pass: SessionPass = {
    ledgerPath,
    ledger,
    manifest,
    config,
    deps,
    ...route,
    sandbox: deps.sandbox ?? route.sandbox,
    transcripts: await TranscriptStore.openOrCreate(ledgerPath),
    login: resolveLogin({ configDir: config.claudeConfigDir }),
    say: deps.say ?? (() => {}),
    now,
    event: (e) => ledger.events.push({ at: now().toISOString(), ...e } as HarnessEvent),
  };
  ledger.status = "running";
  delete ledger.statusReason;
  for (;;) {
    const units = ledger.sessions.filter(ready);
    if (units.length === 0) break;
    const end = await runPass(pass, units);
    if (end.exitCode !== 0) {
      ledger.status = "blocked";
      ledger.statusReason = end.stopReason ?? "blocked";
      await writeSessionLedger(ledgerPath, ledger);
      return end.exitCode;
    }
  }
  ledger.status = ledger.sessions.some((s) => s.state === "awaiting-answer") ? "parked" : "finished";
  await writeSessionLedger(ledgerPath, ledger);
  return 0;
}

/**
 * One pass: the next call of every ready session, through the loop. The ledger's budget is the
 * loop's book, so what earlier passes spent counts against the ledger's cap.
 */
async function runPass(pass: SessionPass, units: Session[]): Promise<LoopEnd> {
  const { ledger } = pass;
  const book: Book<"running" | "blocked" | "finished"> = { status: "running", budget: ledger.budget };
  const persist = async () => {
    for (const s of ledger.sessions) s.spentUsd = sessionSpentUsd(s.calls);
    await writeSessionLedger(pass.ledgerPath, ledger);
  };
  const end = await runLoop({ kind: sessionCallKind(pass, units), units, book, capUsd: pass.config.capUsd, doneStatus: "finished", persist });
  return { ...end, stopReason: end.stopReason ?? book.statusReason ?? null };
}

/** The session call as the loop's run kind: it reserves per call, through the meter. */
function sessionCallKind(pass: SessionPass, units: Session[]): RunKind<Session, SessionCall> {
  const route: CallRoute = {
    locks: new Map(),
    // The fake image sends no model request: with the gateway its metered spend is 0 and is not compared.
    viaGateway: pass.gateway && gatewayUnits<Session>(pass.gateway, { compareUsage: !pass.fakeImage, signal: pass.deps.signal }),
  };
  return {
    noun: "call",
    number: (s) => units.indexOf(s) + 1,
    describe: (s) => `call ${s.calls.length} of session ${s.id} (${s.taskId})`,
    limitUsd: null,
    recordWithoutRun: (s) => budgetSpent(pass, s),
    acquire: (s) => acquireCall(pass, route, s),
    open: openCall,
    runOne: (s, ctx) => runCall(pass, route, s, ctx),
  };
}

/** The session's budget is checked before every further call (its calls' own costs, summed): true when it is spent and the session parks. */
function budgetSpent(pass: SessionPass, s: Session): boolean {
  const budgetUsd = pass.config.sessionBudgetUsd;
  if (!budgetReached(s, budgetUsd)) return false;
  pass.event({ type: "harness.budget_spent", session: s.id, spent_usd: s.spentUsd, budget_usd: budgetUsd });
  s.state = "budget-spent";
  s.stateReason = `the session's calls cost ${s.spentUsd} USD, which reaches its budget of ${budgetUsd} USD; no further call`;
  pass.say(`session ${s.taskId}: budget spent (${s.spentUsd} of ${budgetUsd} USD)`);
  return true;
}

/**
 * Taken before the call's reservation: with the gateway, the credential (read under the login
 * lock); otherwise the login lock, held until the call's login is written back. Every wait is an
 * `account.lock_wait` event, also one that gave up.
 */
async function acquireCall(pass: SessionPass, route: CallRoute, s: Session): Promise<{ release(): Promise<void> }> {
  const { config, ledger, deps } = pass;
  const started = Date.now();
  try {
    if (route.viaGateway) {
      // Read under the login lock and released at once: nothing is written back in this mode.
      const held = await route.viaGateway.acquire(s);
      pass.event({ type: "account.lock_wait", session: s.id, waited_s: (Date.now() - started) / 1000, gave_up: false });
      return held;
    }
    const lock = await lockUnitLogin(pass.login, { timeoutMs: config.loginLockTimeoutMs, staleMs: config.loginLockStaleMs, holder: ledger.runId, signal: deps.signal, note: pass.say });
    pass.event({ type: "account.lock_wait", session: s.id, waited_s: (Date.now() - started) / 1000, gave_up: false });
    route.locks.set(s, lock);
    return { release: () => (route.locks.delete(s), lock.release()) };
  } catch (err) {
    pass.event({ type: "account.lock_wait", session: s.id, waited_s: (Date.now() - started) / 1000, gave_up: true });
    throw err;
  }
}

/** The session's next call, added to it before anything is reserved (its reservation is set when the meter grants it). */
function openCall(s: Session): SessionCall {
  const call: SessionCall = {
    ...emptyRunFacts(0),
    index: s.calls.length,
    mode: s.calls.length === 0 ? "start" : "resume",
    sessionIdReported: null,
    resultStatus: null,
    durationMs: null,
    callCostUsd: null,
    callComputedCostUsd: null,
    exitCode: null,
    timedOut: null,
    truncated: null,
    statusReason: null,
  };
  s.calls.push(call);
  return call;
}

/**
 * One call of a session: reserve the per-call cap, run the CLI in a fresh container, judge what it
 * returned, settle it, and move the session on (ended, asking, or done).
 */
async function runCall(pass: SessionPass, route: CallRoute, s: Session, ctx: UnitContext<SessionCall>): Promise<UnitOutcome> {
  const call = ctx.entry;
  const task = pass.manifest.tasks.find((t) => t.id === s.taskId)!;
  announceCall(pass, s, call);
  // Each call reserves the full per-call cap: the session's budget is checked before each call
  // (recordWithoutRun), so a session can pass it by at most one call, as the field notes' harness did.
  const reserved = ctx.meter.reserve(pass.config.callBudgetUsd);
  if (!reserved.ok) return notStarted(pass, s, call, reserved.reason);
  call.reservationUsd = reserved.reservation.reservedUsd;
  const out: ResultEvent = { structuredOutput: undefined, resultText: null, sessionId: null, durationMs: null };
  const result = await runCallContainer(pass, route, s, task, ctx, out);
  const judged = judgeCall(pass, s, call, result, out);
  const outcome = settleCall(pass, s, ctx, reserved.reservation, judged);
  if (outcome.status !== "completed" || !judged.reading?.ok) {
    // A failed call ends its session: a failed resume is never handed to another session.
    await endSession(pass.ledger, s, "failed", `call ${call.index} ended ${outcome.status}: ${outcome.reason}`);
    pass.say(`session ${s.taskId}: call ${call.index} ${outcome.status}: ${outcome.reason}`);
    return outcome;
  }
  const r = judged.reading.result;
  if (r.status === "question") await askQuestion(pass, s, task, r);
  else await finishSession(pass, s, task, r);
  return outcome;
}

/** The call's first event: the session starts, or resumes after the answer to its last question. */
function announceCall(pass: SessionPass, s: Session, call: SessionCall): void {
  if (call.mode === "start") pass.event({ type: "harness.start", session: s.id, task: s.taskId, attempt: s.attempt, ...(s.retryOf ? { retry_of: s.retryOf } : {}) });
  else {
    const q = s.questions.at(-1)!;
    pass.event({ type: "harness.resume", session: s.id, waited_s: (Date.parse(q.answer!.answeredAt) - Date.parse(q.askedAt)) / 1000 });
  }
}

/** A call whose reservation did not fit: recorded like any call that did not complete, its result event, its session ended (contract R152, R153). */
async function notStarted(pass: SessionPass, s: Session, call: SessionCall, why: string): Promise<UnitOutcome> {
  const reason = `not started: ${why}`;
  call.statusReason = reason;
  pass.event({ type: "harness.result", session: s.id, status: "failed", num_turns: null, duration_ms: null, total_cost_usd: null, call_cost_usd: null });
  await endSession(pass.ledger, s, "failed", `call ${call.index} ended failed: ${reason}`);
  return { status: "failed", reason, reportedCostUsd: null, computedCostUsd: null };
}

/** The CLI in a fresh container on the session's worktree, its session files staged in and collected back. */
async function runCallContainer(pass: SessionPass, route: CallRoute, s: Session, task: SessionTask, ctx: UnitContext<SessionCall>, out: ResultEvent): Promise<CliRunResult> {
  const { config, ledger, deps } = pass;
  const call = ctx.entry;
  const prompt = call.mode === "start" ? sessionPrompt(task.prompt) : answerPrompt(s.questions.at(-1)!.answer!.text);
  const paths = sessionPaths(ledger.storageDir, s.id);
  const cliDeps: CliRunDeps = { runtime: deps.runtime, sandbox: pass.sandbox, now: deps.now, signal: deps.signal, checkpoint: deps.checkpoint };
  return runCliInContainer(
    cliDeps,
    cliRunInput(
      config,
      { run: ledger.runId, unit: `session-${s.id}-${call.index}`, attemptIndex: ledger.sessions.indexOf(s), imageId: ledger.image, runtimeName: ledger.runtime, last: ctx.last },
      {
        export: { repoDir: config.roots.get(s.repository)!, pin: pass.manifest.repositories[s.repository]!, labels: { run: ledger.runId, attempt: s.id } },
        login: pass.login,
        lock: route.locks.get(s),
        gateway: route.viaGateway && {
          // What this call may still spend under the cap: the loop's, from its own budget.
          ...route.viaGateway.input(s, call.reservationUsd, ctx.remainingUsd),
          cumulativeModelUsage: call.mode === "resume",
        },
        argv: sessionArguments({ model: config.model, maxBudgetUsd: call.reservationUsd, sessionId: s.id, resume: call.mode === "resume" }),
        arm: "repository",
        expectedTools: SESSION_INIT_TOOLS,
        expectedInit: expectedInit(call.mode === "resume" ? "session-resume" : "session-start", { model: config.model, sessionId: s.id }),
        network: networkFor(config.isolation),
        onLine: (line) => {
          readResult(line, out);
          deps.onTranscriptLine?.(s, call, line);
        },
        transcripts: { store: pass.transcripts, index: sessionCallTranscript(ledger.sessions.indexOf(s), call.index) },
        session: {
          worktree: paths.worktree,
          exportHash: s.exportHash,
          priorMessageUsage: s.messageUsage,
          stage: (stagedHome) => stageSessionCall(stagedHome, { worktree: paths.worktree, stateDir: paths.state, prompt, exportHash: s.exportHash, priorMessageUsage: s.messageUsage }),
          collect: (receipt) => collectSessionCall(receipt, paths.state),
        },
      },
    ),
    call,
    ctx.persist,
  );
}

/** What the call is judged to be before its settlement: its status and reason, and the session result it returned. */
interface JudgedCall {
  status: AttemptStatus;
  reason: string;
  reading: ResultReading | undefined;
}

/**
 * Records what the container returned (the session id, the message usage, the call's own share
 * of the session's cumulative costs) and judges it: the metered spend, the session id and the
 * session result can each make a completed run not count.
 */
function judgeCall(pass: SessionPass, s: Session, call: SessionCall, result: CliRunResult, out: ResultEvent): JudgedCall {
  const { fakeImage } = pass;
  call.sessionIdReported = out.sessionId;
  if (result.status === "completed")
    s.messageUsage.push(
      ...result.facts.perMessageUsage.map((m) => ({
        messageId: m.messageId,
        inputTokens: m.inputTokens,
        cacheReadInputTokens: m.cacheReadInputTokens,
        cacheCreationInputTokens: m.cacheCreationInputTokens,
      })),
    );
  call.durationMs = out.durationMs;
  call.resultStatus = null;
  // The CLI reports the session's cumulative cost: the call's own is the difference from the previous result.
  call.callCostUsd = callShareUsd(call.cliReportedCostUsd, s.lastTotalCostUsd);
  call.callComputedCostUsd = callShareUsd(call.computedCostUsd, s.lastComputedCostUsd);
  call.meteredCostUsd = result.gateway ? result.gateway.meteredCostUsd : null;
  call.gateway = result.gateway ?? null;
  let status = result.status;
  let reason = result.reason;
  // The gateway saw every request of this call: its spend and the cumulative difference must agree (contract R112).
  const disagreement = status === "completed" && !fakeImage ? meteredCostProblem(call) : null;
  if (disagreement) {
    status = "invalid-setup";
    reason = disagreement;
    call.setupProblems.push(reason);
  }
  // The result must name the session the runner passed (contract R126): one without a session_id
  // proves nothing about which conversation the CLI continued.
  const idProblem = sessionIdProblem(result.facts.resultSeen, out.sessionId, s.id);
  if (idProblem !== null) {
    status = "invalid-setup";
    reason = idProblem;
    call.setupProblems.push(reason);
  }
  let reading: ResultReading | undefined;
  if (status === "completed") {
    reading = readSessionResult(out.structuredOutput, out.resultText);
    if (!reading.ok) {
      status = "failed";
      reason = `the session result is unusable: ${reading.problem}`;
    } else call.resultStatus = reading.result.status;
  }
  return { status, reason, reading };
}

/** Settles the call on the meter (a success above its reservation is budget-exceeded), records its result event and the session's last cumulative costs. */
function settleCall(pass: SessionPass, s: Session, ctx: UnitContext<SessionCall>, reservation: Reservation, judged: JudgedCall): UnitOutcome {
  const call = ctx.entry;
  const total = call.cliReportedCostUsd;
  const computed = call.computedCostUsd;
  const settled = ctx.meter.settle(reservation, { status: judged.status, reportedCostUsd: call.callCostUsd, computedCostUsd: call.callComputedCostUsd });
  let reason = judged.reason;
  if (settled.status !== "completed" && judged.status === "completed") reason = `the call cost ${settled.chargedUsd} USD, above its reservation of ${call.reservationUsd} USD`;
  const status = settled.status;
  call.statusReason = status === "completed" ? null : reason;
  if (total !== null) s.lastTotalCostUsd = total;
  if (computed !== null) s.lastComputedCostUsd = computed;
  pass.event({
    type: "harness.result",
    session: s.id,
    status: status === "completed" ? (call.resultStatus ?? status) : status,
    num_turns: call.numTurns,
    duration_ms: call.durationMs,
    total_cost_usd: total,
    call_cost_usd: call.callCostUsd,
  });
  return { status, reason, reportedCostUsd: call.callCostUsd, computedCostUsd: call.callComputedCostUsd };
}

/** The session asked a question: it waits for an answer (the manifest's scripted one, or a person's), or ends after too many. */
async function askQuestion(pass: SessionPass, s: Session, task: SessionTask, r: Extract<SessionResult, { status: "question" }>): Promise<void> {
  const cycle = s.questions.length + 1;
  s.questions.push({ cycle, question: { untrusted: true, text: r.question }, summary: { untrusted: true, text: r.summary }, askedAt: pass.now().toISOString(), answer: null });
  if (cycle > MAX_QUESTIONS) {
    pass.event({ type: "harness.too_many_questions", session: s.id, questions: cycle });
    await endSession(pass.ledger, s, "too-many-questions", `question ${cycle} after ${MAX_QUESTIONS}: the session ends; a retry starts a new session`);
    pass.say(`session ${s.taskId}: too many questions (${cycle})`);
    return;
  }
  pass.event({ type: "harness.question", session: s.id, item: cycle - 1, cycle });
  s.state = "awaiting-answer";
  const scripted = task.answers?.[cycle - 1];
  if (scripted !== undefined) {
    s.questions.at(-1)!.answer = { source: "scripted", text: scripted, answeredAt: pass.now().toISOString() };
    s.state = "answered";
  }
  pass.say(`session ${s.taskId}: question ${cycle}${scripted !== undefined ? " (scripted answer)" : ", awaiting an answer"}`);
}

/** The session is done: its summary, then the task's test command on its worktree, if it has one. */
async function finishSession(pass: SessionPass, s: Session, task: SessionTask, r: SessionResult): Promise<void> {
  const { ledger } = pass;
  s.summary = { untrusted: true, text: r.summary };
  if (task.testCommand) {
    s.test = await runTestCommand(pass.sandbox, {
      image: pass.config.image,
      worktree: sessionPaths(ledger.storageDir, s.id).worktree,
      command: task.testCommand,
      runtime: ledger.runtime,
      labels: runnerLabels(ledger.runId, `session-${s.id}-test`),
    });
    pass.event({ type: "harness.test", session: s.id, exit_code: s.test.exitCode });
  }
  await endSession(ledger, s, "done", null);
  pass.say(`session ${s.taskId}: done${s.test ? `, tests exit ${s.test.exitCode}` : ""}`);
}

/**
 * With the gateway, the spend it metered for one call and the growth of the CLI's cumulative
 * total_cost_usd are two measurements of the same call: any difference, to the pico-USD, means one
 * of them did not see the call as it was (contract R112, R202). Null when they agree or one is missing.
 */
export function meteredCostProblem(call: Pick<SessionCall, "meteredCostUsd" | "callCostUsd">): string | null {
  if (call.meteredCostUsd === null || call.meteredCostUsd === undefined || call.callCostUsd === null) return null;
  if (pico(call.meteredCostUsd) === pico(call.callCostUsd)) return null;
  return `the gateway metered ${call.meteredCostUsd} USD for this call but total_cost_usd grew by ${call.callCostUsd} USD`;
}

/** Why a call's result does not name its session (contract R126), or null when it does or there is no result. */
export function sessionIdProblem(resultSeen: boolean, reported: string | null, sessionId: string): string | null {
  if (!resultSeen || reported === sessionId) return null;
  return reported === null ? `the result has no session_id; the session's is ${sessionId}` : `the result's session_id ${reported} is not the session's ${sessionId}`;
}

function readResult(line: string, out: ResultEvent): void {
  if (!line.includes('"result"')) return;
  const event = jsonObjectLine(line);
  if (event?.type !== "result") return;
  out.structuredOutput = event.structured_output;
  out.resultText = typeof event.result === "string" ? event.result : null;
  out.sessionId = typeof event.session_id === "string" ? event.session_id : null;
  out.durationMs = typeof event.duration_ms === "number" && Number.isInteger(event.duration_ms) && event.duration_ms >= 0 ? event.duration_ms : null;
}
