import { randomBytes } from "node:crypto";
import { expectedInit } from "../claude/init-expectation.ts";
import type { Ledger } from "../ledger/schema.ts";
import type { LoadedManifest } from "../manifest/load.ts";
import { reapOrphans } from "../sandbox/reaper.ts";
import { isFakeClaudeImage } from "../image/build.ts";
import { reapOrphanExports, removeTree, RunExports, type ExportLimits } from "../export/export.ts";
import { exportSourceFor } from "../export/options.ts";
import { adjudicatorFilterOptions } from "../corpus/filter.ts";
import type { LoginLocation, LoginLock } from "../credentials/login.ts";
import type { CredentialMode } from "../terms/terms.ts";
import { lockUnitLogin, usableLogin } from "../credentials/unit-login.ts";
import type { NetworkSetting } from "../sandbox/port.ts";
import type { IsolationProfile } from "../isolation/profile.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { RefusalError, UsageError } from "../util/errors.ts";
import { reapOrphanFolders } from "../util/orphans.ts";
import { runLoop, type RunKind } from "../loop/loop.ts";
import { cliRunInput, runCliInContainer, type CliRunDeps } from "../transport/cli/run.ts";
import { probeCliImage, reachEngine } from "../transport/cli/preflight.ts";
import { dockerSandbox, type SandboxChannel } from "../sandbox/docker-sandbox.ts";
import { emptyRunFacts } from "../transport/cli/record.ts";
import { MASK } from "./mask.ts";
import { adjudicatorArguments, adjudicatorInitTools, armGuessJsonSchema } from "./prompt.ts";
import { armGuessOf } from "./blinding.ts";
import { planAdjudication, readArmGuess, readResultEvent, readVerdict, transcriptIndexOf, type Ask, type PlannedItem } from "./plan.ts";
import { OUTCOME_SCORES, type AdjudicationRecord, type AdjudicatorRun, type Item, type Outcome } from "./schema.ts";
import { createRecord, writeRecord } from "./store.ts";
import { TranscriptStore } from "../ledger/transcripts.ts";
import { gatewayForRun, gatewayUnits, type GatewayRunOptions } from "../gateway/run.ts";
import type { TestHooks } from "../transport/test-hooks.ts";

/**
 * Blind agent adjudication of one ledger (contract R87 to R93): one fresh hardened container per answer,
 * with the attempts' image, flags, export, login staging and budget rules, and structured
 * output. The ledger is only read. Like the run, an adjudicator run that does not complete
 * stops the adjudication (no retry); the items not reached are recorded blocked, never dropped.
 */

/** The gateway's options (credentials, token file, lock timings) are the study's: GatewayRunOptions. */
export interface AdjudicationConfig extends GatewayRunOptions {
  ledgerPath: string;
  ledger: Ledger;
  /** sha256 of the ledger file's bytes as read. */
  ledgerSha256: string;
  loaded: LoadedManifest;
  /** The export limits (`--max-export-files`, `--max-export-bytes`; default DEFAULT_EXPORT_LIMITS). */
  exportLimits?: ExportLimits;
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
  /** `--isolation standard|offline` (docs/adjudication.md): the strict profile is not offered for the adjudicator. */
  isolation: Exclude<IsolationProfile, "strict">;
  claudeConfigDir?: string;
  /** OCI runtime of the adjudicator's containers (the CLI's default: the ledger's); checked like the run's (docs/isolation.md, "gVisor"). */
  runtime?: string;
  /** As for a study (contract R244): the preflight's probe decides when absent. */
  sandboxChannel?: SandboxChannel;
  fake?: { behaviourFile?: string; recordsDir?: string };
  /** A Messages API on a host unix socket (the scripted API of the conformance suite); isolation must be offline. */
  modelApi?: { socketPath: string };
  timeoutMs?: number;
  /** Set by tests only, never by src/cli or src/demo. */
  testHooks?: TestHooks;
  quiet?: boolean;
}

export interface AdjudicationDeps extends CliRunDeps {
  stdout: (text: string) => void;
  stderr: NodeJS.WritableStream;
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

/** Refuses the answering model as its own judge unless forced (contract R88). */
export function checkAdjudicatorModel(model: string, answeringModel: string, force: boolean): string | null {
  if (model === answeringModel && !force) {
    return `the adjudicator model ${model} is the answering run's model; the adjudicator must be a different model run: set STUDY_ADJUDICATOR_MODEL to another priced model, or pass --force-same-model (it is recorded and reported)`;
  }
  return null;
}

const networkFor = (isolation: AdjudicationConfig["isolation"]): NetworkSetting => (isolation === "offline" ? { mode: "none" } : { mode: "bridge" });

async function preflight(config: AdjudicationConfig, deps: AdjudicationDeps, id: string, repositories: readonly { repository: string; pin: string }[], exports: RunExports) {
  const sameModel = checkAdjudicatorModel(config.model, config.ledger.model, config.forceSameModel);
  if (sameModel) throw new UsageError(sameModel);
  const engine = await reachEngine(deps.runtime, config.runtime);
  await reapOrphans(deps.runtime);
  await reapOrphanExports();
  await reapOrphanFolders("home", removeTree);
  await reapOrphanFolders("gateway", removeTree);
  const { probed, ociRuntime, channel } = await probeCliImage(deps.runtime, engine, {
    image: config.image,
    expectedCliVersion: config.expectedCliVersion,
    runtimeName: config.runtime,
    runId: id,
    route: { isolation: config.isolation, gateway: config.credentials === "gateway", modelApiSocket: config.modelApi !== undefined },
    ...(config.sandboxChannel !== undefined ? { channel: config.sandboxChannel } : {}),
  });
  const login = await usableLogin(config.claudeConfigDir);
  const problems: string[] = [];
  for (const { repository } of repositories) {
    const root = config.roots.get(repository);
    if (root === undefined) problems.push(`--root ${repository}=<path> is missing, and the ledger records no checkout for it; the adjudicator reads the sources at the pin`);
    else {
      // The grader's export, listed once with the export's own code: the pin rule and every
      // limit are checked here, before anything is reserved (contract R121, R124), and the plan is
      // the one every unit's export of this repository writes.
      try {
        await exports.plan(adjudicatorFilterOptions({ ...(await exportSourceFor(config.loaded, repository, root)), ...(config.exportLimits ? { limits: config.exportLimits } : {}) }));
      } catch (err) {
        if (!(err instanceof UsageError)) throw err;
        problems.push(...err.problems.map((p) => `the checkout ${root} of ${repository}: ${p}`));
      }
    }
  }
  if (problems.length) throw new RefusalError(problems.join("\n"), problems);
  // Only a metered run asks the engine whether the image is the fake one.
  const fakeImage = config.credentials === "gateway" && (await isFakeClaudeImage(deps.runtime, probed.imageId));
  const gateway = await gatewayForRun(config, { model: config.model, login, holder: id, limit: { usd: config.itemBudgetUsd, flag: "--item-budget-usd" }, fakeImage });
  if (!gateway) return { probed, login, ociRuntime, channel };
  // The fake claude image sends no model request: there is no metered usage to hold its transcript to.
  return { probed, login, ociRuntime, channel, gateway: gatewayUnits<Unit>(gateway, { compareUsage: !fakeImage, signal: deps.signal }), closeGateway: () => gateway.close() };
}

/** One paid question about one item: its verdict, or afterwards the separate guess of its arm. */
interface Unit {
  ask: Ask;
  p: PlannedItem;
}

function emptyRun(reservationUsd: number): AdjudicatorRun {
  return { ...emptyRunFacts(reservationUsd), exitCode: null, timedOut: false, truncated: false };
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

/**
 * The adjudication: plan the items, check everything before anything is reserved, create the
 * record, then ask each item's questions through the one loop and print the summary.
 */
export async function runAdjudication(config: AdjudicationConfig, deps: AdjudicationDeps): Promise<number> {
  const adjudicationId = `adj-${new Date().toISOString().replace(/[:.]/g, "-")}-${randomBytes(3).toString("hex")}`;
  const plan = planAdjudication(config.ledger, config.loaded.manifest, config.seed);
  const exports = new RunExports();
  const { probed, login, gateway, closeGateway, ociRuntime, channel } = await preflight(config, deps, adjudicationId, checkoutsToExport(plan.items), exports);
  const record = newRecord(config, { adjudicationId, plan, probed, ociRuntime, credentials: gateway ? "gateway" : "login-copy" });
  const checkouts = [...new Set([...config.roots.values(), ...config.ledger.corpus.flatMap((c) => (c.root ? [c.root] : []))])];
  const handle = await createRecord(config.output, record, { checkouts, projectRoot: PROJECT_ROOT });
  const say = (line: string) => {
    if (!config.quiet) deps.stderr.write(`study-runner adjudicate: ${line}\n`);
  };
  // Every item's sandbox on the channel the preflight chose (contract R244); what it made in the
  // background or ahead is gone before the run ends (contract R257).
  const sandbox = deps.sandbox ?? dockerSandbox(deps.runtime, channel);
  const a: Adjudication = {
    config,
    deps: { ...deps, sandbox },
    adjudicationId,
    record,
    login,
    ociRuntime,
    gateway,
    transcripts: await TranscriptStore.create(handle.path),
    say,
    tag: (p) => `[${p.position + 1}/${plan.items.length}] ${p.itemId}`,
    itemOf: (p) => record.items.find((i) => i.observationIndex === p.observationIndex),
    locks: new Map(),
    structured: new Map(),
    exports,
  };
  // Each item is asked twice, in this order: its verdict, and once that is recorded, in a call of
  // its own, the arm guess that measures blinding (contract R142). The verdict call hears nothing
  // of arms; the guess can change nothing in the verdict.
  const units: Unit[] = plan.items.flatMap((p) => [
    { ask: "verdict", p },
    { ask: "arm-guess", p },
  ]);
  const end = await runLoop({
    kind: adjudicatorKind(a),
    units,
    book: record,
    capUsd: config.capUsd,
    doneStatus: "complete",
    persist: () => writeRecord(handle, record),
    progress: { start: ({ ask, p }) => say(`${a.tag(p)}: ${ask === "verdict" ? "started" : "arm guess started"}`), end: () => {}, stopLive: () => {} },
    checkpoint: deps.checkpoint,
    signal: deps.signal,
  }).finally(() => Promise.all([closeGateway?.(), sandbox.settle()]));
  deps.stdout(JSON.stringify(summarizeAdjudication(record, handle), null, 2) + "\n");
  return end.exitCode;
}

/** Each repository at each pin an item's grader reads, once. */
function checkoutsToExport(items: readonly PlannedItem[]): { repository: string; pin: string }[] {
  const needed = new Map<string, { repository: string; pin: string }>();
  for (const p of items) if (p.prompt !== null) needed.set(`${p.repository}@${p.pin}`, { repository: p.repository, pin: p.pin });
  return [...needed.values()];
}

/** The record as created: the ledger it grades, the adjudicator, the order and masking, an empty budget and no item yet. */
function newRecord(
  config: AdjudicationConfig,
  o: {
    adjudicationId: string;
    plan: ReturnType<typeof planAdjudication>;
    probed: { imageId: string; binarySha256: string; version: string };
    ociRuntime: AdjudicationRecord["adjudicator"]["runtime"];
    credentials: CredentialMode;
  },
): AdjudicationRecord {
  return {
    schemaVersion: 1,
    kind: "adjudication",
    adjudicationId: o.adjudicationId,
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
      image: { ref: config.image, id: o.probed.imageId, binarySha256: o.probed.binarySha256 },
      cliVersion: o.probed.version,
      expectedCliVersion: config.expectedCliVersion,
      isolation: config.isolation,
      runtime: o.ociRuntime,
      credentials: o.credentials,
    },
    order: { seed: config.seed, observationIndices: o.plan.order },
    masking: { replacement: MASK, terms: o.plan.terms.map((t) => t.label) },
    budget: { capUsd: config.capUsd, itemBudgetUsd: config.itemBudgetUsd, reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false },
    status: "running",
    items: [],
  };
}

/** What the steps of one adjudication share once its record exists. */
interface Adjudication {
  config: AdjudicationConfig;
  deps: AdjudicationDeps;
  adjudicationId: string;
  record: AdjudicationRecord;
  login: LoginLocation;
  ociRuntime: AdjudicationRecord["adjudicator"]["runtime"];
  /** The gateway's half of each unit when the run goes through it. */
  gateway: Awaited<ReturnType<typeof preflight>>["gateway"];
  transcripts: TranscriptStore;
  say: (line: string) => void;
  /** `[3/12] item-id`, the start of every progress line of an item. */
  tag: (p: PlannedItem) => string;
  itemOf: (p: PlannedItem) => Item | undefined;
  /** Login-copy: each unit's hold on the login, from its acquire until its login is written back. */
  locks: Map<Unit, LoginLock>;
  /** Each unit's structured output and result text, read from its stream as it arrives. */
  structured: Map<Unit, { structuredOutput: unknown; resultText: string | null }>;
  /** The adjudication's export plans, made by its preflight: every unit's export is written from its repository's. */
  exports: RunExports;
}

/** The adjudicator's run kind for the one loop: what each unit records, runs and settles. */
function adjudicatorKind(a: Adjudication): RunKind<Unit, AdjudicatorRun> {
  const { config, record } = a;
  return {
    noun: "item",
    number: ({ p }) => p.position + 1,
    name: ({ ask, p }) => (ask === "verdict" ? `item ${p.position + 1}` : `the arm guess of item ${p.position + 1}`),
    describe: ({ ask, p }) => (ask === "verdict" ? `the adjudicator run of item ${p.position + 1}` : `the arm-guess run of item ${p.position + 1}`),
    limitUsd: config.itemBudgetUsd,
    recordWithoutRun({ ask, p }) {
      if (ask === "arm-guess") {
        // Only a verdict on record is followed by its guess.
        const item = a.itemOf(p);
        return item === undefined || item.decidedBy !== "adjudicator" || item.verdict === null;
      }
      if (p.decision === null) return false;
      record.items.push(decided(p, p.decision.outcome, p.decision.reason, "runner"));
      a.say(`${a.tag(p)}: ${p.decision.outcome} (no adjudicator run)`);
      return true;
    },
    // As for attempts: the login before the reservation, held until the login is written back.
    async acquire(u) {
      if (a.gateway) return a.gateway.acquire(u);
      const lock = await lockUnitLogin(a.login, { timeoutMs: config.loginLockTimeoutMs, staleMs: config.loginLockStaleMs, holder: a.adjudicationId, signal: a.deps.signal, note: a.say });
      a.locks.set(u, lock);
      return { release: () => (a.locks.delete(u), lock.release()) };
    },
    open({ ask, p }, reservationUsd) {
      if (ask === "arm-guess") {
        const item = a.itemOf(p)!;
        item.armGuess = armGuessOf(null, p.arm, emptyRun(reservationUsd));
        return item.armGuess.run;
      }
      const item: Item = { ...decided(p, "blocked", "pending", null), outcome: null, score: null, reason: null, run: emptyRun(reservationUsd) };
      record.items.push(item);
      return item.run!;
    },
    runOne: (u, ctx) => runUnit(a, u, ctx),
    settled: (u, run, stopReason) => settleUnit(a, u, run, stopReason),
    notReached({ ask, p }, stopReason) {
      // An item whose verdict is recorded keeps it; only its guess is not asked.
      if (ask === "verdict") record.items.push(decided(p, "blocked", `not adjudicated: ${stopReason}`, "runner"));
    },
  };
}

/** One question in its own hardened container: the grader's export of the item's repository, its prompt, its structured output read as it streams. */
async function runUnit(a: Adjudication, u: Unit, ctx: Parameters<RunKind<Unit, AdjudicatorRun>["runOne"]>[1]) {
  const { config } = a;
  const { ask, p } = u;
  const out = { structuredOutput: undefined as unknown, resultText: null as string | null };
  a.structured.set(u, out);
  const unit = `adjudicate-${p.position}${ask === "arm-guess" ? "-guess" : ""}`;
  const result = await runCliInContainer(
    a.deps,
    cliRunInput(
      config,
      { run: a.adjudicationId, unit, attemptIndex: p.position, imageId: a.record.adjudicator.image.id, runtimeName: a.ociRuntime, last: ctx.last },
      {
        // The grader's working folder holds no instruction file the CLI would load (contract: the corpus may not steer the grader).
        export: adjudicatorFilterOptions({
          ...(await exportSourceFor(config.loaded, p.repository, config.roots.get(p.repository)!)),
          ...(config.exportLimits ? { limits: config.exportLimits } : {}),
          labels: { run: a.adjudicationId, attempt: unit },
        }),
        exports: a.exports,
        login: a.login,
        lock: a.locks.get(u),
        // What this item may still spend under the cap: the loop's, from its own budget.
        gateway: a.gateway?.input(u, ctx.reservation!.reservedUsd, ctx.remainingUsd),
        argv:
          ask === "verdict"
            ? adjudicatorArguments({ model: config.model, maxBudgetUsd: ctx.reservation!.reservedUsd, prompt: p.prompt! })
            : adjudicatorArguments({ model: config.model, maxBudgetUsd: ctx.reservation!.reservedUsd, prompt: p.guessPrompt!, jsonSchema: armGuessJsonSchema() }),
        arm: "repository",
        expectedTools: adjudicatorInitTools(),
        expectedInit: expectedInit("adjudicator", { model: config.model }),
        network: networkFor(config.isolation),
        // The adjudicator's CLI looks up no name, as a study attempt's (contract R281).
        noNames: true,
        onLine: (line) => readResultEvent(line, out),
        transcripts: { store: a.transcripts, index: transcriptIndexOf(ask, p.observationIndex, config.ledger.observations.length) },
      },
    ),
    ctx.entry,
    ctx.persist,
  );
  if (result.gateway) ctx.entry.gateway = result.gateway;
  return { status: result.status, reason: result.reason, reportedCostUsd: ctx.entry.cliReportedCostUsd, computedCostUsd: ctx.entry.computedCostUsd };
}

/** A settled question: the item's outcome from its verdict, or its arm guess; a run that did not complete blocks the item. */
function settleUnit(a: Adjudication, u: Unit, run: AdjudicatorRun, stopReason: string | null): void {
  const { ask, p } = u;
  const item = a.itemOf(p)!;
  const out = a.structured.get(u);
  a.structured.delete(u);
  const spent = `charged ${run.chargedUsd} USD, spent ${a.record.budget.spentUsd} of ${a.config.capUsd} USD`;
  if (ask === "arm-guess") {
    // A guess changes nothing in the item's outcome; a run that did not complete stops the adjudication like any other.
    const reading = run.status === "completed" ? readArmGuess(out?.structuredOutput, out?.resultText ?? null) : { ok: false as const, problem: stopReason ?? `the arm-guess run ended ${run.status}` };
    item.armGuess = reading.ok ? armGuessOf(reading.guess, p.arm, run) : armGuessOf(null, p.arm, run, `no guess: ${reading.problem}`);
    a.say(`${a.tag(p)}: arm guess ${reading.ok ? "recorded" : "missing"}, ${spent}`);
    return;
  }
  if (run.status !== "completed") {
    Object.assign(item, { outcome: "blocked", score: null, decidedBy: "runner", reason: stopReason });
  } else {
    const reading = readVerdict(out?.structuredOutput, out?.resultText ?? null, p.expectedCount);
    if (reading.ok) {
      Object.assign(item, {
        outcome: reading.verdict.outcome,
        score: OUTCOME_SCORES[reading.verdict.outcome],
        decidedBy: "adjudicator",
        reason: `adjudicator verdict (from ${reading.source})`,
        verdict: reading.verdict,
      });
    } else {
      // One unusable verdict says nothing about the others: this item is missing, the rest go on.
      Object.assign(item, { outcome: "blocked", score: null, decidedBy: "runner", reason: `the adjudicator's output is unusable: ${reading.problem}` });
    }
  }
  a.say(`${a.tag(p)}: ${item.outcome}, ${spent}`);
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
