import { join } from "node:path";
import type { LoadedManifest } from "../manifest/load.ts";
import type { Mode, PlannedAttempt } from "../plan/plan.ts";
import type { ContainerRuntime } from "../runtime/port.ts";
import { reapOrphans, runnerLabels } from "../runtime/reaper.ts";
import { probeVersion } from "../image/build.ts";
import { IMAGE_LABELS } from "../image/specs.ts";
import { exportAtPin, reapOrphanExports, removeExport, removeTree } from "../export/export.ts";
import { exportSourceFor } from "../export/options.ts";
import { acquireLoginLock, inspectLogin, resolveLogin, stageLogin, writeBackLogin, type LoginLocation, type LoginLock } from "../attempt/login.ts";
import { attemptContainerSpec } from "../attempt/spec.ts";
import { checkModelApiSocket } from "../attempt/model-api.ts";
import { startEgressProxy, type EgressProxy, type EgressProxyOptions } from "../isolation/proxy.ts";
import { DEFAULT_EGRESS_ALLOW, type Resolve } from "../isolation/policy.ts";
import { networkFor, type IsolationProfile } from "../isolation/profile.ts";
import { runBounded, type RawOutcome } from "../attempt/run.ts";
import { buildPrompt, cliArguments, denyList, expectedInitTools, EMPTY_MCP_CONFIG } from "../claude/args.ts";
import { TranscriptReader } from "../transcript/reader.ts";
import { classifyAttempt } from "../transcript/classify.ts";
import { computeCost } from "../cost/compute.ts";
import { CLI_PRICES } from "../cost/prices.ts";
import { initialBudget, reserve, settle, type BudgetState } from "../budget/budget.ts";
import { createLedger, writeLedger, type LedgerHandle } from "../ledger/store.ts";
import type { Ledger, Observation } from "../ledger/schema.ts";
import { commonHeader, newRunId } from "./header.ts";
import { preflightDocBridge } from "../mcp/preflight.ts";
import { compareMcpRecord, containerMcpConfig, startMcpBridge, type McpBridge } from "../mcp/bridge.ts";
import { RefusalError, ExitCode, errorMessage } from "../util/errors.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { makeRunnerFolder, reapOrphanFolders } from "../util/orphans.ts";
import { factsToObservation, reservedObservation } from "./observation.ts";
import { Progress } from "./progress.ts";

export interface StudyConfig {
  loaded: LoadedManifest;
  mode: Mode;
  plan: PlannedAttempt[];
  /** Attempts of the full study, for the pilot's extrapolation. */
  fullPlanSize: number;
  roots: ReadonlyMap<string, string>;
  model: string;
  capUsd: number;
  attemptBudgetUsd: number;
  output: string;
  image: string;
  expectedCliVersion: string;
  /**
   * Network of attempt containers (issue 9, docs/isolation.md): standard = the engine's default
   * bridge; strict = no network but loopback, out only through the runner's CONNECT proxy to
   * allowlisted hosts on port 443; offline = no way out at all.
   */
  isolation: IsolationProfile;
  /** Strict only: the proxy's allowlist (default DEFAULT_EGRESS_ALLOW) and, for tests, its resolver and bounds. */
  egress?: { allow?: readonly string[]; resolve?: Resolve; limits?: EgressProxyOptions["limits"] };
  /** OCI runtime of attempt containers (e.g. runsc); the run refuses to start when the engine lacks it. */
  runtime?: string;
  /** The doc-bridge engine command (never a shell string); run with a checkout as cwd. */
  docBridgeCommand: string[];
  /** Overrides where the CLI login is read from (the folder holding .credentials.json). */
  claudeConfigDir?: string;
  loginLockTimeoutMs?: number;
  /** Tests: after how long a dead run's login lock is taken over (acquireLoginLock's default otherwise). */
  loginLockStaleMs?: number;
  /** Tests: the attempt container's memory limit (attemptContainerSpec's default otherwise). */
  memoryBytes?: number;
  /**
   * Conformance tests and the demo: the Messages API listens on this unix socket on the host
   * (e.g. the scripted API); attempts reach it through the in-container relay, network none.
   */
  modelApi?: { socketPath: string };
  /** Test/CI only: the fake claude image's behaviour file and records folder. */
  fake?: { behaviourFile?: string; recordsDir?: string };
  timeoutMs?: number;
  stdoutLimitBytes?: number;
  quiet?: boolean;
}

export interface StudyDeps {
  runtime: ContainerRuntime;
  stdout: (text: string) => void;
  stderr: NodeJS.WritableStream;
  /** Aborted on SIGINT/SIGTERM: the current container is stopped and the run ends blocked. */
  signal?: AbortSignal;
  /** Sees every stdout line of every attempt (tests read the init event with it). */
  onTranscriptLine?: (attempt: PlannedAttempt, line: string) => void;
}

export interface StudySummary {
  status: Ledger["status"];
  statusReason: string | null;
  mode: Mode;
  transport: Ledger["transport"];
  model: string;
  ledger: string;
  attempts: { planned: number; run: number; byStatus: Record<string, number> };
  usage: { inputTokens: number; outputTokens: number; cacheCreationInputTokens: number; cacheReadInputTokens: number; toolCalls: number };
  usageComplete: boolean;
  spentUsd: number;
  capUsd: number;
  cumulativeCapExceeded: boolean;
  extrapolatedFullRunUsd: number | null;
  extrapolationNote: string;
  networkCalls?: never;
}

const egressAllowOf = (config: StudyConfig): readonly string[] => config.egress?.allow ?? DEFAULT_EGRESS_ALLOW;

/** Preflight: everything that must hold before anything is reserved. Throws RefusalError. */
async function preflight(config: StudyConfig, deps: StudyDeps, runId: string) {
  const { runtime } = deps;
  let engine;
  try {
    engine = await runtime.ping();
  } catch (err) {
    throw new RefusalError(`the Docker engine is not reachable (${errorMessage(err)}); start it or set DOCKER_HOST`);
  }
  if (config.runtime !== undefined && !engine.runtimes.includes(config.runtime)) {
    throw new RefusalError(
      `the Docker engine has no OCI runtime '${config.runtime}' (--runtime); it offers ${engine.runtimes.join(", ") || "none"}; install and register it, or drop --runtime; nothing was charged`,
    );
  }
  if (config.isolation === "strict") {
    // The proxy's socket is shared with the container user only (src/isolation/proxy.ts): check
    // it here, not in the first attempt after its reservation.
    const uid = process.getuid?.();
    if (uid !== 0 && uid !== 1000) throw new RefusalError(`--isolation strict needs the runner to run as root or as uid 1000 (the container user) to share the proxy socket; it runs as uid ${uid}`);
    if (egressAllowOf(config).length === 0) throw new RefusalError("--isolation strict with an empty allowlist; give --egress-allow or use --isolation offline");
  }
  await reapOrphans(runtime);
  // A runner killed outright leaves its exports, attempt HOMEs (with a copy of the login) and
  // doc-bridge and egress socket folders behind; remove those whose runner is gone.
  await reapOrphanExports();
  await reapOrphanFolders("home", removeTree);
  await reapOrphanFolders("mcp", removeTree);
  await reapOrphanFolders("egress", removeTree);
  if (config.modelApi) await checkModelApiSocket(config.modelApi.socketPath);
  const probed = await probeVersion(runtime, config.image, { labels: runnerLabels(runId, "probe") });
  if (probed.version !== config.expectedCliVersion) {
    throw new RefusalError(
      `image ${config.image} reports claude ${probed.version}, but ${config.expectedCliVersion} is expected (--cli-version); nothing was charged`,
    );
  }
  const login = resolveLogin({ configDir: config.claudeConfigDir });
  const facts = await inspectLogin(login);
  if (facts.problems.length) throw new RefusalError(facts.problems.join("\n"), facts.problems);

  let docBridge: { denyList: string[]; engineRevision: string | null } | null = null;
  if (config.plan.some((a) => a.arm === "mcp")) {
    const checkouts = [...new Set(config.plan.map((a) => a.repository))].map((repository) => ({
      repository,
      dir: config.roots.get(repository)!,
      pin: config.loaded.manifest.repositories[repository]!,
    }));
    const result = await preflightDocBridge({ command: config.docBridgeCommand, checkouts, loaded: config.loaded });
    docBridge = { denyList: denyList(result.tools), engineRevision: result.checkouts[0]?.engineRevision ?? null };
  }
  // The fake claude image answers without any model: like a scripted API, a test endpoint.
  const fakeImage = (await runtime.inspectImage(config.image))?.labels[IMAGE_LABELS.kind] === "fake-claude";
  return { probed, login, docBridge, modelApi: config.modelApi || fakeImage ? ("test" as const) : ("anthropic" as const) };
}

export async function runStudy(config: StudyConfig, deps: StudyDeps): Promise<number> {
  const runId = newRunId();
  const { probed, login, docBridge, modelApi } = await preflight(config, deps, runId);
  const progress = new Progress(deps.stderr, config.plan.length, config.capUsd, config.quiet ?? false);

  let budget: BudgetState = initialBudget(config.capUsd);
  const ledger: Ledger = {
    ...(await commonHeader(runId, config.loaded, config.roots)),
    docBridge: docBridge ? { engineRevision: docBridge.engineRevision, bundleHash: null, denyList: docBridge.denyList } : null,
    image: { ref: config.image, id: probed.imageId, binarySha256: probed.binarySha256 },
    cliVersion: probed.version,
    expectedCliVersion: config.expectedCliVersion,
    transport: "cli",
    isolation: config.isolation,
    modelApi,
    runtime: config.runtime ?? null,
    ...(config.isolation === "strict" ? { egressAllow: [...egressAllowOf(config)] } : {}),
    model: config.model,
    prices: pricesForLedger(),
    mode: config.mode,
    budget: { capUsd: config.capUsd, attemptBudgetUsd: config.attemptBudgetUsd, reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false },
    adjudication: { method: "agent", humanReview: false },
    status: "running",
    observations: [],
  };
  const handle = await createLedger(config.output, ledger, { checkouts: [...config.roots.values()], projectRoot: PROJECT_ROOT });
  const syncBudget = (capExceeded = ledger.budget.cumulativeCapExceeded) => {
    ledger.budget = {
      ...ledger.budget,
      reservedUsd: budget.reservedUsd,
      spentUsd: budget.spentUsd + budget.reservedUsd,
      cumulativeCapExceeded: capExceeded,
    };
  };

  for (const attempt of config.plan) {
    if (deps.signal?.aborted) {
      ledger.status = "blocked";
      ledger.statusReason = `interrupted by ${String(deps.signal.reason ?? "a signal")} before attempt ${attempt.index + 1}`;
      break;
    }
    // The login lock comes before the reservation: a run that never gets the login (another run
    // holds it past the timeout, or a signal ends the wait) has started and spent nothing for
    // this attempt. The lock is held until the attempt's login has been written back.
    let lock: LoginLock;
    try {
      lock = await acquireLoginLock(login, {
        timeoutMs: config.loginLockTimeoutMs ?? 10 * 60_000,
        staleMs: config.loginLockStaleMs,
        holder: runId,
        signal: deps.signal,
        // Not silent: a dead run's lock is only taken over once it is stale (30 s).
        onWait: (holder) => progress.note(`waiting for the CLI login (${holder})`),
      });
    } catch (err) {
      if (!(err instanceof RefusalError)) throw err;
      ledger.status = "blocked";
      ledger.statusReason = `attempt ${attempt.index + 1} not started, nothing reserved: ${errorMessage(err)}`;
      break;
    }
    try {
      const reserved = reserve(budget, config.attemptBudgetUsd);
      if (!reserved.ok) {
        ledger.status = "blocked";
        ledger.statusReason = `attempt ${attempt.index + 1} refused: ${reserved.reason}`;
        break;
      }
      budget = reserved.state;
      const obs = reservedObservation(attempt, {
        transport: "cli",
        cliVersion: probed.version,
        expectedCliVersion: config.expectedCliVersion,
        attemptBudgetUsd: config.attemptBudgetUsd,
        reservationUsd: reserved.reservation.reservedUsd,
      });
      ledger.observations.push(obs);
      syncBudget();
      testKillPoint("before-reserve-write");
      await writeLedger(handle, ledger); // before anything is spent
      testKillPoint("after-reserve-write");
      progress.start(attempt);

      const outcome = await runAttempt(config, deps, { runId, attempt, obs, login, denied: docBridge?.denyList ?? [], maxBudgetUsd: reserved.reservation.reservedUsd, handle, ledger, progress, lock })
        .catch(async (err: unknown) => {
          // The runner's own fault (the engine gone, a full disk): the
          // outcome is unknown, so the attempt stays unsettled with its reservation counted as spent,
          // and the run ends blocked saying why. If even this write fails, the ledger on disk is the
          // previous atomic write (status running, the same reservation open): never an under-count.
          ledger.status = "blocked";
          ledger.statusReason = `attempt ${attempt.index + 1} stopped by a fault of the runner: ${errorMessage(err)}; the attempt was not settled and its reservation stays charged`;
          await writeLedger(handle, ledger).catch(() => undefined);
          throw err;
        })
        .finally(() => progress.stopLive());

      const settled = settle(budget, reserved.reservation, {
        status: outcome.status,
        reportedCostUsd: obs.cliReportedCostUsd,
        computedCostUsd: obs.computedCostUsd,
      });
      budget = settled.state;
      Object.assign(obs, { phase: "settled", status: settled.status, chargedUsd: settled.chargedUsd });
      syncBudget(ledger.budget.cumulativeCapExceeded || settled.cumulativeCapExceeded);
      if (settled.status !== "completed") {
        ledger.status = "blocked";
        ledger.statusReason = `attempt ${attempt.index + 1} (${attempt.taskId}, ${attempt.scenario}, repetition ${attempt.repetition}) ended ${settled.status}: ${outcome.reason}`;
      } else if (settled.cumulativeCapExceeded) {
        ledger.status = "blocked";
        ledger.statusReason = `the cumulative cap of ${config.capUsd} USD was passed after attempt ${attempt.index + 1}`;
      }
      testKillPoint("after-attempt-before-write");
      await writeLedger(handle, ledger); // after the outcome is known
      progress.end(attempt, obs, ledger.budget.spentUsd);
    } finally {
      await lock.release();
    }
    if (ledger.status === "blocked") break;
  }
  // Every way out of the loop ends with a write: a run blocked before an attempt started (the cap,
  // the login, a signal) must say so on disk too, not only in the summary.
  if (ledger.status === "running") ledger.status = "awaiting-adjudication";
  await writeLedger(handle, ledger);

  deps.stdout(JSON.stringify(summarize(config, ledger, handle), null, 2) + "\n");
  if (ledger.status === "awaiting-adjudication") return ExitCode.ok;
  if (deps.signal?.aborted) return deps.signal.reason === "SIGTERM" ? ExitCode.sigterm : ExitCode.sigint;
  return ExitCode.blocked;
}

/**
 * TEST-ONLY (issue 10, docs/reliability.md): with STUDY_RUNNER_TEST_KILL_AT=<point> in its
 * environment, the runner kills itself with SIGKILL at that point, so a test can stop it at an
 * exact place between ledger writes and check what a crash there leaves. Points, in run order:
 * before-reserve-write, after-reserve-write, before-container-start, during-attempt (the first
 * stdout line of the running container), after-attempt-before-write. Read here only.
 */
function testKillPoint(point: string): void {
  if (process.env.STUDY_RUNNER_TEST_KILL_AT === point) process.kill(process.pid, "SIGKILL");
}

interface AttemptContext {
  /** The login lock, held by the caller for the whole attempt. */
  lock: LoginLock;
  progress: Progress;
  runId: string;
  attempt: PlannedAttempt;
  obs: Observation;
  login: LoginLocation;
  denied: string[];
  maxBudgetUsd: number;
  handle: LedgerHandle;
  ledger: Ledger;
}

/**
 * One attempt: export, login copy under the lock, the doc-bridge bridge in the MCP arm,
 * the container, the transcript, the cost. Fills `obs`; returns the classification. Every
 * resource is released whatever happens; a fault of the runner itself propagates.
 */
async function runAttempt(config: StudyConfig, deps: StudyDeps, ctx: AttemptContext): Promise<{ status: Observation["status"] & string; reason: string }> {
  const { attempt, obs } = ctx;
  const task = config.loaded.manifest.tasks[attempt.taskIndex]!;
  const repoDir = config.roots.get(attempt.repository)!;
  const attemptLabel = String(attempt.index);
  const cleanups: Array<() => Promise<unknown>> = [];
  let bridge: McpBridge | undefined;
  let egress: EgressProxy | undefined;
  try {
    const exported = await exportAtPin({ ...(await exportSourceFor(config.loaded, attempt.repository, repoDir)), labels: { run: ctx.runId, attempt: attemptLabel } });
    cleanups.push(() => removeExport(exported.dir));
    obs.exportHash = exported.exportHash;

    const homeParent = await makeRunnerFolder("home");
    cleanups.push(() => removeTree(homeParent));
    const staged = await stageLogin(ctx.login, join(homeParent, "home"));

    if (attempt.arm === "mcp") {
      const mcpParent = await makeRunnerFolder("mcp");
      cleanups.push(() => removeTree(mcpParent));
      bridge = await startMcpBridge({ command: config.docBridgeCommand, cwd: repoDir, socketDir: join(mcpParent, "socket") });
      const b = bridge;
      cleanups.push(() => b.stop());
    }
    if (config.isolation === "strict") {
      const egressParent = await makeRunnerFolder("egress");
      cleanups.push(() => removeTree(egressParent));
      egress = await startEgressProxy({ allow: egressAllowOf(config), resolve: config.egress?.resolve, limits: config.egress?.limits, socketDir: join(egressParent, "socket") });
      const e = egress;
      cleanups.push(() => e.stop());
    }
    const argv = cliArguments({
      arm: attempt.arm,
      model: config.model,
      maxBudgetUsd: ctx.maxBudgetUsd,
      prompt: buildPrompt(task),
      deniedMcpTools: ctx.denied,
      mcpConfig: attempt.arm === "mcp" ? containerMcpConfig() : EMPTY_MCP_CONFIG,
    });
    const spec = attemptContainerSpec({
      image: config.image,
      argv,
      exportDir: exported.dir,
      homeDir: staged.homeDir,
      mcpSocketDir: bridge?.socketDir,
      network: config.modelApi ? { mode: "none" } : networkFor(config.isolation),
      modelApiSocket: config.modelApi?.socketPath,
      egressProxySocket: egress?.socketPath,
      runtime: config.runtime,
      labels: runnerLabels(ctx.runId, attemptLabel),
      attemptIndex: attempt.index,
      fake: config.fake,
      memoryBytes: config.memoryBytes,
    });

    const reader = new TranscriptReader({ arm: attempt.arm, model: config.model, expectedTools: expectedInitTools(attempt.arm), cliVersion: config.expectedCliVersion });
    obs.phase = "running";
    obs.startedAt = new Date().toISOString();
    await writeLedger(ctx.handle, ctx.ledger); // the child may spend from here on
    testKillPoint("before-container-start");
    let raw: RawOutcome;
    raw = await runBounded(deps.runtime, spec, (line) => {
      testKillPoint("during-attempt");
      reader.pushLine(line);
      deps.onTranscriptLine?.(attempt, line);
    }, {
      timeoutMs: config.timeoutMs,
      stdoutLimitBytes: config.stdoutLimitBytes,
      signal: deps.signal,
    });
    Object.assign(obs, { containerId: raw.containerId, wallTimeMs: raw.wallTimeMs, exitCode: raw.exitCode, timedOut: raw.timedOut, truncated: raw.truncated, oomKilled: raw.oomKilled });

    const facts = reader.finish();
    // A refused request does not fail the attempt by itself (issue 9): it is recorded and reported.
    if (egress) obs.egress = await egress.stop();
    if (bridge) {
      const record = await bridge.stop();
      bridge = undefined;
      obs.mcp = { toolCalls: record.toolCalls, connections: record.connections, messages: record.messages };
      const mismatch = compareMcpRecord(record, facts.docBridgeCalls.map((c) => c.name));
      // The CLI lists the server's tools before its init event, so a "connected" server that
      // never connected through the runner is a treatment that did not come from the runner.
      if (record.connections === 0) mismatch.unshift("the CLI never connected to the doc-bridge server through the runner");
      facts.setupProblems.push(...mismatch.map((m) => `doc-bridge record: ${m}`));
    }
    await writeBackLogin(ctx.login, staged, { lock: ctx.lock });

    const cost = computeCost({ ...facts, model: config.model });
    Object.assign(obs, factsToObservation(facts, cost));
    if (deps.signal?.aborted) {
      const reason = `interrupted by ${String(deps.signal.reason ?? "a signal")}`;
      return { status: "failed", reason };
    }
    // A kill after the result event and its grace period is the runner's doing, not a CLI failure.
    const exitCode = raw.killedAfterResult ? 0 : raw.exitCode;
    const verdict = classifyAttempt({ facts, exitCode, timedOut: raw.timedOut, truncated: raw.truncated, cost });
    if (verdict.status === "invalid-setup" && obs.setupProblems.length === 0) obs.setupProblems = [verdict.reason];
    if (verdict.status === "invalid-cost" && obs.costProblem === null) obs.costProblem = verdict.reason;
    if (verdict.status !== "completed" && raw.oomKilled) return { status: verdict.status, reason: `${verdict.reason} (the container was killed by its memory limit)` };
    return verdict;
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  }
}

function pricesForLedger(): Ledger["prices"] {
  return JSON.parse(JSON.stringify(CLI_PRICES)) as Ledger["prices"];
}

export function summarize(config: Pick<StudyConfig, "mode" | "plan" | "fullPlanSize" | "model" | "capUsd">, ledger: Ledger, handle: { path: string }): StudySummary {
  const byStatus: Record<string, number> = {};
  const usage = { inputTokens: 0, outputTokens: 0, cacheCreationInputTokens: 0, cacheReadInputTokens: 0, toolCalls: 0 };
  let usageComplete = ledger.observations.length > 0;
  for (const o of ledger.observations) {
    const key = o.status ?? "unsettled";
    byStatus[key] = (byStatus[key] ?? 0) + 1;
    usage.inputTokens += o.inputTokens ?? 0;
    usage.outputTokens += o.outputTokens ?? 0;
    usage.cacheCreationInputTokens += o.cacheCreationInputTokens ?? 0;
    usage.cacheReadInputTokens += o.cacheReadInputTokens ?? 0;
    usage.toolCalls += o.toolCalls;
    if (!o.usageComplete) usageComplete = false;
  }
  const pilotDone = config.mode === "pilot" && ledger.status === "awaiting-adjudication" && usageComplete;
  const factor = config.fullPlanSize / config.plan.length;
  return {
    status: ledger.status,
    statusReason: ledger.statusReason ?? null,
    mode: config.mode,
    transport: ledger.transport,
    model: config.model,
    ledger: handle.path,
    attempts: { planned: config.plan.length, run: ledger.observations.length, byStatus },
    usage,
    usageComplete,
    spentUsd: ledger.budget.spentUsd,
    capUsd: config.capUsd,
    cumulativeCapExceeded: ledger.budget.cumulativeCapExceeded,
    extrapolatedFullRunUsd: pilotDone ? Number((ledger.budget.spentUsd * factor).toFixed(6)) : null,
    extrapolationNote: pilotDone
      ? `pilot spend x ${factor} (${config.fullPlanSize} full-run attempts / ${config.plan.length} pilot attempts); not an upper bound: other tasks may cost more`
      : "no extrapolation: only a pilot that completed with complete usage is extrapolated",
  };
}
