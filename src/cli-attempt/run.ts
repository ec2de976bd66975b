import { join } from "node:path";
import type { ContainerRuntime } from "../runtime/port.ts";
import { exportAtPin, removeExport, removeTree, type ExportOptions } from "../export/export.ts";
import { stageLogin, writeBackLogin, type LoginLocation, type LoginLock } from "../attempt/login.ts";
import { attemptContainerSpec, type NetworkSetting } from "../attempt/spec.ts";
import { runBounded, withHomeBound } from "../attempt/run.ts";
import { startEgressProxy, type EgressProxy, type EgressProxyOptions } from "../isolation/proxy.ts";
import { compareMcpRecord, startMcpBridge, type McpBridge, type McpBridgeRecord } from "../mcp/bridge.ts";
import type { Arm } from "../plan/plan.ts";
import { TranscriptReader, type TranscriptFacts } from "../transcript/reader.ts";
import { classifyAttempt, type AttemptStatus } from "../transcript/classify.ts";
import { computeCost, type CostResult } from "../cost/compute.ts";
import type { EgressRecord, RunFacts } from "../ledger/schema.ts";
import { makeRunnerFolder, type FolderKind } from "../util/orphans.ts";
import type { Checkpoint } from "../loop/loop.ts";
import { runFactsFrom } from "./record.ts";
import { stagePlaceholderLogin } from "../gateway/credential.ts";
import { compareMeteredUsage } from "../gateway/check.ts";
import type { AttemptGateway, Gateway, GatewayRecord } from "../gateway/gateway.ts";

/**
 * One run of the Claude Code CLI in a fresh hardened container, from the export to a classified
 * outcome: the stage that the study's attempts and the adjudicator's items share. It fills the
 * shared part of the caller's record as it goes and returns the verdict; it never reserves or
 * settles (the loop does). Every resource it made is released whatever happens; a fault of the
 * runner itself propagates.
 */

export interface CliRunDeps {
  runtime: ContainerRuntime;
  /** Makes a fresh runner-owned folder (named with the runner's pid, reaped after a crash). */
  makeFolder?: (kind: FolderKind) => Promise<string>;
  /** The current time, for `startedAt`. */
  now?: () => Date;
  checkpoint?: (point: Checkpoint) => void;
  /** Aborted on SIGINT/SIGTERM: the container is stopped. */
  signal?: AbortSignal;
}

export interface CliRunInput {
  export: ExportOptions;
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
  };
  image: string;
  argv: readonly string[];
  /** Which arm's setup the transcript must show (the adjudicator runs as the repository arm). */
  arm: Arm;
  model: string;
  expectedTools: readonly string[];
  expectedCliVersion: string;
  network: NetworkSetting;
  /** The MCP arm: the doc-bridge engine command and its checkout, served through a per-run bridge. */
  docBridge?: { command: string[]; cwd: string };
  /** Strict isolation: the egress proxy's allowlist and, for tests, its resolver and bounds. */
  egress?: Pick<EgressProxyOptions, "allow" | "resolve" | "limits">;
  /** A Messages API on a host unix socket (the scripted API, the demo). */
  modelApiSocket?: string;
  runtimeName?: string;
  labels: Record<string, string>;
  attemptIndex: number;
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

/** Fills `record` (export hash, container, transcript facts, cost) and persists it once before the container starts. */
export async function runCliInContainer(deps: CliRunDeps, input: CliRunInput, record: RunFacts, persist: () => Promise<void>): Promise<CliRunResult> {
  const makeFolder = deps.makeFolder ?? makeRunnerFolder;
  const checkpoint = deps.checkpoint ?? (() => {});
  const cleanups: Array<() => Promise<unknown>> = [];
  let bridge: McpBridge | undefined;
  let egress: EgressProxy | undefined;
  let attemptGateway: AttemptGateway | undefined;
  try {
    const exported = await exportAtPin(input.export);
    cleanups.push(() => removeExport(exported.dir));
    record.exportHash = exported.exportHash;

    const homeParent = await makeFolder("home");
    cleanups.push(() => removeTree(homeParent));
    let staged: Awaited<ReturnType<typeof stageLogin>> | undefined;
    let modelApiSocket = input.modelApiSocket;
    if (input.gateway) {
      const gatewayParent = await makeFolder("gateway");
      cleanups.push(() => removeTree(gatewayParent));
      attemptGateway = await input.gateway.gateway.openAttempt({
        socketDir: join(gatewayParent, "socket"),
        credential: input.gateway.credential,
        limitUsd: input.gateway.limitUsd,
        runRemainingUsd: input.gateway.runRemainingUsd,
      });
      const g = attemptGateway;
      cleanups.push(() => g.stop());
      modelApiSocket = g.socketPath;
      await stagePlaceholderLogin(join(homeParent, "home"), g.placeholder, { globalConfigPath: input.login.globalConfigPath });
    } else {
      staged = await stageLogin(input.login, join(homeParent, "home"));
    }
    const homeDir = join(homeParent, "home");

    if (input.docBridge) {
      const mcpParent = await makeFolder("mcp");
      cleanups.push(() => removeTree(mcpParent));
      bridge = await startMcpBridge({ command: input.docBridge.command, cwd: input.docBridge.cwd, socketDir: join(mcpParent, "socket") });
      const b = bridge;
      cleanups.push(() => b.stop());
    }
    // With the gateway the container has no network and no proxy: the gateway is its one way out.
    if (input.egress && !input.gateway) {
      const egressParent = await makeFolder("egress");
      cleanups.push(() => removeTree(egressParent));
      egress = await startEgressProxy({ ...input.egress, socketDir: join(egressParent, "socket") });
      const e = egress;
      cleanups.push(() => e.stop());
    }
    const spec = attemptContainerSpec({
      image: input.image,
      argv: input.argv,
      exportDir: exported.dir,
      homeDir,
      mcpSocketDir: bridge?.socketDir,
      network: input.gateway ? { mode: "none" } : input.network,
      modelApiSocket,
      egressProxySocket: egress?.socketPath,
      runtime: input.runtimeName,
      labels: input.labels,
      attemptIndex: input.attemptIndex,
      fake: input.fake,
      memoryBytes: input.memoryBytes,
      cpus: input.cpus,
      homeBytes: input.homeBytes,
    });

    const reader = new TranscriptReader({ arm: input.arm, model: input.model, expectedTools: input.expectedTools, cliVersion: input.expectedCliVersion });
    record.phase = "running";
    record.startedAt = (deps.now?.() ?? new Date()).toISOString();
    await persist(); // the child may spend from here on
    checkpoint("before-container-start");
    const raw = await runBounded(
      deps.runtime,
      spec,
      (line) => {
        checkpoint("during-attempt");
        reader.pushLine(line);
        input.onLine?.(line);
      },
      { timeoutMs: input.timeoutMs, stdoutLimitBytes: input.stdoutLimitBytes, signal: deps.signal },
    );
    Object.assign(record, { containerId: raw.containerId, wallTimeMs: raw.wallTimeMs, exitCode: raw.exitCode, timedOut: raw.timedOut, truncated: raw.truncated });

    const facts = reader.finish();
    // A refused egress request does not fail the attempt by itself (contract R72): it is recorded and reported.
    const egressRecord = egress ? await egress.stop() : undefined;
    let mcpRecord: McpBridgeRecord | undefined;
    if (bridge) {
      mcpRecord = await bridge.stop();
      bridge = undefined;
      const mismatch = compareMcpRecord(mcpRecord, facts.docBridgeCalls.map((c) => c.name));
      // The CLI lists the server's tools before its init event, so a "connected" server that
      // never connected through the runner is a treatment that did not come from the runner.
      if (mcpRecord.connections === 0) mismatch.unshift("the CLI never connected to the doc-bridge server through the runner");
      facts.setupProblems.push(...mismatch.map((m) => `doc-bridge record: ${m}`));
    }
    if (staged) await writeBackLogin(input.login, staged, { lock: input.lock });
    let gatewayRecord: GatewayRecord | undefined;
    if (attemptGateway) {
      gatewayRecord = await attemptGateway.stop();
      const problems = [...gatewayRecord.setupProblems, ...(input.gateway!.compareUsage ? compareMeteredUsage(gatewayRecord, facts) : [])];
      facts.setupProblems.push(...problems.map((p) => `gateway: ${p}`));
      if (problems.length > 0) facts.setupProblemCodes.push("gateway");
    }

    const cost = computeCost({ ...facts, model: input.model });
    Object.assign(record, runFactsFrom(facts, cost));
    const done = (status: AttemptStatus, reason: string): CliRunResult => ({ status, reason, facts, cost, oomKilled: raw.oomKilled, mcp: mcpRecord, egress: egressRecord, gateway: gatewayRecord });
    if (deps.signal?.aborted) return done("failed", `interrupted by ${String(deps.signal.reason ?? "a signal")}`);
    // A kill after the result event and its grace period is the runner's doing, not a CLI failure.
    const exitCode = raw.killedAfterResult ? 0 : raw.exitCode;
    const verdict = classifyAttempt({ facts, exitCode, timedOut: raw.timedOut, truncated: raw.truncated, cost });
    if (verdict.status === "invalid-setup" && record.setupProblems.length === 0) record.setupProblems = [verdict.reason];
    // The host stopped a request before it was sent: the CLI saw an API error, the attempt is over budget.
    if (gatewayRecord?.budgetRefused && verdict.status !== "invalid-setup") {
      const refusal = gatewayRecord.requests.find((r) => r.refused?.kind === "budget");
      return done("budget-exceeded", `the gateway refused a request before sending it: ${refusal?.refused?.reason ?? "its worst-case cost would pass the limit"}`);
    }
    if (verdict.status === "invalid-cost" && record.costProblem === null) record.costProblem = verdict.reason;
    if (verdict.status !== "completed" && raw.oomKilled) return done(verdict.status, `${verdict.reason} (the container was killed by its memory limit)`);
    const bounded = withHomeBound(raw, verdict);
    return done(bounded.status, bounded.reason);
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  }
}
