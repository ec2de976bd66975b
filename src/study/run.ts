import type { PlannedAttempt } from "../plan/plan.ts";
import { attemptInitKind, expectedInit } from "../claude/init-expectation.ts";
import { reapOrphans } from "../sandbox/reaper.ts";
import { isFakeClaudeImage } from "../image/build.ts";
import { reapOrphanExports, removeExport, removeTree, RunExports, type ExportOptions, type ExportResult } from "../export/export.ts";
import { Ahead } from "../util/ahead.ts";
import { engineSandboxFor } from "../mcp/bridge.ts";
import { RepositoryKeys } from "../mcp/index-store.ts";
import { mark } from "../util/marks.ts";
import type { EngineSandbox } from "../mcp/engine-sandbox.ts";
import type { LoginLocation, LoginLock } from "../credentials/login.ts";
import { lockUnitLogin, usableLogin } from "../credentials/unit-login.ts";
import { assertModelApiSocket } from "../transport/cli/model-api.ts";
import { probeCliImage, reachEngine, sandboxHeader } from "../transport/cli/preflight.ts";
import { dockerSandbox, type SandboxChannel } from "../sandbox/docker-sandbox.ts";
import { DEFAULT_ATTEMPT_CPUS } from "../transport/cli/spec.ts";
import { checkEgressRunner } from "../isolation/proxy.ts";
import { exportSourceFor } from "../export/options.ts";
import { DEFAULT_EGRESS_ALLOW } from "../isolation/policy.ts";
import { networkFor, type IsolationProfile } from "../isolation/profile.ts";
import { buildPrompt, cliArguments, denyList, EMPTY_MCP_CONFIG } from "../claude/args.ts";
import { cliPrices } from "../cost/prices.ts";
import { activeProfile } from "../profile/load.ts";
import { createLedger, writeLedger } from "../ledger/store.ts";
import { SettledAnchors } from "../ledger/evidence.ts";
import { TranscriptStore } from "../ledger/transcripts.ts";
import type { Ledger, Observation } from "../ledger/schema.ts";
import { commonHeader, newRunId, type StudyRunBase } from "./header.ts";
import { preflightDocBridge } from "../mcp/preflight.ts";
import { engineProvenance } from "../mcp/bundle-hash.ts";
import { containerMcpConfig } from "../mcp/bridge.ts";
import { RefusalError } from "../util/errors.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { reapOrphanFolders } from "../util/orphans.ts";
import { cliRunInput, runCliInContainer, type CliRunDeps, type CliRunInput } from "../transport/cli/run.ts";
import { observationExtras, reservedObservation } from "./observation.ts";
import { concurrencyProblem, rateLimitWatch, runAttempts, sharedHold, type AttemptKind } from "./attempts.ts";
import { Progress } from "./progress.ts";
import type { TestHooks } from "../transport/test-hooks.ts";
import { summarize } from "./summary.ts";
import { gatewayForRun, gatewayUnits, type GatewayRunOptions } from "../gateway/run.ts";

export interface StudyConfig extends StudyRunBase, GatewayRunOptions {
  attemptBudgetUsd: number;
  output: string;
  image: string;
  expectedCliVersion: string;
  /**
   * Network of attempt containers (contract R71, docs/isolation.md): standard = the engine's default
   * bridge; strict = no network but loopback, out only through the runner's CONNECT proxy to
   * allowlisted hosts on port 443; offline = no way out at all.
   */
  isolation: IsolationProfile;
  /** Strict only: the proxy's allowlist (default DEFAULT_EGRESS_ALLOW); its resolver and bounds are test hooks. */
  egress?: { allow?: readonly string[] };
  /** OCI runtime of attempt containers (e.g. runsc); the run refuses to start when the engine lacks it. */
  runtime?: string;
  /** How attempt containers get their files and reach the runner's sockets; the preflight's probe decides when absent (contract R244). */
  sandboxChannel?: SandboxChannel;
  /** Overrides where the CLI login is read from (the folder holding .credentials.json). */
  claudeConfigDir?: string;
  /** CPUs per attempt container (--cpus; DEFAULT_ATTEMPT_CPUS otherwise), recorded in the ledger. */
  cpus?: number;
  /** Tests: the size of the attempt's tmpfs HOME (DEFAULT_HOME_BYTES otherwise). */
  homeBytes?: number;
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
  /** Set by tests only, never by src/cli or src/demo. */
  testHooks?: TestHooks;
  /** How many attempts may run at once (--concurrency, default 1); see concurrencyProblem. */
  concurrency?: number;
}

export interface StudyDeps extends CliRunDeps {
  stdout: (text: string) => void;
  stderr: NodeJS.WritableStream;
  /** Sees every stdout line of every attempt (tests read the init event with it). */
  onTranscriptLine?: (attempt: PlannedAttempt, line: string) => void;
}

const egressAllowOf = (config: StudyConfig): readonly string[] => config.egress?.allow ?? DEFAULT_EGRESS_ALLOW;

/** Preflight: everything that must hold before anything is reserved. Throws RefusalError. */
async function preflight(config: StudyConfig, deps: StudyDeps, runId: string) {
  const { runtime } = deps;
  const engine = await reachEngine(runtime, config.runtime);
  if (config.isolation === "strict") {
    // The proxy's socket is shared with the container user only (src/isolation/proxy.ts): check
    // it here, not in the first attempt after its reservation.
    const runnerProblem = checkEgressRunner();
    if (runnerProblem) throw new RefusalError(runnerProblem);
    if (egressAllowOf(config).length === 0) throw new RefusalError("--isolation strict with an empty allowlist; give --egress-allow or use --isolation offline");
  }
  await reapOrphans(runtime);
  // A runner killed outright leaves its exports, attempt HOMEs (with a copy of the login) and
  // doc-bridge and egress socket folders behind; remove those whose runner is gone.
  await reapOrphanExports();
  await reapOrphanFolders("home", removeTree);
  await reapOrphanFolders("mcp", removeTree);
  await reapOrphanFolders("egress", removeTree);
  await reapOrphanFolders("gateway", removeTree);
  if (config.modelApi) await assertModelApiSocket(config.modelApi.socketPath);
  const { probed, ociRuntime, channel } = await probeCliImage(runtime, engine, {
    image: config.image,
    expectedCliVersion: config.expectedCliVersion,
    runtimeName: config.runtime,
    runId,
    route: { isolation: config.isolation, gateway: config.credentials === "gateway", modelApiSocket: config.modelApi !== undefined, docBridge: config.plan.some((a) => a.arm === "mcp") },
    ...(config.sandboxChannel !== undefined ? { channel: config.sandboxChannel } : {}),
  });
  const login = await usableLogin(config.claudeConfigDir);

  let docBridge: Ledger["docBridge"] = null;
  if (config.plan.some((a) => a.arm === "mcp")) {
    const checkouts = [...new Set(config.plan.map((a) => a.repository))].map((repository) => ({
      repository,
      dir: config.roots.get(repository)!,
      pin: config.loaded.manifest.repositories[repository]!,
    }));
    const result = await preflightDocBridge({ command: config.docBridgeCommand, checkouts, loaded: config.loaded });
    docBridge = { ...(await engineProvenance(config.docBridgeCommand, result.checkouts)), denyList: denyList(result.tools) };
  }
  // The fake claude image answers without any model: like a scripted API, a test endpoint.
  const fakeImage = await isFakeClaudeImage(runtime, probed.imageId);
  const gateway = await gatewayForRun(config, {
    model: config.model,
    login,
    holder: runId,
    limit: { usd: config.attemptBudgetUsd, flag: "--attempt-budget-usd" },
    fakeImage,
  });
  const testApi = config.modelApi || fakeImage || config.gatewayUpstream !== undefined;
  // Every attempt's sandbox on the channel the preflight chose (contract R244).
  const unitSandbox = dockerSandbox(runtime, channel);
  return { probed, login, docBridge, fakeImage, gateway, ociRuntime, modelApi: testApi ? ("test" as const) : ("anthropic" as const), sandbox: sandboxHeader(engine, channel), unitSandbox };
}

export async function runStudy(config: StudyConfig, deps: StudyDeps): Promise<number> {
  const runId = newRunId();
  const { probed, login, docBridge, modelApi, gateway, fakeImage, ociRuntime, sandbox, unitSandbox } = await preflight(config, deps, runId);
  const concurrency = config.concurrency ?? 1;
  const refused = concurrencyProblem({ concurrency, credentials: gateway ? "gateway" : "login-copy", modelApi });
  if (refused) throw new RefusalError(refused);
  const progress = new Progress(deps.stderr, config.plan.length, config.capUsd, config.quiet ?? false);

  const ledger: Ledger = {
    ...(await commonHeader(runId, config.loaded, config.roots, "cli")),
    docBridge,
    image: { ref: config.image, id: probed.imageId, binarySha256: probed.binarySha256 },
    cliVersion: probed.version,
    expectedCliVersion: config.expectedCliVersion,
    profileSha256: activeProfile().sha256,
    transport: "cli",
    isolation: config.isolation,
    attemptCpus: config.cpus ?? DEFAULT_ATTEMPT_CPUS,
    modelApi,
    runtime: ociRuntime,
    sandbox,
    ...(config.isolation === "strict" && !gateway ? { egressAllow: [...egressAllowOf(config)] } : {}),
    credentials: gateway ? "gateway" : "login-copy",
    model: config.model,
    prices: pricesForLedger(),
    mode: config.mode,
    budget: { capUsd: config.capUsd, attemptBudgetUsd: config.attemptBudgetUsd, reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false },
    adjudication: { method: "agent", humanReview: false },
    status: "running",
    observations: [],
  };
  const handle = await createLedger(config.output, ledger, { checkouts: [...config.roots.values()], projectRoot: PROJECT_ROOT });
  // Each settled state's evidence digest, printed once its ledger is written (contract R177).
  const anchors = new SettledAnchors((line) => progress.settledNote(line));
  const persist = () => (
    mark("ledger:write"),
    writeLedger(handle, ledger).then(() => {
      mark("ledger:written");
      anchors.after(ledger);
    })
  );
  const transcripts = await TranscriptStore.create(handle.path);
  const { ahead, pinned } = runMaterials();

  const locks = new Map<PlannedAttempt, LoginLock>();
  const units = gateway && gatewayUnits<PlannedAttempt>(gateway, { compareUsage: !fakeImage, signal: deps.signal });
  const lockLogin = () => lockUnitLogin(login, { timeoutMs: config.loginLockTimeoutMs, staleMs: config.loginLockStaleMs, holder: runId, signal: deps.signal, note: (line) => progress.note(line) });
  // Attempts in flight at once share the run's one hold on the login (only test stand-ins, see concurrencyProblem).
  const takeLogin = sharedHold(lockLogin);
  const kind: AttemptKind = {
    limitUsd: config.attemptBudgetUsd,
    // The login lock comes before the reservation: a run that never gets the login (another run
    // holds it past the timeout, or a signal ends the wait) has reserved nothing for this attempt.
    // It is held until the attempt's login has been written back.
    async acquire(a) {
      // Read under the login lock and released at once: nothing is written back in this mode.
      if (units) return units.acquire(a);
      const lock = await takeLogin();
      locks.set(a, lock.lock);
      return { release: () => (locks.delete(a), lock.release()) };
    },
    open(a, reservationUsd) {
      const obs = reservedObservation(a, { transport: "cli", cliVersion: probed.version, expectedCliVersion: config.expectedCliVersion, attemptBudgetUsd: config.attemptBudgetUsd, reservationUsd });
      ledger.observations.push(obs);
      return obs;
    },
    async runOne(a, ctx) {
      const reservedUsd = ctx.reservation!.reservedUsd;
      // What this attempt may still spend under the run's cap: the loop's, from its own budget.
      const viaGateway = units?.input(a, reservedUsd, ctx.remainingUsd);
      const result = await runAttempt(
        config,
        { ...deps, sandbox: deps.sandbox ?? unitSandbox },
        {
          runId,
          attempt: a,
          login,
          lock: locks.get(a),
          gateway: viaGateway,
          denied: docBridge?.denyList ?? [],
          maxBudgetUsd: reservedUsd,
          transcripts,
          ahead,
          pinned,
          ociRuntime,
          imageId: probed.imageId,
          onLine: rateLimitWatch(ctx),
        },
        ctx.entry,
        ctx.persist,
      );
      return { status: result.status, reason: result.reason, reportedCostUsd: ctx.entry.cliReportedCostUsd, computedCostUsd: ctx.entry.computedCostUsd };
    },
  };
  const end = await runAttempts({ kind, plan: config.plan, ledger, capUsd: config.capUsd, persist: persist, progress, signal: deps.signal, checkpoint: deps.checkpoint, concurrency }).finally(() => {
    progress.flushSettled();
    // What the sandboxes made in the background or ahead is gone before the run ends (contract R257).
    return Promise.all([gateway?.close(), ahead.exports.close(), ahead.sandboxes.close(), (deps.sandbox ?? unitSandbox).settle()]);
  });
  deps.stdout(JSON.stringify({ ...summarize(config, ledger, handle), evidenceDigests: anchors.printed }, null, 2) + "\n");
  return end.exitCode;
}

interface AttemptContext {
  runId: string;
  attempt: PlannedAttempt;
  login: LoginLocation;
  /** Login-copy mode: the login lock, held by the loop for the whole attempt. */
  lock?: LoginLock;
  gateway?: CliRunInput["gateway"];
  denied: string[];
  maxBudgetUsd: number;
  transcripts: TranscriptStore;
  ahead: MadeAhead;
  pinned: PinnedReads;
  /** The OCI runtime of every attempt container (resolved in the preflight). */
  ociRuntime: string;
  /** The image id the preflight probed: every attempt container is created from it. */
  imageId: string;
  /** Sees every stdout line (rate limits slow new starts). */
  onLine?: (line: string) => void;
}

/**
 * What the run reads of each pin once, for all its attempts (a commit id names immutable content):
 * each repository's export plan, every attempt writing its own export from it (contract R284),
 * and the doc-bridge index key of each repository, which every engine sandbox copies by.
 */
interface PinnedReads {
  exports: RunExports;
  repositoryKeys: RepositoryKeys;
}

/** What the run's attempts share: made ahead, and read once per pin. */
function runMaterials(): { ahead: MadeAhead; pinned: PinnedReads } {
  return {
    ahead: { exports: new Ahead<ExportResult>((e) => removeExport(e.dir)), sandboxes: new Ahead<EngineSandbox>((s) => s.remove()) },
    pinned: { exports: new RunExports(), repositoryKeys: new RepositoryKeys() },
  };
}

/** What the next attempt needs from the host, made while the current attempt's container runs. */
interface MadeAhead {
  exports: Ahead<ExportResult>;
  sandboxes: Ahead<EngineSandbox>;
}

/** What the export of a planned attempt leaves out, and its labels. */
async function attemptExport(config: StudyConfig, runId: string, attempt: PlannedAttempt): Promise<ExportOptions> {
  return {
    ...(await exportSourceFor(config.loaded, attempt.repository, config.roots.get(attempt.repository)!)),
    ...(config.exportLimits ? { limits: config.exportLimits } : {}),
    labels: { run: runId, attempt: String(attempt.index) },
  };
}

/** One attempt of the study: its arguments and container, through the shared CLI stage. Fills `obs`. */
async function runAttempt(config: StudyConfig, deps: StudyDeps, ctx: AttemptContext, obs: Observation, persist: () => Promise<void>) {
  const { attempt } = ctx;
  const task = config.loaded.manifest.tasks[attempt.taskIndex]!;
  const argv = cliArguments({
    arm: attempt.arm,
    model: config.model,
    maxBudgetUsd: ctx.maxBudgetUsd,
    prompt: buildPrompt(task),
    deniedMcpTools: ctx.denied,
    mcpConfig: attempt.arm === "mcp" ? containerMcpConfig() : EMPTY_MCP_CONFIG,
  });
  const exportOptions = await attemptExport(config, ctx.runId, attempt);
  // Taken last: from here the stage owns (and removes) them, whatever happens.
  const key = String(attempt.index);
  const exported = ctx.ahead.exports.take(key, () => ctx.pinned.exports.exportAtPin(exportOptions));
  const engine = (a: PlannedAttempt) => ({ command: config.docBridgeCommand, cwd: config.roots.get(a.repository)! });
  // The engine's clone is checked out at the pin the attempt's export is written from (the preflight checked HEAD is it).
  const engineSandbox = (a: PlannedAttempt) => engineSandboxFor({ ...engine(a), pin: config.loaded.manifest.repositories[a.repository]!, keys: ctx.pinned.repositoryKeys });
  const sandbox = attempt.arm === "mcp" ? ctx.ahead.sandboxes.take(key, () => engineSandbox(attempt)) : undefined;
  // What the next attempt needs is made while this one's container runs; the next doc-bridge
  // attempt's engine (its sandbox, the engine started in it) too, even when a repository-only
  // attempt comes first, so that the engine's start has the longest time to overlap.
  const later = config.plan.slice(config.plan.indexOf(attempt) + 1);
  const next = later[0];
  const nextMcp = later.find((a) => a.arm === "mcp");
  const prepareNext = () => {
    if (next) ctx.ahead.exports.prepare(String(next.index), async () => ctx.pinned.exports.exportAtPin(await attemptExport(config, ctx.runId, next)));
    if (nextMcp) ctx.ahead.sandboxes.prepare(String(nextMcp.index), () => engineSandbox(nextMcp));
  };
  const result = await runCliInContainer(
    deps,
    cliRunInput(
      config,
      { run: ctx.runId, unit: String(attempt.index), attemptIndex: attempt.index, imageId: ctx.imageId, runtimeName: ctx.ociRuntime, last: later.length === 0 },
      {
        export: exportOptions,
        exported,
        onContainerStarted: prepareNext,
        login: ctx.login,
        lock: ctx.lock,
        gateway: ctx.gateway,
        argv,
        arm: attempt.arm,
        expectedInit: expectedInit(attemptInitKind(attempt.arm), { model: config.model }),
        network: config.modelApi ? { mode: "none" } : networkFor(config.isolation),
        // The CLI looks up no name: every endpoint is 127.0.0.1 or a socket (contract R281).
        noNames: true,
        docBridge: sandbox ? { ...engine(attempt), sandbox } : undefined,
        egress: config.isolation === "strict" ? { allow: egressAllowOf(config), resolve: config.testHooks?.egress?.resolve, limits: config.testHooks?.egress?.limits } : undefined,
        memoryBytes: config.memoryBytes,
        cpus: config.cpus,
        homeBytes: config.homeBytes,
        onLine: (line) => {
          ctx.onLine?.(line);
          deps.onTranscriptLine?.(attempt, line);
        },
        transcripts: { store: ctx.transcripts, index: attempt.index },
      },
    ),
    obs,
    persist,
  );
  Object.assign(obs, observationExtras(result.facts), { oomKilled: result.oomKilled });
  if (result.mcp) obs.mcp = { toolCalls: result.mcp.toolCalls, connections: result.mcp.connections, messages: result.mcp.messages };
  if (result.egress) obs.egress = result.egress;
  if (result.gateway) obs.gateway = result.gateway;
  return result;
}

function pricesForLedger(): Ledger["prices"] {
  return JSON.parse(JSON.stringify(cliPrices())) as Ledger["prices"];
}
