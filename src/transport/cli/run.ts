import type { ExpectedInit } from "../../claude/init-expectation.ts";
import { join } from "node:path";
import type { ContainerRuntime } from "../../sandbox/port.ts";
import type { Sandbox, SandboxSpec } from "../../sandbox/sandbox.ts";
import { dockerSandbox } from "../../sandbox/docker-sandbox.ts";
import { exportAtPin, removeExport, removeTree, type ExportOptions, type ExportResult, type RunExports } from "../../export/export.ts";
import { stageLogin, writeBackLogin, type LoginLocation, type LoginLock } from "../../credentials/login.ts";
import { attemptSandboxSpec, type AttemptContainerInput } from "./spec.ts";
import { withoutNames, type NetworkSetting } from "../../sandbox/port.ts";
import { runBounded, type RawOutcome } from "../../sandbox/bounded.ts";
import { startEgressProxy, type EgressProxy, type EgressProxyOptions } from "../../isolation/proxy.ts";
import { compareMcpRecord, startMcpBridge, type McpBridge, type McpBridgeRecord } from "../../mcp/bridge.ts";
import type { EngineSandbox } from "../../mcp/engine-sandbox.ts";
import type { Arm } from "../../terms/terms.ts";
import type { TranscriptFacts } from "../../transcript/reader.ts";
import type { AttemptStatus } from "../../terms/terms.ts";
import type { CostResult } from "../../cost/compute.ts";
import type { EgressRecord, RunFacts } from "../../ledger/schema.ts";
import { makeRunnerFolder, type FolderKind } from "../../util/orphans.ts";
import { serviceSocketDir } from "../../util/container-socket.ts";
import type { Checkpoint } from "../../loop/loop.ts";
import { gatewayBudgetRefusal, interpretRun, runReader } from "./interpret.ts";
import type { MessagePromptUsage } from "../../cost/compute.ts";
import type { TranscriptStore } from "../../ledger/transcripts.ts";
import { instructionFilesWithImports } from "../../corpus/imports.ts";
import { activeProfile } from "../../profile/load.ts";
import { openSessionChannel, SESSION_STREAM_LIMIT_BYTES, sessionChannelPaths, type SessionChannel, type SessionChannelReceipt } from "./session-channel.ts";
import { stagePlaceholderLogin } from "../../gateway/credential.ts";
import { compareMeteredUsage } from "../../gateway/check.ts";
import { gatewayCause } from "../../gateway/cause.ts";
import type { AttemptGateway, Gateway, GatewayRecord } from "../../gateway/gateway.ts";
import { mark } from "../../util/marks.ts";
import { runnerLabels } from "../../sandbox/reaper.ts";
import type { TestHooks } from "../test-hooks.ts";

/**
 * One run of the Claude Code CLI in a fresh hardened sandbox (a container on the Docker provider), from the export to a classified
 * outcome: the stage that the study's attempts and the adjudicator's items share. It fills the
 * shared part of the caller's record as it goes and returns the verdict; it never reserves or
 * settles (the loop does). Every resource it made is released whatever happens; a fault of the
 * runner itself propagates.
 */

export interface CliRunDeps {
  /** The engine the caller holds (image checks, the reaper); the attempt runs in `sandbox`. */
  runtime: ContainerRuntime;
  /** Where the attempt runs: the Docker provider over `runtime` when absent. */
  sandbox?: Sandbox;
  /** Makes a fresh runner-owned folder (named with the runner's pid, reaped after a crash). */
  makeFolder?: (kind: FolderKind) => Promise<string>;
  /** The current time, for `startedAt`. */
  now?: () => Date;
  checkpoint?: (point: Checkpoint) => void;
  /** Aborted on SIGINT/SIGTERM: the sandbox is stopped. */
  signal?: AbortSignal;
}

export interface CliRunInput {
  export: ExportOptions;
  /** The export of `export`, made ahead by the caller (src/util/ahead.ts); the stage removes it like its own. */
  exported?: Promise<ExportResult>;
  /** The run's export plans, when `exported` is not given: the export is written from its source's plan. */
  exports?: RunExports;
  /** Called once the container has started (the caller may prepare its next attempt meanwhile). */
  onContainerStarted?: () => void;
  login: LoginLocation;
  /** Login-copy mode: held by the caller for the whole run, the refreshed login is written back under it. */
  lock?: LoginLock;
  /**
   * The model gateway (docs/gateway.md): the container gets a placeholder login and reaches the
   * API only through this attempt's gateway socket, with network "none"; nothing is written back.
   */
  gateway?: {
    gateway: Gateway;
    /** The real credential for this attempt, swapped in by the gateway on the host. */
    credential: string;
    /** The attempt's reservation: the gateway refuses a request whose worst case would pass it. */
    limitUsd: number;
    runRemainingUsd?: () => number;
    /** Compare metered and transcript usage (false only for the fake image, which sends no request). */
    compareUsage: boolean;
    /**
     * A resumed session: the CLI's modelUsage covers the whole session while the gateway saw only
     * this call, so only the per-message usage is compared (the caller compares the call's cost).
     */
    cumulativeModelUsage?: boolean;
  };
  image: string;
  argv: readonly string[];
  /** Which arm's setup the transcript must show (the adjudicator runs as the repository arm). */
  arm: Arm;
  /** The init event's tools when they are not the arm's (the adjudicator adds StructuredOutput). */
  expectedTools?: readonly string[];
  /** The whole init event this run's arguments produce, measured on the pinned CLI (`expectedInit`). */
  expectedInit: ExpectedInit;
  model: string;
  expectedCliVersion: string;
  network: NetworkSetting;
  /**
   * The CLI looks up no name (a study attempt, the adjudicator: every endpoint is 127.0.0.1 or a
   * socket, and no command of the repository's runs): a network `none`, the gateway's included,
   * goes without names, so the engine sets up no network for it (contract R281).
   */
  noNames?: boolean;
  /**
   * The MCP arm: the doc-bridge engine command and its checkout, served through a per-attempt
   * bridge; `sandbox`, the engine's sandbox made ahead by the caller (the stage removes it like its own).
   */
  docBridge?: { command: string[]; cwd: string; sandbox?: Promise<EngineSandbox> };
  /** Strict isolation: the egress proxy's allowlist and, for tests, its resolver and bounds. */
  egress?: Pick<EgressProxyOptions, "allow" | "resolve" | "limits">;
  /** A Messages API on a host unix socket (the scripted API, the demo). */
  modelApiSocket?: string;
  runtimeName?: string;
  labels: Record<string, string>;
  attemptIndex: number;
  /** No unit of the run starts after this one: its sandbox makes nothing ahead (contract R257). */
  last?: boolean;
  fake?: { behaviourFile?: string; recordsDir?: string };
  memoryBytes?: number;
  /** CPUs of the container (the spec's default otherwise). */
  cpus?: number;
  /** Tests: the size of the container's tmpfs HOME (the spec's default otherwise). */
  homeBytes?: number;
  timeoutMs?: number;
  stdoutLimitBytes?: number;
  /** Sees every stdout line. */
  onLine?: (line: string) => void;
  /** Where the raw stream-json is kept (as transcript `index`), for `ledger verify`. */
  transcripts?: { store: TranscriptStore; index: number | string };
  /**
   * A session task's call (src/session): its writable worktree replaces the export, the prompt
   * goes on stdin, and the CLI's session files are staged from and collected into `stateDir`.
   */
  session?: WritableWorkspace;
}

/** The fields `cliRunInput` fills from the run kind's config and the unit's place. */
type CommonInput = "image" | "model" | "expectedCliVersion" | "modelApiSocket" | "fake" | "timeoutMs" | "stdoutLimitBytes" | "labels" | "attemptIndex" | "runtimeName" | "last";

/** What every run kind's config (a study, an adjudication, sessions) gives each of its CLI units alike. */
export interface CliUnitConfig {
  image: string;
  model: string;
  expectedCliVersion: string;
  modelApi?: { socketPath: string };
  fake?: { behaviourFile?: string; recordsDir?: string };
  timeoutMs?: number;
  testHooks?: Pick<TestHooks, "stdoutLimitBytes">;
}

/** Where a unit belongs: its run (or adjudication) id and its own label, its index, its image, the OCI runtime of its container. */
export interface CliUnitPlace {
  run: string;
  /**
   * The id of the image the preflight probed (version, binary hash), never its tag: a tag can be
   * moved to another image between the probe and a container's create (another build of the same
   * tag), and the unit must run the binary the run header records.
   */
  imageId: string;
  unit: string;
  attemptIndex: number;
  runtimeName?: string;
  /** No unit of the run starts after this one (a study's plan says it, or the loop's `UnitContext.last`). */
  last?: boolean;
}

/**
 * One CLI unit's run input: the fields every run kind fills alike, from its config and the unit's
 * place, and `own`, what the kind sets itself (its export or worktree, arguments, expected init,
 * network, login, gateway, transcript).
 */
export function cliRunInput(config: CliUnitConfig, place: CliUnitPlace, own: Omit<CliRunInput, CommonInput>): CliRunInput {
  return {
    ...own,
    image: place.imageId,
    model: config.model,
    expectedCliVersion: config.expectedCliVersion,
    modelApiSocket: config.modelApi?.socketPath,
    fake: config.fake,
    timeoutMs: config.timeoutMs,
    stdoutLimitBytes: config.testHooks?.stdoutLimitBytes,
    labels: runnerLabels(place.run, place.unit),
    attemptIndex: place.attemptIndex,
    runtimeName: place.runtimeName,
    last: place.last,
  };
}

/**
 * A call that works in a writable folder kept between calls (a session task): the folder replaces
 * the export, and the caller stages into the staged HOME what the call needs (its prompt for
 * stdin, the CLI's session files) and collects what the next call will need.
 */
export interface WritableWorkspace {
  worktree: string;
  /** The export hash recorded when the worktree was made. */
  exportHash: string;
  /** A resumed session's earlier messages (see interpretRun). */
  priorMessageUsage: readonly MessagePromptUsage[];
  /** Writes the stdin file and the session files into the staged HOME; returns where they are. */
  stage(stagedHome: string): Promise<{ stdinFile: string; projectsDir: string }>;
  /**
   * After the container ended: keeps the session files the next call needs from what came through
   * the session channel; returns the problems that leave the next call without them.
   */
  collect(receipt: SessionChannelReceipt): Promise<string[]>;
}

export interface CliRunResult {
  status: AttemptStatus;
  reason: string;
  facts: TranscriptFacts;
  cost: CostResult;
  oomKilled: boolean;
  mcp?: McpBridgeRecord;
  egress?: EgressRecord;
  gateway?: GatewayRecord;
}

/** What one run of the stage holds: its inputs, and what it must release whatever happens (in reverse order). */
interface Stage {
  deps: CliRunDeps;
  input: CliRunInput;
  record: RunFacts;
  makeFolder: (kind: FolderKind) => Promise<string>;
  cleanups: Array<() => Promise<unknown>>;
}

/** The staged HOME and what reaches the model: the login copy, or the gateway's placeholder and the attempt's gateway. */
interface StagedHome {
  homeParent: string;
  homeDir: string;
  /** The login copy, written back after the run (login-copy mode only). */
  staged?: Awaited<ReturnType<typeof stageLogin>>;
  attemptGateway?: AttemptGateway;
  modelApiSocket?: string;
}

/** The runner's services this attempt reaches, started for it alone. */
interface Services {
  bridge?: McpBridge;
  egress?: EgressProxy;
  channel?: SessionChannel;
  sessionMount?: { stdinFile: string; projectsDir: string };
}

/** Fills `record` (export hash, container, transcript facts, cost) and persists it once before the container starts. */
export async function runCliInContainer(deps: CliRunDeps, input: CliRunInput, record: RunFacts, persist: () => Promise<void>): Promise<CliRunResult> {
  mark("cli:begin");
  const stage: Stage = { deps, input, record, makeFolder: deps.makeFolder ?? makeRunnerFolder, cleanups: [] };
  // What the caller made ahead is this stage's from here, whether or not it gets as far as using it.
  const sandboxAhead = input.docBridge?.sandbox;
  if (sandboxAhead) stage.cleanups.push(() => sandboxAhead.then((s) => s.remove()));
  const exporting = input.session ? undefined : (input.exported ?? (input.exports ? input.exports.exportAtPin(input.export) : exportAtPin(input.export)));
  if (exporting) stage.cleanups.push(() => exporting.then((e) => removeExport(e.dir)));
  try {
    const workDir = await workspaceOf(stage, exporting);
    mark("cli:exported");
    const home = await stageHome(stage);
    mark("cli:home-staged");
    const services = await startServices(stage, home);
    const sandbox = deps.sandbox ?? dockerSandbox(deps.runtime);
    const spec = attemptSandboxSpec({ ...attemptInput(input, workDir, home, services), exportHash: record.exportHash ?? undefined }, (e) => sandbox.reach(e));
    const { raw, facts } = await runAttemptSandbox(stage, sandbox, spec, persist);
    const records = await settleServices(stage, home, services, raw, facts);
    const meaning = interpretRun(facts, input.model, {
      ...raw,
      interruptedBy: deps.signal?.aborted ? String(deps.signal.reason ?? "a signal") : undefined,
      priorMessageUsage: input.session?.priorMessageUsage,
      refusedByHost: gatewayBudgetRefusal(records.gateway),
    });
    Object.assign(record, meaning.fields);
    mark("cli:interpreted");
    // What the gateway saw go wrong comes before the transcript's own words (contract R194).
    const cause = meaning.status !== "completed" && records.gateway ? gatewayCause(records.gateway) : null;
    const reason = cause ? `${cause}; then ${meaning.reason}` : meaning.reason;
    return { status: meaning.status, reason, facts, cost: meaning.cost, oomKilled: raw.oomKilled, ...records };
  } finally {
    for (const cleanup of stage.cleanups.reverse()) await cleanup().catch(() => {});
    mark("cli:cleaned-up");
  }
}

/** The folder the CLI works in: a session's worktree, or the export with its hash and instruction files recorded. */
async function workspaceOf({ input, record }: Stage, exporting: Promise<ExportResult> | undefined): Promise<string> {
  if (input.session) {
    record.exportHash = input.session.exportHash;
    return input.session.worktree;
  }
  const exported = await exporting!;
  record.exportHash = exported.exportHash;
  // The instruction files and every file the CLI inlines from them through @ imports, by the version's measured rules (contract R129, R265).
  record.instructionFiles = await instructionFilesWithImports(
    exported.dir,
    exported.files.map((f) => f.path),
    activeProfile().imports.plain,
  );
  return exported.dir;
}

/** Stages the HOME folder: the gateway's placeholder login behind this attempt's gateway, or a copy of the login. */
async function stageHome({ input, makeFolder, cleanups }: Stage): Promise<StagedHome> {
  const homeParent = await makeFolder("home");
  cleanups.push(() => removeTree(homeParent));
  const homeDir = join(homeParent, "home");
  if (!input.gateway) return { homeParent, homeDir, staged: await stageLogin(input.login, homeDir), modelApiSocket: input.modelApiSocket };
  const gatewayParent = await makeFolder("gateway");
  cleanups.push(() => removeTree(gatewayParent));
  const attemptGateway = await input.gateway.gateway.openAttempt({
    socketDir: serviceSocketDir(gatewayParent),
    credential: input.gateway.credential,
    limitUsd: input.gateway.limitUsd,
    runRemainingUsd: input.gateway.runRemainingUsd,
  });
  cleanups.push(() => attemptGateway.stop());
  await stagePlaceholderLogin(homeDir, attemptGateway.placeholder, { globalConfigPath: input.login.globalConfigPath });
  return { homeParent, homeDir, attemptGateway, modelApiSocket: attemptGateway.socketPath };
}

/** Starts the session channel, the doc-bridge and the egress proxy the attempt needs, each in a folder of its own. */
async function startServices({ input, makeFolder, cleanups }: Stage, home: StagedHome): Promise<Services> {
  const services: Services = {};
  if (input.session) {
    services.sessionMount = await input.session.stage(home.homeDir);
    // The session files leave through a channel of their own that the agent cannot write (contract
    // R141), so the login folder need not be writable; with the gateway nothing else is written
    // back, and it is mounted read-only (contract R116).
    const paths = sessionChannelPaths(home.homeParent);
    const channel = await openSessionChannel(paths.socketDir, paths.streamFile, SESSION_STREAM_LIMIT_BYTES);
    services.channel = channel;
    cleanups.push(() => channel.close());
  }
  if (input.docBridge) {
    const mcpParent = await makeFolder("mcp");
    cleanups.push(() => removeTree(mcpParent));
    const bridge = await startMcpBridge({ command: input.docBridge.command, cwd: input.docBridge.cwd, sandbox: input.docBridge.sandbox, socketDir: serviceSocketDir(mcpParent) });
    services.bridge = bridge;
    cleanups.push(() => bridge.stop());
    mark("cli:bridge-ready");
  }
  // With the gateway the container has no network and no proxy: the gateway is its one way out.
  if (input.egress && !input.gateway) {
    const egressParent = await makeFolder("egress");
    cleanups.push(() => removeTree(egressParent));
    const egress = await startEgressProxy({ ...input.egress, socketDir: serviceSocketDir(egressParent) });
    services.egress = egress;
    cleanups.push(() => egress.stop());
  }
  return services;
}

/** With the gateway the container has network none; without names when the CLI looks none up (contract R281). */
function attemptNetwork(input: CliRunInput): NetworkSetting {
  const network: NetworkSetting = input.gateway ? { mode: "none" } : input.network;
  return input.noNames === true ? withoutNames(network) : network;
}

/** What the attempt's sandbox is made of. */
function attemptInput(input: CliRunInput, workDir: string, home: StagedHome, services: Services): AttemptContainerInput {
  return {
    image: input.image,
    argv: input.argv,
    exportDir: workDir,
    session: services.sessionMount && { ...services.sessionMount, channelSocket: services.channel!.socketPath },
    loginReadOnly: input.gateway !== undefined,
    writableWorkspace: input.session !== undefined,
    homeDir: home.homeDir,
    mcpSocketDir: services.bridge?.socketDir,
    network: attemptNetwork(input),
    modelApiSocket: home.modelApiSocket,
    egressProxySocket: services.egress?.socketPath,
    runtime: input.runtimeName,
    labels: input.labels,
    attemptIndex: input.attemptIndex,
    last: input.last,
    fake: input.fake,
    memoryBytes: input.memoryBytes,
    cpus: input.cpus,
    homeBytes: input.homeBytes,
  };
}

/**
 * Persists the record as running (the child may spend from there on), then runs the sandbox to its
 * end, every stdout line to the transcript store, the reader and the caller; records the container.
 */
async function runAttemptSandbox({ deps, input, record, cleanups }: Stage, sandbox: Sandbox, spec: SandboxSpec, persist: () => Promise<void>): Promise<{ raw: RawOutcome; facts: TranscriptFacts }> {
  const checkpoint = deps.checkpoint ?? (() => {});
  const reader = runReader(input.arm, input.model, input.expectedCliVersion, input.expectedInit, input.expectedTools);
  record.phase = "running";
  record.startedAt = (deps.now?.() ?? new Date()).toISOString();
  await persist();
  const transcript = input.transcripts?.store.begin(input.transcripts.index);
  let transcriptError: unknown;
  if (transcript) cleanups.push(async () => transcript.finish());
  checkpoint("before-container-start");
  const onLine = (line: string): void => {
    checkpoint("during-attempt");
    // A transcript that cannot be kept (a full disk) is the runner's fault: raised once the
    // container has ended, so it is stopped and removed first.
    if (transcript && transcriptError === undefined) {
      try {
        transcript.pushLine(line);
      } catch (err) {
        transcriptError = err;
      }
    }
    reader.pushLine(line);
    input.onLine?.(line);
  };
  const raw = await runBounded(sandbox, spec, onLine, {
    timeoutMs: input.timeoutMs,
    stdoutLimitBytes: input.stdoutLimitBytes,
    signal: deps.signal,
    onStarted: () => (mark("cli:container-started"), input.onContainerStarted?.()),
  });
  mark("cli:container-ended");
  Object.assign(record, {
    containerId: raw.containerId,
    ...(raw.runtime ? { runtime: raw.runtime } : {}),
    wallTimeMs: raw.wallTimeMs,
    exitCode: raw.exitCode,
    timedOut: raw.timedOut,
    truncated: raw.truncated,
  });
  if (transcriptError !== undefined) throw transcriptError;
  if (transcript) record.transcriptSha256 = transcript.finish();
  mark("cli:transcript-kept");
  return { raw, facts: reader.finish() };
}

/**
 * After the sandbox ended: stops the services and checks what they saw against the transcript
 * (their problems become setup problems), writes the refreshed login back and hands a session's
 * files on. A refused egress request does not fail the attempt by itself (contract R72).
 */
async function settleServices(
  { deps, input }: Stage,
  home: StagedHome,
  services: Services,
  raw: RawOutcome,
  facts: TranscriptFacts,
): Promise<{ mcp?: McpBridgeRecord; egress?: EgressRecord; gateway?: GatewayRecord }> {
  // A stream the sandbox's relay broke (contract R242), or a relay that never listened (contract
  // R258): the attempt's setup was not what it should be, and that comes before what it caused.
  if (raw.channelFault !== undefined) {
    facts.setupProblems.unshift(raw.channelFault);
    facts.setupProblemCodes.push("sandbox-stream");
  }
  const egress = services.egress ? await services.egress.stop() : undefined;
  const mcp = services.bridge ? await settleDocBridge(services.bridge, facts) : undefined;
  if (home.staged) await writeBackLogin(input.login, home.staged, { lock: input.lock });
  mark("cli:login-written-back");
  // A run the runner ended (its time limit, a signal) was cut short: its own status says why.
  const cutByRunner = raw.timedOut || deps.signal?.aborted === true;
  if (input.session) {
    const kept = await input.session.collect(await services.channel!.finish());
    // A call the runner cut short has its own status; one that ran its course must hand its session on.
    if (!cutByRunner) facts.setupProblems.push(...kept.map((p) => `session files: ${p}`));
    // Its worktree too: a copy that came back incomplete left the runner's copy as it was (contract R245).
    const worktree = raw.copyBackProblems ?? [];
    if (worktree.length > 0 && !cutByRunner) {
      facts.setupProblems.push(...worktree.map((p) => `worktree: ${p}`));
      facts.setupProblemCodes.push("sandbox-copy-back");
    }
  }
  const gateway = home.attemptGateway ? await settleGateway(home.attemptGateway, input.gateway!, facts, cutByRunner) : undefined;
  return { mcp, egress, gateway };
}

/** The bridge's record against the transcript's doc-bridge calls. */
async function settleDocBridge(bridge: McpBridge, facts: TranscriptFacts): Promise<McpBridgeRecord> {
  const record = await bridge.stop();
  mark("cli:bridge-stopped");
  const mismatch = compareMcpRecord(
    record,
    facts.docBridgeCalls.map((c) => c.name),
  );
  // The CLI lists the server's tools before its init event, so a "connected" server that
  // never connected through the runner is a treatment that did not come from the runner.
  if (record.connections === 0) mismatch.unshift("the CLI never connected to the doc-bridge server through the runner");
  facts.setupProblems.push(...mismatch.map((m) => `doc-bridge record: ${m}`));
  // With its code, so the attempt is classified invalid-setup even when its transcript is clean
  // (contract R40): a completed attempt with setup problems is a record the ledger refuses.
  if (mismatch.length > 0) facts.setupProblemCodes.push("doc-bridge-record");
  return record;
}

/**
 * The gateway's record and its metered usage against the transcript's. A run the runner cut short
 * cut its last reply and its transcript short on both sides: there is no whole usage to compare.
 */
async function settleGateway(attemptGateway: AttemptGateway, options: NonNullable<CliRunInput["gateway"]>, facts: TranscriptFacts, cutByRunner: boolean): Promise<GatewayRecord> {
  const record = await attemptGateway.stop();
  const problems = [...record.setupProblems, ...(options.compareUsage && !cutByRunner ? compareMeteredUsage(record, facts, { cumulativeModelUsage: options.cumulativeModelUsage }) : [])];
  facts.setupProblems.push(...problems.map((p) => `gateway: ${p}`));
  if (problems.length > 0) facts.setupProblemCodes.push("gateway");
  return record;
}
