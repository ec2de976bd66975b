import type { PlannedAttempt } from "../plan/plan.ts";
import { buildPrompt, assertPrompt } from "../claude/args.ts";
import type { Reservation } from "../budget/budget.ts";
import { createLedger, writeLedger } from "../ledger/store.ts";
import type { HttpCall, Ledger, Observation } from "../ledger/schema.ts";
import { commonHeader, newRunId, type StudyRunBase } from "./header.ts";
import { preflightDocBridge } from "../mcp/preflight.ts";
import { exportSourceFor } from "../export/options.ts";
import { DOC_BRIDGE_SERVER } from "../terms/tool-names.ts";
import { RefusalError, errorMessage } from "../util/errors.ts";
import type { Meter } from "../loop/loop.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { reservedObservation } from "./observation.ts";
import { runAttempts, type AttemptKind } from "./attempts.ts";
import { Progress } from "./progress.ts";
import { summarize } from "./summary.ts";
import { engineProvenance } from "../mcp/bundle-hash.ts";
import { checkApiKey, parseApiBaseUrl, redactDeep, redactSecret, sendMessages, type CallOutcome, DEFAULT_API_BASE_URL } from "../transport/http/client.ts";
import { callCeiling, usageCostUsd, type UpperPrices } from "../transport/http/pricing.ts";
import { sumUsd } from "../cost/money.ts";
import { cacheWriteTokens, promptTokens } from "../cost/usage.ts";
import { openRepositoryTools } from "../transport/http/tools.ts";
import { RunExports } from "../export/export.ts";
import { instructionFilesIn } from "../corpus/filter.ts";
import { combineTools, openDocBridgeTools, type DocBridgeTools } from "../transport/http/doc-bridge.ts";
import { PROTOCOL_LIMITS, runAgentLoop, type CallAccount, type LoopResult } from "../transport/http/tool-loop.ts";

/**
 * `--transport http` (contract R7; docs/http-transport.md): the runner is the
 * agent. The same ledger, observation fields where they apply, summary and exit codes as the
 * CLI transport; per-call reservations instead of a per-attempt limit.
 */

/** Ledger `isolation` of this transport: no container; the tools read git blobs on the host. */
export const HTTP_ISOLATION = "client-side-tools";

export interface HttpStudyConfig extends StudyRunBase {
  /** From ANTHROPIC_API_KEY only; never written, printed or passed to a child. */
  apiKey: string;
  /** `parseApiBaseUrl` input: undefined for the real API. */
  apiBaseUrl?: string;
  prices: UpperPrices;
  /** Tests only: a shorter deadline than the protocol's five minutes. */
  deadlineMs?: number;
}

export interface HttpStudyDeps {
  stdout: (text: string) => void;
  stderr: NodeJS.WritableStream;
  /** Aborted on SIGINT/SIGTERM: the current request is abandoned (and stays charged), the run ends blocked. */
  signal?: AbortSignal;
  /** Milliseconds for the deadline; tests inject a clock that runs faster. */
  now?: () => number;
}

interface AttemptOutcome {
  status: NonNullable<Observation["status"]>;
  reason: string;
}

async function preflight(config: HttpStudyConfig): Promise<{ baseUrl: string; docBridge: Ledger["docBridge"] }> {
  const keyProblem = checkApiKey(config.apiKey);
  if (keyProblem) throw new RefusalError(`${keyProblem}; nothing was charged`);
  const baseUrl = parseApiBaseUrl(config.apiBaseUrl);
  try {
    callCeiling(0, config.prices);
  } catch (err) {
    throw new RefusalError(errorMessage(err));
  }
  for (const taskIndex of new Set(config.plan.map((a) => a.taskIndex))) assertPrompt(buildPrompt(config.loaded.manifest.tasks[taskIndex]!));
  if (!config.plan.some((a) => a.arm === "mcp")) return { baseUrl, docBridge: null };
  const checkouts = [...new Set(config.plan.map((a) => a.repository))].map((repository) => ({
    repository,
    dir: config.roots.get(repository)!,
    pin: config.loaded.manifest.repositories[repository]!,
  }));
  const result = await preflightDocBridge({ command: config.docBridgeCommand, checkouts, loaded: config.loaded });
  // The http transport offers only the three allowed tools; the rest is recorded as the CLI's deny list would be.
  return { baseUrl, docBridge: { ...(await engineProvenance(config.docBridgeCommand, result.checkouts)), denyList: result.deniedCliTools } };
}

export async function runHttpStudy(config: HttpStudyConfig, deps: HttpStudyDeps): Promise<number> {
  const key = config.apiKey;
  // Git children inherit the environment (src/corpus/git.ts); the key must reach none of them.
  delete process.env.ANTHROPIC_API_KEY;
  const redact = (text: string) => redactSecret(text, key);
  const now = deps.now ?? (() => performance.now());
  const { baseUrl, docBridge } = await preflight(config);
  const runId = newRunId();
  const progress = new Progress(deps.stderr, config.plan.length, config.capUsd, config.quiet ?? false);

  const ledger: Ledger = {
    ...(await commonHeader(runId, config.loaded, config.roots, "http")),
    docBridge,
    image: null,
    cliVersion: null,
    expectedCliVersion: null,
    transport: "http",
    isolation: HTTP_ISOLATION,
    modelApi: baseUrl === DEFAULT_API_BASE_URL ? "anthropic" : "test",
    model: config.model,
    prices: { [config.model]: { upper: { input: config.prices.inputUsdPerMtok, output: config.prices.outputUsdPerMtok } } },
    mode: config.mode,
    budget: { capUsd: config.capUsd, attemptBudgetUsd: null, reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false },
    adjudication: { method: "agent", humanReview: false },
    status: "running",
    observations: [],
  };
  // Everything the runner writes goes through the redaction, whatever the API echoed back.
  const handle = await createLedger(config.output, redactDeep(ledger, key), { checkouts: [...config.roots.values()], projectRoot: PROJECT_ROOT });
  const write = () => writeLedger(handle, redactDeep(ledger, key));
  // Each repository's export is planned once for the whole run; every attempt hashes its own read.
  const exports = new RunExports();

  const kind: AttemptKind = {
    // This transport reserves per call, through the meter.
    limitUsd: null,
    open(a) {
      const obs = reservedObservation(a, { transport: "http", cliVersion: null, expectedCliVersion: null, attemptBudgetUsd: null, reservationUsd: 0 });
      obs.calls = [];
      ledger.observations.push(obs);
      return obs;
    },
    async runOne(attempt, ctx) {
      const account = callAccount({ prices: config.prices, obs: ctx.entry, meter: ctx.meter, write, redact });
      const outcome = await runAttempt(config, deps, { attempt, obs: ctx.entry, account, baseUrl, now, write, redact, exports });
      // The unit is charged what its calls were charged; the loop sums them.
      return { status: outcome.status, reason: redact(outcome.reason), reportedCostUsd: null, computedCostUsd: null };
    },
  };
  const end = await runAttempts({ kind, plan: config.plan, ledger, capUsd: config.capUsd, persist: write, progress, signal: deps.signal });
  deps.stdout(JSON.stringify(redactDeep(summarize(config, ledger, handle), key), null, 2) + "\n");
  return end.exitCode;
}

/** The observation's hold: settled calls at their charge, the open one at its reservation. */
function hold(calls: readonly HttpCall[]): number {
  return sumUsd(calls.map((c) => c.chargedUsd ?? c.reservationUsd));
}

/**
 * Per-call money (contract R29, R30): reserve the ceiling at the upper prices and
 * persist it before the call; release the unused part from measured usage; keep it charged
 * when the usage is unknown. Each step is written to the ledger before the next one starts.
 */
function callAccount(o: { prices: UpperPrices; obs: Observation; meter: Meter; write(): Promise<void>; redact(text: string): string }): CallAccount {
  let open: { call: HttpCall; reservation: Reservation } | undefined;
  const calls = o.obs.calls!;
  return {
    async open(turn, requestBytes) {
      if (open) throw new Error("a call is already open");
      const ceiling = callCeiling(requestBytes, o.prices);
      const reserved = o.meter.reserve(ceiling.reservationUsd);
      if (!reserved.ok) {
        return {
          ok: false,
          reason: `call ${turn} was not made: its reservation of ${ceiling.reservationUsd} USD (${ceiling.inputCeilingTokens} prompt and ${ceiling.outputCeilingTokens} output tokens at the upper prices) does not fit under the remaining budget of ${reserved.remainingUsd} USD`,
        };
      }
      const call: HttpCall = {
        turn,
        requestBytes,
        inputCeilingTokens: ceiling.inputCeilingTokens,
        outputCeilingTokens: ceiling.outputCeilingTokens,
        reservationUsd: reserved.reservation.reservedUsd,
        chargedUsd: null,
        inputTokens: null,
        outputTokens: null,
        cacheReadInputTokens: null,
        cacheCreationInputTokens: null,
        usageComplete: false,
        outcome: null,
        httpStatus: null,
        problem: null,
      };
      calls.push(call);
      open = { call, reservation: reserved.reservation };
      o.obs.reservationUsd = hold(calls);
      await o.write(); // the reservation is on disk before the request leaves
      return { ok: true, inputCeilingTokens: ceiling.inputCeilingTokens, outputCeilingTokens: ceiling.outputCeilingTokens };
    },
    async close(outcome: CallOutcome) {
      if (!open) throw new Error("no call is open");
      const { call, reservation } = open;
      open = undefined;
      const usage = outcome.kind === "message" || outcome.kind === "bad-message" ? outcome.usage : null;
      const settled = usage
        ? o.meter.settle(reservation, {
            // Usage above the ceiling is charged at least the reservation (and the measured cost if
            // larger); a cost above the reservation within it is budget-exceeded by the settlement.
            status: promptTokens(usage) > call.inputCeilingTokens || usage.outputTokens > call.outputCeilingTokens ? "budget-exceeded" : "completed",
            reportedCostUsd: null,
            computedCostUsd: usageCostUsd(usage, o.prices),
          })
        : o.meter.settle(reservation, { status: "failed", reportedCostUsd: null, computedCostUsd: null });
      Object.assign(call, {
        chargedUsd: settled.chargedUsd,
        inputTokens: usage?.inputTokens ?? null,
        outputTokens: usage?.outputTokens ?? null,
        // A figure the reply left out stays unknown here too (contract R46).
        cacheReadInputTokens: usage?.cacheReported.read ? usage.cacheReadInputTokens : null,
        cacheCreationInputTokens: usage?.cacheReported.write ? cacheWriteTokens(usage) : null,
        usageComplete: usage !== null,
        outcome: outcome.kind,
        httpStatus: outcome.kind === "lost" ? null : outcome.httpStatus,
        problem: outcome.kind === "message" ? null : o.redact(outcome.problem),
      } satisfies Partial<HttpCall>);
      o.obs.reservationUsd = hold(calls);
      await o.write();
      const overReservation = usage !== null && settled.status === "budget-exceeded";
      return { capExceeded: settled.cumulativeCapExceeded, overReservation };
    },
  };
}

interface AttemptContext {
  attempt: PlannedAttempt;
  obs: Observation;
  account: CallAccount;
  baseUrl: string;
  now: () => number;
  write(): Promise<void>;
  redact(text: string): string;
  /** The run's export plans. */
  exports: RunExports;
}

/** One attempt: the tools, the loop, the observation. Tools are closed whatever happens. */
async function runAttempt(config: HttpStudyConfig, deps: HttpStudyDeps, ctx: AttemptContext): Promise<AttemptOutcome> {
  const { attempt, obs } = ctx;
  const task = config.loaded.manifest.tasks[attempt.taskIndex]!;
  const repoDir = config.roots.get(attempt.repository)!;
  const repository = await openRepositoryTools(
    { ...(await exportSourceFor(config.loaded, attempt.repository, repoDir)), ...(config.exportLimits ? { limits: config.exportLimits } : {}) },
    ctx.exports,
  );
  obs.exportHash = repository.exportHash;
  obs.instructionFiles = instructionFilesIn(repository.files.map((f) => f.path));
  let docBridge: DocBridgeTools | undefined;
  try {
    if (attempt.arm === "mcp") {
      try {
        docBridge = await openDocBridgeTools({ command: config.docBridgeCommand, cwd: repoDir, timeoutMs: PROTOCOL_LIMITS.toolTimeoutMs });
      } catch (err) {
        const problem = ctx.redact(errorMessage(err));
        // No call was made: the usage is complete and zero, not unknown.
        Object.assign(obs, { setupProblems: [problem], mcpServers: [{ name: DOC_BRIDGE_SERVER, status: "failed" }], numTurns: 0, usageComplete: true });
        Object.assign(obs, { inputTokens: 0, outputTokens: 0, cacheCreationInputTokens: 0, cacheReadInputTokens: 0 });
        return { status: "invalid-setup", reason: problem };
      }
    }
    const tools = docBridge ? combineTools(repository, docBridge) : repository;
    obs.tools = tools.definitions.map((d) => d.name).sort();
    obs.mcpServers = docBridge ? [{ name: DOC_BRIDGE_SERVER, status: "connected" }] : [];
    obs.phase = "running";
    obs.startedAt = new Date().toISOString();
    await ctx.write();

    const result = await runAgentLoop({
      model: config.model,
      prompt: buildPrompt(task),
      tools,
      send: (body, timeoutMs, signal) => sendMessages({ baseUrl: ctx.baseUrl, apiKey: config.apiKey, body, timeoutMs, signal }),
      account: ctx.account,
      now: ctx.now,
      limits: config.deadlineMs === undefined ? undefined : { deadlineMs: config.deadlineMs },
      signal: deps.signal,
      docBridgeToolNames: docBridge?.apiNames ?? [],
    });
    Object.assign(obs, loopToObservation(result, config.prices, obs.calls!));
    if (docBridge) obs.mcp = { connections: 1, toolCalls: docBridge.calls, serverInfo: docBridge.serverInfo };
    return { status: result.status, reason: result.reason };
  } finally {
    await repository.close();
    await docBridge?.close();
  }
}

/**
 * A measured call's usage as the ledger holds it: cache writes as one figure (every TTL is priced
 * alike, src/transport/http/pricing.ts); a figure the reply left out was counted as zero when it was charged.
 */
function callUsage(c: HttpCall) {
  return {
    inputTokens: c.inputTokens!,
    outputTokens: c.outputTokens!,
    cacheReadInputTokens: c.cacheReadInputTokens ?? 0,
    cacheWrite5mInputTokens: 0,
    cacheWrite1hInputTokens: c.cacheCreationInputTokens ?? 0,
  };
}

/** The loop's facts in the ledger's field names; fields of the CLI alone stay null. */
function loopToObservation(r: LoopResult, prices: UpperPrices, calls: readonly HttpCall[]): Partial<Observation> {
  const measured = calls.filter((c) => c.inputTokens !== null && c.outputTokens !== null);
  const computed = measured.length ? sumUsd(measured.map((c) => usageCostUsd(callUsage(c), prices))) : null;
  return {
    model: r.model,
    toolCallsByName: r.toolCallsByName,
    toolCalls: r.toolCalls,
    inputTokens: r.inputTokens,
    outputTokens: r.outputTokens,
    cacheCreationInputTokens: r.cacheCreationInputTokens,
    cacheReadInputTokens: r.cacheReadInputTokens,
    numTurns: r.numTurns,
    usageComplete: r.usageComplete,
    toolErrorsByName: r.toolErrorsByName,
    computedCostUsd: computed,
    costBasis: { prices: "upper", inputUsdPerMtok: prices.inputUsdPerMtok, outputUsdPerMtok: prices.outputUsdPerMtok, source: "each call's measured usage" },
    setupProblems: r.setupProblems,
    costProblem: r.costProblem,
    wallTimeMs: r.wallTimeMs,
    answer: r.answer,
  };
}
