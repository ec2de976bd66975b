import { tokenCounts } from "../study/observation.ts";
import { randomBytes } from "node:crypto";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Ledger } from "../ledger/schema.ts";
import type { LoadedManifest } from "../manifest/load.ts";
import type { ContainerRuntime } from "../runtime/port.ts";
import { reapOrphans, runnerLabels } from "../runtime/reaper.ts";
import { probeVersion } from "../image/build.ts";
import { exportAtPin, reapOrphanExports, removeExport, removeTree } from "../export/export.ts";
import { exportSourceFor } from "../export/options.ts";
import { hasCommit } from "../corpus/git.ts";
import { acquireLoginLock, inspectLogin, resolveLogin, stageLogin, writeBackLogin, type LoginLocation } from "../attempt/login.ts";
import { attemptContainerSpec, type NetworkSetting } from "../attempt/spec.ts";
import { runBounded } from "../attempt/run.ts";
import { expectedInitTools } from "../claude/args.ts";
import { TranscriptReader } from "../transcript/reader.ts";
import { classifyAttempt } from "../transcript/classify.ts";
import { computeCost } from "../cost/compute.ts";
import { initialBudget, reserve, settle, type BudgetState } from "../budget/budget.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { ExitCode, RefusalError, UsageError, errorMessage } from "../util/errors.ts";
import { MASK } from "./mask.ts";
import { adjudicatorArguments } from "./prompt.ts";
import { planAdjudication, readVerdict, type PlannedItem } from "./plan.ts";
import { OUTCOME_SCORES, type AdjudicationRecord, type AdjudicatorRun, type Item, type Outcome } from "./schema.ts";
import { createRecord, writeRecord, type RecordHandle } from "./store.ts";

/**
 * Blind agent adjudication of one ledger (issue 8): one fresh hardened container per answer,
 * with the attempts' image, flags, export, login staging and budget rules, and structured
 * output. The ledger is only read. Like the run, an adjudicator run that does not complete
 * stops the adjudication (no retry); the items not reached are recorded blocked, never dropped.
 */

export interface AdjudicationConfig {
  ledgerPath: string;
  ledger: Ledger;
  /** sha256 of the ledger file's bytes as read. */
  ledgerSha256: string;
  loaded: LoadedManifest;
  /** repository -> checkout holding the pinned commit. */
  roots: ReadonlyMap<string, string>;
  model: string;
  forceSameModel: boolean;
  capUsd: number;
  itemBudgetUsd: number;
  seed: number;
  output: string;
  image: string;
  expectedCliVersion: string;
  isolation: "standard" | "offline";
  claudeConfigDir?: string;
  loginLockTimeoutMs?: number;
  fake?: { behaviourFile?: string; recordsDir?: string };
  timeoutMs?: number;
  stdoutLimitBytes?: number;
  quiet?: boolean;
}

export interface AdjudicationDeps {
  runtime: ContainerRuntime;
  stdout: (text: string) => void;
  stderr: NodeJS.WritableStream;
  signal?: AbortSignal;
}

export interface AdjudicationSummary {
  status: AdjudicationRecord["status"];
  statusReason: string | null;
  record: string;
  ledger: string;
  adjudicatorModel: string;
  answeringModel: string;
  forcedSameModel: boolean;
  seed: number;
  items: number;
  outcomes: Record<Outcome | "undecided", number>;
  spentUsd: number;
  capUsd: number;
  cumulativeCapExceeded: boolean;
  method: "agent";
  humanReview: false;
}

/** Refuses the answering model as its own judge unless forced (decision record 001). */
export function checkAdjudicatorModel(model: string, answeringModel: string, force: boolean): string | null {
  if (model === answeringModel && !force) {
    return `the adjudicator model ${model} is the answering run's model; the adjudicator must be a different model run: set STUDY_ADJUDICATOR_MODEL to another priced model, or pass --force-same-model (it is recorded and reported)`;
  }
  return null;
}

const networkFor = (isolation: AdjudicationConfig["isolation"]): NetworkSetting => (isolation === "offline" ? { mode: "none" } : { mode: "bridge" });

async function preflight(config: AdjudicationConfig, deps: AdjudicationDeps, id: string, repositories: readonly { repository: string; pin: string }[]) {
  const sameModel = checkAdjudicatorModel(config.model, config.ledger.model, config.forceSameModel);
  if (sameModel) throw new UsageError(sameModel);
  try {
    await deps.runtime.ping();
  } catch (err) {
    throw new RefusalError(`the Docker engine is not reachable (${errorMessage(err)}); start it or set DOCKER_HOST`);
  }
  await reapOrphans(deps.runtime);
  await reapOrphanExports();
  const probed = await probeVersion(deps.runtime, config.image, { labels: runnerLabels(id, "probe") });
  if (probed.version !== config.expectedCliVersion) {
    throw new RefusalError(`image ${config.image} reports claude ${probed.version}, but ${config.expectedCliVersion} is expected (--cli-version); nothing was charged`);
  }
  const login = resolveLogin({ configDir: config.claudeConfigDir });
  const facts = await inspectLogin(login);
  if (facts.problems.length) throw new RefusalError(facts.problems.join("\n"), facts.problems);
  const problems: string[] = [];
  for (const { repository, pin } of repositories) {
    const root = config.roots.get(repository);
    if (root === undefined) problems.push(`--root ${repository}=<path> is missing, and the ledger records no checkout for it; the adjudicator reads the sources at the pin`);
    else if (!(await hasCommit(root, pin))) problems.push(`the checkout ${root} of ${repository} does not hold the pinned commit ${pin}; fetch it first`);
  }
  if (problems.length) throw new RefusalError(problems.join("\n"), problems);
  return { probed, login };
}

function emptyRun(reservationUsd: number): AdjudicatorRun {
  return {
    phase: "reserved",
    reservationUsd,
    startedAt: null,
    containerId: null,
    exportHash: null,
    model: null,
    tools: null,
    toolCalls: 0,
    toolCallsByName: {},
    inputTokens: null,
    outputTokens: null,
    cacheCreationInputTokens: null,
    cacheReadInputTokens: null,
    numTurns: null,
    cliSubtype: null,
    isError: null,
    usageComplete: false,
    cliReportedCostUsd: null,
    computedCostUsd: null,
    costBasis: null,
    setupProblems: [],
    costProblem: null,
    exitCode: null,
    timedOut: false,
    truncated: false,
    wallTimeMs: null,
    status: null,
    chargedUsd: null,
  };
}

function decided(p: PlannedItem, outcome: Outcome, reason: string, decidedBy: Item["decidedBy"], extra: Partial<Item> = {}): Item {
  return {
    observationIndex: p.observationIndex,
    task: p.task,
    scenario: p.scenario,
    repetition: p.repetition,
    itemId: p.itemId,
    position: p.position,
    outcome,
    score: OUTCOME_SCORES[outcome] as Item["score"],
    decidedBy,
    reason,
    verdict: null,
    maskedTerms: p.maskedTerms,
    run: null,
    ...extra,
  };
}

export async function runAdjudication(config: AdjudicationConfig, deps: AdjudicationDeps): Promise<number> {
  const adjudicationId = `adj-${new Date().toISOString().replace(/[:.]/g, "-")}-${randomBytes(3).toString("hex")}`;
  const plan = planAdjudication(config.ledger, config.loaded.manifest, config.seed);
  const needed = new Map<string, { repository: string; pin: string }>();
  for (const p of plan.items) if (p.prompt !== null) needed.set(`${p.repository}@${p.pin}`, { repository: p.repository, pin: p.pin });
  const { probed, login } = await preflight(config, deps, adjudicationId, [...needed.values()]);

  let budget: BudgetState = initialBudget(config.capUsd);
  const record: AdjudicationRecord = {
    schemaVersion: 1,
    kind: "adjudication",
    adjudicationId,
    createdAt: new Date().toISOString(),
    method: "agent",
    humanReview: false,
    ledger: {
      path: config.ledgerPath,
      runId: config.ledger.runId,
      protocolHash: config.ledger.protocol.protocolHash,
      sha256: config.ledgerSha256,
      status: config.ledger.status,
      mode: config.ledger.mode,
      observations: config.ledger.observations.length,
    },
    adjudicator: {
      model: config.model,
      answeringModel: config.ledger.model,
      sameModel: config.model === config.ledger.model,
      forcedSameModel: config.forceSameModel,
      transport: "cli",
      image: { ref: config.image, id: probed.imageId, binarySha256: probed.binarySha256 },
      cliVersion: probed.version,
      expectedCliVersion: config.expectedCliVersion,
      isolation: config.isolation,
    },
    order: { seed: config.seed, observationIndices: plan.order },
    masking: { replacement: MASK, terms: plan.terms.map((t) => t.label) },
    budget: { capUsd: config.capUsd, itemBudgetUsd: config.itemBudgetUsd, reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false },
    status: "running",
    items: [],
  };
  const checkouts = [...new Set([...config.roots.values(), ...config.ledger.corpus.flatMap((c) => (c.root ? [c.root] : []))])];
  const handle = await createRecord(config.output, record, { checkouts, projectRoot: PROJECT_ROOT });
  const syncBudget = (capExceeded = record.budget.cumulativeCapExceeded) => {
    record.budget = { ...record.budget, reservedUsd: budget.reservedUsd, spentUsd: budget.spentUsd + budget.reservedUsd, cumulativeCapExceeded: capExceeded };
  };
  const say = (line: string) => {
    if (!config.quiet) deps.stderr.write(`study-runner adjudicate: ${line}\n`);
  };

  let stopReason: string | null = null;
  for (const p of plan.items) {
    const tag = `[${p.position + 1}/${plan.items.length}] ${p.itemId}`;
    if (stopReason !== null) {
      record.items.push(decided(p, "blocked", `not adjudicated: ${stopReason}`, "runner"));
      continue;
    }
    if (p.decision !== null) {
      record.items.push(decided(p, p.decision.outcome, p.decision.reason, "runner"));
      await writeRecord(handle, record);
      say(`${tag}: ${p.decision.outcome} (no adjudicator run)`);
      continue;
    }
    if (deps.signal?.aborted) {
      stopReason = `interrupted by ${String(deps.signal.reason ?? "a signal")} before item ${p.position + 1}`;
      record.items.push(decided(p, "blocked", `not adjudicated: ${stopReason}`, "runner"));
      continue;
    }
    const reserved = reserve(budget, config.itemBudgetUsd);
    if (!reserved.ok) {
      stopReason = `item ${p.position + 1} refused: ${reserved.reason}`;
      record.items.push(decided(p, "blocked", `not adjudicated: ${stopReason}`, "runner"));
      continue;
    }
    budget = reserved.state;
    const item: Item = { ...decided(p, "blocked", "pending", null), outcome: null, score: null, reason: null, run: emptyRun(reserved.reservation.reservedUsd) };
    record.items.push(item);
    syncBudget();
    await writeRecord(handle, record); // before anything is spent
    say(`${tag}: started`);

    const outcome = await runItem(config, deps, { id: adjudicationId, p, item, run: item.run!, login, maxBudgetUsd: reserved.reservation.reservedUsd, handle, record });
    const run = item.run!;
    const settled = settle(budget, reserved.reservation, { status: outcome.status, reportedCostUsd: run.cliReportedCostUsd, computedCostUsd: run.computedCostUsd });
    budget = settled.state;
    Object.assign(run, { phase: "settled", status: settled.status, chargedUsd: settled.chargedUsd });
    syncBudget(record.budget.cumulativeCapExceeded || settled.cumulativeCapExceeded);

    if (settled.status !== "completed") {
      stopReason = `the adjudicator run of item ${p.position + 1} ended ${settled.status}: ${outcome.reason}`;
      Object.assign(item, { outcome: "blocked", score: null, decidedBy: "runner", reason: stopReason });
    } else {
      const reading = readVerdict(outcome.structuredOutput, outcome.resultText, p.expectedCount);
      if (reading.ok) {
        Object.assign(item, { outcome: reading.verdict.outcome, score: OUTCOME_SCORES[reading.verdict.outcome], decidedBy: "adjudicator", reason: `adjudicator verdict (from ${reading.source})`, verdict: reading.verdict });
      } else {
        // One unusable verdict says nothing about the others: this item is missing, the rest go on.
        Object.assign(item, { outcome: "blocked", score: null, decidedBy: "runner", reason: `the adjudicator's output is unusable: ${reading.problem}` });
      }
      if (settled.cumulativeCapExceeded) stopReason = `the cumulative cap of ${config.capUsd} USD was passed after item ${p.position + 1}`;
    }
    await writeRecord(handle, record); // after the outcome is known
    say(`${tag}: ${item.outcome}, charged ${run.chargedUsd} USD, spent ${record.budget.spentUsd} of ${config.capUsd} USD`);
  }
  record.status = stopReason === null ? "complete" : "blocked";
  if (stopReason !== null) record.statusReason = stopReason;
  await writeRecord(handle, record);

  deps.stdout(JSON.stringify(summarizeAdjudication(record, handle), null, 2) + "\n");
  if (record.status === "complete") return ExitCode.ok;
  if (deps.signal?.aborted) return deps.signal.reason === "SIGTERM" ? ExitCode.sigterm : ExitCode.sigint;
  return ExitCode.blocked;
}

export function summarizeAdjudication(record: AdjudicationRecord, handle: { path: string }): AdjudicationSummary {
  const outcomes: AdjudicationSummary["outcomes"] = { correct: 0, partial: 0, incorrect: 0, incomplete: 0, blocked: 0, undecided: 0 };
  for (const item of record.items) outcomes[item.outcome ?? "undecided"]++;
  return {
    status: record.status,
    statusReason: record.statusReason ?? null,
    record: handle.path,
    ledger: record.ledger.path,
    adjudicatorModel: record.adjudicator.model,
    answeringModel: record.adjudicator.answeringModel,
    forcedSameModel: record.adjudicator.forcedSameModel,
    seed: record.order.seed,
    items: record.items.length,
    outcomes,
    spentUsd: record.budget.spentUsd,
    capUsd: record.budget.capUsd,
    cumulativeCapExceeded: record.budget.cumulativeCapExceeded,
    method: "agent",
    humanReview: false,
  };
}

interface ItemContext {
  id: string;
  p: PlannedItem;
  item: Item;
  run: AdjudicatorRun;
  login: LoginLocation;
  maxBudgetUsd: number;
  handle: RecordHandle;
  record: AdjudicationRecord;
}

interface ItemOutcome {
  status: NonNullable<AdjudicatorRun["status"]>;
  reason: string;
  structuredOutput: unknown;
  resultText: string | null;
}

/** One adjudicator container; fills `ctx.run`. Every resource is released whatever happens. */
async function runItem(config: AdjudicationConfig, deps: AdjudicationDeps, ctx: ItemContext): Promise<ItemOutcome> {
  const { p, run } = ctx;
  const cleanups: Array<() => Promise<unknown>> = [];
  const label = `adjudicate-${p.position}`;
  try {
    const exported = await exportAtPin({ ...(await exportSourceFor(config.loaded, p.repository, config.roots.get(p.repository)!)), labels: { run: ctx.id, attempt: label } });
    cleanups.push(() => removeExport(exported.dir));
    run.exportHash = exported.exportHash;
    const lock = await acquireLoginLock(ctx.login, { timeoutMs: config.loginLockTimeoutMs ?? 10 * 60_000, holder: ctx.id });
    cleanups.push(() => lock.release());
    const homeParent = await mkdtemp(join(tmpdir(), `study-runner-home-${process.pid}-`));
    cleanups.push(() => removeTree(homeParent));
    const staged = await stageLogin(ctx.login, join(homeParent, "home"));

    const argv = adjudicatorArguments({ model: config.model, maxBudgetUsd: ctx.maxBudgetUsd, prompt: p.prompt! });
    const spec = attemptContainerSpec({
      image: config.image,
      argv,
      exportDir: exported.dir,
      homeDir: staged.homeDir,
      network: networkFor(config.isolation),
      labels: runnerLabels(ctx.id, label),
      attemptIndex: p.position,
      fake: config.fake,
    });
    const reader = new TranscriptReader({ arm: "repository", model: config.model, expectedTools: expectedInitTools("repository"), cliVersion: config.expectedCliVersion });
    let structuredOutput: unknown = undefined;
    let resultText: string | null = null;
    const onLine = (line: string) => {
      reader.pushLine(line);
      if (!line.includes('"result"')) return;
      try {
        const event = JSON.parse(line) as Record<string, unknown>;
        if (event?.type !== "result") return;
        // The last result wins, as in the reader; its validity is the reader's verdict.
        structuredOutput = event.structured_output;
        resultText = typeof event.result === "string" ? event.result : null;
      } catch {
        // The reader records the malformed line.
      }
    };
    run.startedAt = new Date().toISOString();
    run.phase = "running";
    await writeRecord(ctx.handle, ctx.record); // the child may spend from here on
    const raw = await runBounded(deps.runtime, spec, onLine, { timeoutMs: config.timeoutMs, stdoutLimitBytes: config.stdoutLimitBytes, signal: deps.signal });
    Object.assign(run, { containerId: raw.containerId, wallTimeMs: raw.wallTimeMs, exitCode: raw.exitCode, timedOut: raw.timedOut, truncated: raw.truncated });
    await writeBackLogin(ctx.login, staged, { lock });

    const facts = reader.finish();
    const cost = computeCost({ ...facts, model: config.model });
    Object.assign(run, {
      model: facts.initModel,
      tools: facts.initTools,
      toolCalls: facts.toolCalls,
      toolCallsByName: facts.toolCallsByName,
      ...tokenCounts(facts),
      numTurns: facts.numTurns,
      cliSubtype: facts.cliSubtype,
      isError: facts.isError,
      usageComplete: facts.usageComplete,
      cliReportedCostUsd: cost.reportedCostUsd,
      computedCostUsd: cost.computedCostUsd,
      costBasis: cost.costBasis ? { ...cost.costBasis } : null,
      setupProblems: facts.setupProblems,
      costProblem: cost.problems.length ? cost.problems.join("; ") : null,
    });
    if (deps.signal?.aborted) return { status: "failed", reason: `interrupted by ${String(deps.signal.reason ?? "a signal")}`, structuredOutput, resultText };
    const exitCode = raw.killedAfterResult ? 0 : raw.exitCode;
    const verdict = classifyAttempt({ facts, exitCode, timedOut: raw.timedOut, truncated: raw.truncated, cost });
    if (verdict.status === "invalid-setup" && run.setupProblems.length === 0) run.setupProblems = [verdict.reason];
    if (verdict.status === "invalid-cost" && run.costProblem === null) run.costProblem = verdict.reason;
    return { ...verdict, structuredOutput, resultText };
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  }
}

