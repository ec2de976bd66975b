import { readdir, readFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { attemptInitKind, expectedInit, type ExpectedInit } from "../claude/init-expectation.ts";
import { planAdjudication, readArmGuess, readResultEvent, readVerdict, transcriptIndexOf, type AdjudicationPlan } from "../adjudicate/plan.ts";
import { checkBinding } from "../adjudicate/binding.ts";
import { loadLedgerManifest, readLedgerInput } from "../adjudicate/input.ts";
import { readRecord } from "../adjudicate/store.ts";
import type { AdjudicationRecord } from "../adjudicate/schema.ts";
import { adjudicatorInitTools } from "../adjudicate/prompt.ts";
import { initialBudget, reserve, settle } from "../budget/budget.ts";
import { pico } from "../cost/money.ts";
import { gatewayBudgetRefusal, interpretRun, runReader } from "../transport/cli/interpret.ts";
import type { TranscriptFacts } from "../transcript/reader.ts";
import { contentDigest, transcriptMessages } from "../transcript/content.ts";
import { observationExtras } from "../study/observation.ts";
import { STDOUT_LIMIT_BYTES } from "../terms/limits.ts";
import type { Arm } from "../terms/terms.ts";
import type { Observation, RunFacts } from "../ledger/schema.ts";
import { LEDGER_MODE, readLedger } from "../ledger/store.ts";
import { verifyExportHashes } from "./export-hash.ts";
import { readEvidenceFile, readTranscriptFile, sessionCallTranscript, sha256Hex, transcriptDir, transcriptFile, transcriptLines, transcriptNames } from "../ledger/transcripts.ts";
import { SESSION_INIT_TOOLS } from "../session/args.ts";
import { callShareUsd } from "../session/money.ts";
import { SessionManifestSchema } from "../session/schema.ts";
import { readSessionLedger } from "../session/store.ts";
import type { Ledger } from "../ledger/schema.ts";
import { parseManifest } from "../manifest/load.ts";
import { planStudy } from "../plan/plan.ts";
import { collectEvidence, compareEvidence, merkleRoot, settledPrefix, settledStateDigest, type Evidence } from "../ledger/evidence.ts";
import { errorMessage, RefusalError, UsageError } from "../util/errors.ts";
import { CLAUDE_CODE_VERSION } from "../claude/version.ts";
import { readProfileFile, requireProfile, useProfile, type FoundProfile } from "../profile/load.ts";
import { ADJUDICATION_RECORD_INVARIANTS, applyInvariants, SESSION_LEDGER_INVARIANTS, STUDY_LEDGER_INVARIANTS } from "./invariants.ts";

/**
 * `study-runner ledger verify`: every stored transcript read again with the runner's own
 * interpretation of a run (src/transport/cli/interpret.ts, the same function the container stage
 * applies) and settled again, then compared with the ledger field by field, and every
 * transcript's sha256 checked. It never writes. Differences name the entry and the field; they
 * never quote an answer, a verdict or a tool input (all private).
 *
 * What the transcript cannot tell is taken from the record as given: the container's exit code,
 * timeout and output-bound flags, the doc-bridge server's and the gateway's own records (setup
 * problems that begin with "doc-bridge record:" or "gateway:", and the gateway's refusals), since
 * those come from the engine, the bridge and the gateway, not from stdout. A CLI that the runner killed after its result event, or an OOM or full-HOME ending, is
 * not told apart from the exit code alone, so such an entry may differ in its status.
 */

export interface VerifyResult {
  path: string;
  observations: number;
  verified: number;
  differences: string[];
}

/** The shared run fields recomputed from a transcript, for an observation and an adjudicator run alike. */
const RUN_FIELDS = [
  "model",
  "tools",
  "toolCalls",
  "toolCallsByName",
  "inputTokens",
  "outputTokens",
  "cacheCreationInputTokens",
  "cacheReadInputTokens",
  "numTurns",
  "cliSubtype",
  "isError",
  "usageComplete",
  "cliReportedCostUsd",
  "computedCostUsd",
  "costBasis",
  "setupProblems",
  "costProblem",
] as const satisfies ReadonlyArray<keyof RunFacts>;

/** What only an observation records of its transcript; `answer` is compared but never shown. */
const OBSERVATION_FIELDS = ["mcpServers", "permissionDenials", "toolErrorsByName", "answer"] as const satisfies ReadonlyArray<keyof Observation>;

const PRIVATE_FIELDS: ReadonlySet<string> = new Set(["answer"]);

const show = (v: unknown) => (typeof v === "string" ? JSON.stringify(v.length > 120 ? `${v.slice(0, 120)}…` : v) : JSON.stringify(v));

function differ(where: string, field: string, ledger: unknown, recomputed: unknown): string {
  if (PRIVATE_FIELDS.has(field)) return `${where}.${field}: the ledger's value differs from the transcript's (not shown: private)`;
  return `${where}.${field}: ledger ${show(ledger)}, transcript gives ${show(recomputed)}`;
}

type StoredRun = RunFacts & { exitCode?: number | null; timedOut?: boolean; truncated?: boolean; gateway?: Parameters<typeof gatewayBudgetRefusal>[0] };

/** Setup problems found outside the transcript (the bridge's and the gateway's own records): taken as recorded. */
const OUTSIDE_PROBLEMS = ["doc-bridge record: ", "gateway: "];

/**
 * A kept transcript read with the evidence reader (contract R183), its mode and its hash against
 * the one recorded: its lines, or null with the difference named when it is missing or is not a
 * regular file within the transcript bound (a folder, a FIFO, a link...).
 */
async function keptTranscript(privateFile: string, index: number | string, o: { where: string; noun: string; sha256: string }, differences: string[]): Promise<string[] | null> {
  const file = await readTranscriptFile(privateFile, index);
  if (file.kind !== "file") {
    differences.push(`${o.where}.transcriptSha256: the transcript ${file.path} ${file.kind === "missing" ? "is missing" : file.problem}`);
    return null;
  }
  if (file.mode !== LEDGER_MODE) differences.push(`${o.where}: the transcript ${file.path} has mode ${file.mode.toString(8)}, not 600`);
  const hash = sha256Hex(file.bytes);
  if (hash !== o.sha256) differences.push(`${o.where}.transcriptSha256: ${o.noun} ${o.sha256}, the stored transcript hashes to ${hash} (edited, truncated or swapped)`);
  return transcriptLines(file.bytes);
}

/**
 * One stored run against its transcript: the file's mode and hash, then (when settled) every
 * recomputed field, the status and the charge. Returns the transcript's lines when it was read.
 */
async function checkRun(
  o: {
    privateFile: string;
    /** What the private file is called in a difference: "ledger" or "record". */
    noun: "ledger" | "record";
    index: number;
    where: string;
    run: StoredRun;
    arm: Arm;
    expectedTools?: readonly string[];
    /** The measured init of this kind of run. */
    init: ExpectedInit;
    model: string;
    cliVersion: string | undefined;
    capUsd: number;
  },
  differences: string[],
  extraFields: (facts: TranscriptFacts) => Record<string, unknown> = () => ({}),
): Promise<{ lines: readonly string[]; verified: boolean } | null> {
  const { where, run } = o;
  if (run.transcriptSha256 === undefined) {
    differences.push(`${where}.transcriptSha256: absent; no transcript is recorded for this run, so it cannot be verified`);
    return null;
  }
  const lines = await keptTranscript(o.privateFile, o.index, { where, noun: o.noun, sha256: run.transcriptSha256 }, differences);
  if (lines === null) return null;
  differences.push(...gatewayRecordProblems(where, run.gateway, lines, (run.truncated ?? false) || (run.timedOut ?? false)));
  if (run.phase !== "settled") return { lines, verified: false };

  const reader = runReader(o.arm, o.model, o.cliVersion, o.init, o.expectedTools);
  for (const line of lines) reader.pushLine(line);
  const facts = reader.finish();
  facts.setupProblems.push(...run.setupProblems.filter((p) => OUTSIDE_PROBLEMS.some((prefix) => p.startsWith(prefix))));
  const again = interpretRun(facts, o.model, {
    exitCode: run.exitCode ?? null,
    timedOut: run.timedOut ?? false,
    truncated: run.truncated ?? false,
    stdoutLimitBytes: STDOUT_LIMIT_BYTES,
    refusedByHost: gatewayBudgetRefusal(run.gateway),
  });
  const fields: Record<string, unknown> = { ...pick(again.fields, RUN_FIELDS), ...extraFields(facts) };
  for (const [field, recomputed] of Object.entries(fields)) {
    const recorded = (run as Record<string, unknown>)[field];
    if (!isDeepStrictEqual(recomputed, recorded)) differences.push(differ(where, field, recorded, recomputed));
  }
  // The reservation alone in a budget: settle's charge depends only on it and the outcome.
  const settled = settle(
    { capUsd: Math.max(o.capUsd, run.reservationUsd), spentUsd: 0, reservedUsd: run.reservationUsd },
    { reservedUsd: run.reservationUsd },
    {
      status: again.status,
      reportedCostUsd: again.cost.reportedCostUsd,
      computedCostUsd: again.cost.computedCostUsd,
    },
  );
  if (settled.status !== run.status) differences.push(differ(where, "status", run.status, settled.status));
  if (run.chargedUsd === null || pico(settled.chargedUsd) !== pico(run.chargedUsd)) differences.push(differ(where, "chargedUsd", run.chargedUsd, settled.chargedUsd));
  return { lines, verified: true };
}

/**
 * Every gateway request record of a run (contract R157) against the messages of its transcript: a
 * request the gateway forwarded and got a message for must name a message of the transcript, from
 * the same model, with the same prompt usage, and (contract R176) the same content: the digest of
 * the reply's text and tool calls as the gateway relayed them must be the digest of what the
 * transcript keeps of that message. A record the transcript does not bear out was edited or
 * belongs to another run; a message whose content differs was rewritten. A transcript the runner
 * cut short (at its output bound or its time limit: `cutShort`) may end inside a message, so its
 * content is not compared.
 */
export function gatewayRecordProblems(where: string, gateway: StoredRun["gateway"], lines: readonly string[], cutShort = false): string[] {
  if (!gateway || gateway.requests.length === 0) return [];
  const messages = transcriptMessages(lines);
  const out: string[] = [];
  for (const r of gateway.requests) {
    if (r.messageId === null || r.refused !== null) continue;
    const at = `${where}.gateway.requests[${r.seq}]`;
    const m = messages.get(r.messageId);
    if (!m) {
      out.push(`${at}.messageId: names a message that is not in the transcript (a fabricated or foreign gateway record)`);
      continue;
    }
    if (r.model !== m.model) out.push(`${at}.model: gateway ${show(r.model)}, the transcript's message gives ${show(m.model)}`);
    const write = r.cacheWrite5mInputTokens === null || r.cacheWrite1hInputTokens === null ? null : r.cacheWrite5mInputTokens + r.cacheWrite1hInputTokens;
    const pairs: Array<[string, number | null, unknown]> = [
      ["inputTokens", r.inputTokens, m.usage.input_tokens],
      ["cacheReadInputTokens", r.cacheReadInputTokens, m.usage.cache_read_input_tokens],
      ["cacheWrite5mInputTokens + cacheWrite1hInputTokens", write, m.usage.cache_creation_input_tokens],
    ];
    for (const [field, gatewayValue, transcriptValue] of pairs) {
      if (gatewayValue !== (transcriptValue ?? null)) out.push(`${at}.${field}: gateway ${show(gatewayValue)}, the transcript's message gives ${show(transcriptValue ?? null)}`);
    }
    if (typeof r.contentSha256 === "string" && r.complete && !cutShort && contentDigest(m.blocks) !== r.contentSha256) {
      out.push(
        `${at}.contentSha256: the transcript's assistant message ${show(r.messageId)} (message ${m.ordinal + 1} of the transcript) holds text or tool calls other than the reply the gateway relayed (rewritten; not shown: private)`,
      );
    }
  }
  return out;
}

/**
 * The transcripts folder holds exactly the files its entries name (contract R156): a file no
 * entry names is an orphan (an entry removed from the record, or a file put there).
 */
async function orphanProblems(privateFile: string, expected: ReadonlySet<string>): Promise<string[]> {
  const dir = transcriptDir(privateFile);
  const listed = await transcriptNames(privateFile);
  return [
    ...listed.problems.map((p) => `transcripts: ${p}`),
    ...listed.names.filter((n) => !expected.has(n)).map((n) => `transcripts: ${dir}/${n} belongs to no entry of the record (an orphan: its entry was removed, or the file was added)`),
  ];
}

const fileName = (path: string) => path.slice(path.lastIndexOf("/") + 1);

/** Where `ledger verify` finds the manifest: `--manifest`, else the path the ledger records. */
export interface VerifyOptions {
  manifest?: string;
  /** A calibration profile file to verify with instead of the one found for the ledger's CLI version (`--profile`). */
  profile?: string;
}

/**
 * The profile a ledger is verified with, made the active one (contract R221): `--profile FILE`, else
 * the one found for its CLI version (bundled or calibrated on this machine). A ledger that records
 * its profile's sha256 is verified only with that profile: another one is refused naming both
 * hashes. A ledger from before profiles existed is verified with the one found.
 */
export function useLedgerProfile(ledger: Pick<Ledger, "expectedCliVersion" | "profileSha256">, profileFile?: string): FoundProfile {
  const version = ledger.expectedCliVersion ?? CLAUDE_CODE_VERSION;
  const found: FoundProfile = profileFile !== undefined ? { profile: readProfileFile(profileFile, version), source: "given", path: profileFile } : requireProfile(version);
  if (ledger.profileSha256 !== undefined && found.profile.sha256 !== ledger.profileSha256) {
    throw new RefusalError(
      `the ledger was run with the calibration profile sha256 ${ledger.profileSha256}, but ${found.path} (${found.source}) has sha256 ${found.profile.sha256}: a ledger is verified only with the profile it was run with; pass that profile with --profile FILE`,
    );
  }
  useProfile(found);
  return found;
}

/**
 * The protocol and the plan re-derived from the manifest's bytes (contract R154, R155): the bytes
 * must hash to the recorded protocol hash, and the observations must be exactly the first
 * attempts of the plan those bytes imply in the ledger's mode, in order; a run that awaits
 * adjudication holds all of them.
 */
async function protocolProblems(ledger: Ledger, options: VerifyOptions): Promise<string[]> {
  const manifestPath = options.manifest ?? ledger.protocol.manifestPath;
  let bytes: Buffer;
  try {
    bytes = await readFile(manifestPath);
  } catch (err) {
    return [`protocol.manifestPath: cannot read the manifest ${manifestPath} (${(err as NodeJS.ErrnoException).code ?? String(err)}); give the manifest the run was given with --manifest PATH`];
  }
  const hash = sha256Hex(bytes);
  if (hash !== ledger.protocol.protocolHash) {
    return [
      `protocol.protocolHash: ledger ${ledger.protocol.protocolHash}, the manifest ${manifestPath} hashes to ${hash} (the hash was edited, or the manifest is not the one the run was given: give that one with --manifest PATH)`,
    ];
  }
  let plan: ReturnType<typeof planStudy>;
  try {
    plan = planStudy(parseManifest(bytes, manifestPath).manifest, ledger.mode);
  } catch (err) {
    return [`protocol.manifestPath: the manifest ${manifestPath} hashes to the protocol hash but no longer plans: ${err instanceof Error ? err.message.split("\n")[0] : String(err)}`];
  }
  const out: string[] = [];
  const repositories = new Map(ledger.corpus.map((c) => [c.repository, c.pin]));
  const manifestRepos = new Map(plan.map((a) => [a.repository, a.pin]));
  for (const [repo, pin] of manifestRepos)
    if (repositories.get(repo) !== pin) out.push(`corpus: ${repo} at ${pin} is what the manifest pins, the ledger records ${repositories.get(repo) ?? "nothing"}`);
  if (ledger.observations.length > plan.length) out.push(`observations: ${ledger.observations.length}, but the ${ledger.mode} plan has ${plan.length} attempts`);
  const FIELDS = [
    ["task", "taskId"],
    ["scenario", "scenario"],
    ["arm", "arm"],
    ["repository", "repository"],
    ["pin", "pin"],
    ["repetition", "repetition"],
  ] as const;
  for (const [i, o] of ledger.observations.entries()) {
    const planned = plan[i];
    if (!planned) break;
    const wrong = FIELDS.filter(([mine, theirs]) => o[mine] !== planned[theirs]).map(([mine]) => mine);
    if (wrong.length) {
      out.push(
        `observations[${i}]: ${wrong.join(", ")} ${wrong.length === 1 ? "differs" : "differ"} from the plan's attempt ${i} (${planned.taskId}, ${planned.scenario}, repetition ${planned.repetition}); the observations must be the plan's first attempts in order`,
      );
    }
  }
  if (ledger.status === "awaiting-adjudication" && ledger.observations.length !== plan.length) {
    out.push(`status: awaiting-adjudication with ${ledger.observations.length} of the ${ledger.mode} plan's ${plan.length} attempts; a run that was not blocked ran every planned attempt`);
  }
  return out;
}

export async function verifyLedger(path: string, options: VerifyOptions = {}): Promise<VerifyResult> {
  const ledger = await readLedger(path);
  if (ledger.transport === "cli") useLedgerProfile(ledger, options.profile);
  // What the file alone proves (the list `ledger check` applies), then what the evidence proves.
  // The export hash is recomputed from each observation's pin (contract R118), beside the protocol and plan.
  const differences: string[] = [...applyInvariants(STUDY_LEDGER_INVARIANTS, ledger), ...(await protocolProblems(ledger, options)), ...(await verifyExportHashes(ledger, options.manifest))];
  let verified = 0;
  if (ledger.transport !== "cli") {
    differences.push(`transport: ${ledger.transport}; only the cli transport keeps stream-json transcripts that can be verified`);
    return { path, observations: ledger.observations.length, verified, differences };
  }
  const expected = new Set(ledger.observations.filter((o) => o.transcriptSha256 !== undefined || o.phase !== "reserved").map((o) => fileName(transcriptFile(path, o.index))));
  differences.push(...(await orphanProblems(path, expected)));
  const seen = new Map<string, number>();
  for (const o of ledger.observations) {
    if (o.phase === "reserved") continue; // nothing ran: no transcript is expected
    const where = `observations[${o.index}] (${o.task}, ${o.scenario}, repetition ${o.repetition})`;
    const checked = await checkRun(
      {
        privateFile: path,
        noun: "ledger",
        index: o.index,
        where,
        run: o,
        arm: o.arm,
        init: expectedInit(attemptInitKind(o.arm), { model: ledger.model }),
        model: ledger.model,
        cliVersion: ledger.expectedCliVersion ?? undefined,
        capUsd: ledger.budget.capUsd,
      },
      differences,
      (facts) => pick(observationExtras(facts), OBSERVATION_FIELDS),
    );
    if (!checked) continue;
    const hash = o.transcriptSha256!;
    const twin = seen.get(hash);
    if (twin !== undefined) differences.push(`${where}: its transcript has the same bytes as observation ${twin}'s`);
    seen.set(hash, o.index);
    if (checked.verified) verified++;
  }
  return { path, observations: ledger.observations.length, verified, differences };
}

/** Where `ledger verify --adjudication` finds the ledger the record is bound to, and its manifest. */
export interface RecordOf {
  ledger: string;
  manifest?: string;
}

/**
 * The adjudication record's runs, read again the same way from `<record>.transcripts/`: the run
 * facts, status and charge, and an adjudicator verdict read again from the transcript's last
 * result. The record is first held to its ledger with the check `report` applies (contract R93),
 * and every item the runner decided is derived again (contract R180): from the ledger (the plan
 * the adjudication made of its observations), from the transcript of a run that did not complete
 * or whose output the rules find unusable, or from the stop the record names. The verdict's text
 * is never shown.
 */
export async function verifyRecord(path: string, of: RecordOf): Promise<VerifyResult> {
  const record = await readRecord(path);
  const input = await readLedgerInput(of.ledger);
  const differences: string[] = [...applyInvariants(ADJUDICATION_RECORD_INVARIANTS, record), ...checkBinding(input.ledger, input.sha256, record).map((p) => `ledger: ${p}`)];
  let verified = 0;
  // Each verdict call's transcript, and each arm-guess call's at its own index after them.
  const armGuessIndex = (item: AdjudicationRecord["items"][number]) => transcriptIndexOf("arm-guess", item.observationIndex, record.ledger.observations);
  const kept = (run: { transcriptSha256?: string; phase: string } | null | undefined) => run != null && (run.transcriptSha256 !== undefined || run.phase !== "reserved");
  const expected = new Set([
    ...record.items.filter((i) => kept(i.run)).map((i) => fileName(transcriptFile(path, i.observationIndex))),
    ...record.items.filter((i) => kept(i.armGuess?.run)).map((i) => fileName(transcriptFile(path, armGuessIndex(i)))),
  ]);
  differences.push(...(await orphanProblems(path, expected)));
  const plan = await adjudicationPlan(input.ledger, record, of.manifest, differences);
  for (const item of record.items) {
    const where = `items[${item.position}] (observation ${item.observationIndex})`;
    const result = await checkAdjudicatorCall(path, record, { run: item.run, index: item.observationIndex, where: `${where}.run` }, differences);
    differences.push(...decisionProblems(record, plan, item, result, where));
    if (result === null) continue;
    if (item.decidedBy === "adjudicator" && item.verdict) {
      const reading = readVerdict(result.structuredOutput, result.resultText, item.verdict.propositions.length);
      if (!reading.ok || !isDeepStrictEqual(reading.verdict, item.verdict))
        differences.push(`${where}.verdict: the record's verdict differs from the one the transcript's result gives (not shown: private)`);
    }
    verified++;
  }
  // The arm-guess calls, asked after the verdicts: their runs and guesses read again the same way.
  for (const item of record.items) {
    const run = item.armGuess?.run;
    const where = `items[${item.position}] (observation ${item.observationIndex})`;
    const result = await checkAdjudicatorCall(path, record, { run, index: armGuessIndex(item), where: `${where}.armGuess.run` }, differences);
    if (result === null) continue;
    const reading = run!.status === "completed" ? readArmGuess(result.structuredOutput, result.resultText) : null;
    const again = reading?.ok ? reading.guess : null;
    if (again !== item.armGuess!.guess) differences.push(differ(`${where}.armGuess`, "guess", item.armGuess!.guess, again));
  }
  return { path, observations: record.items.length, verified, differences };
}

/**
 * The adjudication's plan made again from the ledger and its manifest with the record's seed (the
 * same pure function `adjudicate` runs): what the runner decides without a model run, and the
 * order. Null, with a difference, when the manifest the run used cannot be read.
 */
async function adjudicationPlan(ledger: Ledger, record: AdjudicationRecord, manifestPath: string | undefined, differences: string[]): Promise<AdjudicationPlan | null> {
  let manifest;
  try {
    manifest = (await loadLedgerManifest(ledger, manifestPath)).manifest;
  } catch (err) {
    differences.push(`items: the runner's decisions cannot be derived again without the manifest the run used (${errorMessage(err)}); give it with --manifest PATH`);
    return null;
  }
  const plan = planAdjudication(ledger, manifest, record.order.seed);
  if (!isDeepStrictEqual(plan.order, record.order.observationIndices))
    differences.push(`order.observationIndices: not the order seed ${record.order.seed} gives the ledger's ${ledger.observations.length} observations`);
  return plan;
}

/** What the runner writes for an item the adjudication did not reach because it stopped. */
const NOT_REACHED = "not adjudicated: ";

/**
 * An item's outcome against what decided it (contract R180). The runner decides an item itself
 * only (a) when the plan says so from the ledger (an attempt that did not complete, no answer, a
 * truncated answer, a task the manifest lacks, a prompt too long): no run, the plan's outcome and
 * reason; (b) when the item's adjudicator run did not complete: blocked; (c) when that run
 * completed but its output is unusable by the rules (readVerdict): blocked with that problem;
 * (d) when the adjudication stopped before the item: blocked, naming the stop, on every later
 * item too, with the stop borne out by the record (a run that did not complete, or a cap the
 * next reservation does not fit under; a signal and the login lock are taken as recorded). Any
 * other runner decision is named; an adjudicator decision is checked against its verdict.
 */
function decisionProblems(
  record: AdjudicationRecord,
  plan: AdjudicationPlan | null,
  item: AdjudicationRecord["items"][number],
  result: { structuredOutput: unknown; resultText: string | null } | null,
  where: string,
): string[] {
  if (item.outcome === null || item.decidedBy !== "runner") return [];
  const planned = plan?.items.find((p) => p.observationIndex === item.observationIndex);
  if (item.run === null && item.reason?.startsWith(NOT_REACHED)) return notReachedProblems(record, item, where);
  if (item.run === null) {
    if (plan === null) return [];
    if (planned?.decision == null)
      return [
        `${where}.decidedBy: the record says the runner decided ${item.outcome} without an adjudicator run, but the ledger gives this observation an answer to grade (completed, not truncated, not empty); only a verdict decides it`,
      ];
    if (planned.decision.outcome !== item.outcome || planned.decision.reason !== item.reason)
      return [`${where}.outcome: the record says ${item.outcome}, the ledger gives ${planned.decision.outcome} for the runner to decide, with another reason (not shown: private)`];
    return [];
  }
  if (planned && planned.decision !== null)
    return [`${where}.run: the ledger gives this observation to the runner to decide (${planned.decision.outcome}), but the record holds an adjudicator run for it`];
  if (item.outcome !== "blocked") return [`${where}.outcome: the record says ${item.outcome}, but the runner decides an item whose adjudicator run it holds only as blocked`];
  // (b) the run did not complete: its status is read again from the transcript by checkRun.
  // (c) needs the number of propositions the plan's task expects; without the manifest a difference is already named.
  if (item.run.status !== "completed" || result === null || planned === undefined) return [];
  const reading = readVerdict(result.structuredOutput, result.resultText, planned.expectedCount);
  if (reading.ok)
    return [
      `${where}.decidedBy: the record says the runner decided ${item.outcome}, but the transcript's result gives a usable verdict (not shown: private); the runner decides only a run that did not complete or whose output is unusable`,
    ];
  if (item.reason !== `the adjudicator's output is unusable: ${reading.problem}`) return [`${where}.reason: is not the problem the rules find in the transcript's result (not shown: private)`];
  return [];
}

/** (d) of decisionProblems: an item not reached because the adjudication stopped, and that stop. */
function notReachedProblems(record: AdjudicationRecord, item: AdjudicationRecord["items"][number], where: string): string[] {
  const stop = record.statusReason;
  if (record.status !== "blocked" || stop === undefined || item.reason !== `${NOT_REACHED}${stop}`)
    return [`${where}.reason: the record says the adjudication stopped before this item, but it is ${record.status}${stop ? " with another reason" : ""}; only a stop leaves an item not adjudicated`];
  const later = record.items.slice(item.position + 1).filter((i) => i.run !== null || !i.reason?.startsWith(NOT_REACHED));
  if (later.length) return [`${where}: the record says the adjudication stopped before this item, but items[${later[0]!.position}] after it was decided afterwards`];
  const first = record.items.findIndex((i) => i.run === null && i.reason?.startsWith(NOT_REACHED));
  if (first !== item.position) return [];
  // The stop itself, once: the last run before it did not complete, or the next reservation does not fit under the cap.
  const runs = record.items.slice(0, first).flatMap((i) => [i.run, i.armGuess?.run].filter((r) => r != null));
  const last = runs.at(-1);
  if (last !== undefined && last.status !== "completed") return [];
  if (stop.includes(" refused: ")) {
    const fits = reserve(initialBudget(record.budget.capUsd, Math.min(record.budget.spentUsd, record.budget.capUsd)), record.budget.itemBudgetUsd).ok;
    return fits
      ? [
          `statusReason: names a refused reservation, but the item budget of ${record.budget.itemBudgetUsd} USD fits under the cap of ${record.budget.capUsd} USD with ${record.budget.spentUsd} USD spent`,
        ]
      : [];
  }
  // A signal or the login lock leaves nothing in the files to bear it out: taken as recorded.
  if (stop.startsWith("interrupted by ") || stop.includes(" not started, nothing reserved: ")) return [];
  return [`statusReason: the adjudication stopped before items[${first}], but no run before it failed and no reservation was refused; the stop is not borne out by the record`];
}

/**
 * One adjudicator call (a verdict or an arm guess) of the record against its transcript, as the
 * adjudicator's runs are checked: its result event when the run is settled and verified, null when
 * it was never run (or only reserved) or could not be verified.
 */
async function checkAdjudicatorCall(
  path: string,
  record: AdjudicationRecord,
  call: { run: StoredRun | null | undefined; index: number; where: string },
  differences: string[],
): Promise<{ structuredOutput: unknown; resultText: string | null } | null> {
  const { run } = call;
  if (run == null || run.phase === "reserved") return null;
  const checked = await checkRun(
    {
      privateFile: path,
      noun: "record",
      index: call.index,
      where: call.where,
      run,
      arm: "repository",
      expectedTools: adjudicatorInitTools(),
      init: expectedInit("adjudicator", { model: record.adjudicator.model }),
      model: record.adjudicator.model,
      cliVersion: record.adjudicator.expectedCliVersion,
      capUsd: record.budget.capUsd,
    },
    differences,
  );
  if (!checked?.verified) return null;
  const out = { structuredOutput: undefined as unknown, resultText: null as string | null };
  for (const line of checked.lines) readResultEvent(line, out);
  return out;
}

function pick<T extends object, K extends keyof T>(o: T, keys: readonly K[]): Record<string, unknown> {
  return Object.fromEntries(keys.map((k) => [k, o[k]]));
}

/**
 * `ledger verify --digest HEX` (contract R177): finds the settled state a digest the run printed
 * was taken of, by recomputing every state's digest from the files now (the ledger's entries and
 * each transcript's bytes). A match says through which observation the files are as they were
 * and names the first observation settled since; no match is a difference: something the digest
 * covered was changed after it was printed (or it is another run's digest).
 */
export async function verifyDigest(path: string, digest: string): Promise<{ differences: string[]; note: string | null }> {
  if (!/^[0-9a-f]{64}$/.test(digest))
    throw new UsageError(`--digest ${show(digest.slice(0, 80))} is not 64 lowercase hex characters; give a digest the run printed ("evidence digest after observation N settled: HEX")`);
  const ledger = await readLedger(path);
  const settled = settledPrefix(ledger.observations);
  const hashes: Array<string | undefined> = [];
  for (let i = 0; i < settled; i++) {
    const file = await readTranscriptFile(path, i);
    hashes.push(file.kind === "file" ? sha256Hex(file.bytes) : undefined);
  }
  for (let n = settled; n >= 0; n--) {
    if (settledStateDigest(ledger, n, (i) => hashes[i]) !== digest) continue;
    if (n === ledger.observations.length) return { differences: [], note: `digest: the files are the settled state the digest was printed for (all ${n} observations); nothing changed since` };
    return {
      differences: [],
      note: `digest: the files are as they were when observations 0 to ${n - 1} had settled; they differ since observation ${n}, which ${ledger.observations[n]!.phase === "settled" ? "settled" : "was reserved"} after the digest was printed`,
    };
  }
  return {
    differences: [
      `digest: ${digest} is the digest of no settled state of these files (0 to ${settled} observations): an observation it covered, its transcript, or the run's id or protocol hash changed after it was printed, or it is another run's digest`,
    ],
    note: null,
  };
}

/**
 * `ledger verify --report REPORT.json` (contract R159): the private files now against the
 * evidence digest the published report committed to. Names every file that changed, went
 * missing or was added, and every file that cannot be read as evidence; the manifest is the one
 * `--manifest` names or the ledger records. A report made with an adjudication record, verified
 * without `--adjudication`, is held to the record it names: the file beside the ledger whose
 * bytes hash to the record's committed sha256, else the one record of this run there (contract
 * R185); with none, one line says it was not given and how to give it.
 */
export async function verifyAgainstReport(
  reportPath: string,
  sources: { ledger: string; manifest?: string; adjudication?: string },
): Promise<{ differences: string[]; root: string; files: number; adjudication: string | null }> {
  let published: Evidence | undefined;
  try {
    published = (JSON.parse(await readFile(reportPath, "utf8")) as { evidence?: Evidence }).evidence;
  } catch (err) {
    throw new UsageError(`cannot read the report ${reportPath} (${(err as NodeJS.ErrnoException).code ?? "not JSON"}); give the report.json the run's report wrote`);
  }
  if (!published || typeof published.root !== "string" || !Array.isArray(published.files)) {
    return { differences: [`${reportPath} carries no evidence digest (a report made before reports committed to their files, or not a report.json)`], root: "", files: 0, adjudication: null };
  }
  const names = new Set(published.files.map((f) => f.name));
  const differences: string[] = [];
  const ledger = await readLedger(sources.ledger);
  let adjudication = sources.adjudication ?? null;
  const committed = published.files.find((f) => f.name === "adjudication");
  if (committed && adjudication === null) {
    adjudication = await recordBesideLedger(sources.ledger, committed.sha256, ledger.runId);
    if (adjudication === null)
      differences.push(
        `adjudication: the report was made with an adjudication record, which was not given, and no record of run ${ledger.runId} is beside the ledger; give it with --adjudication PATH (its transcripts are not compared without it)`,
      );
  }
  const now = await collectEvidence({
    ledger: sources.ledger,
    manifest: names.has("manifest") || sources.manifest ? (sources.manifest ?? ledger.protocol.manifestPath) : null,
    adjudication,
  });
  differences.push(...now.problems.map((p) => `evidence: ${p}`));
  const selfConsistent = merkleRoot(published.files) === published.root;
  if (!selfConsistent) differences.push(`evidence.root: ${published.root} is not the root of the report's own file list; the report was edited`);
  // Without a record, its files are the one line above, not one "not there now" each.
  const files = compareEvidence(published, now.evidence).filter((d) => adjudication !== null || !d.startsWith("adjudication"));
  differences.push(...(selfConsistent ? files : files.filter((d) => !d.startsWith("evidence.root"))));
  return { differences, root: published.root, files: now.evidence.files.length, adjudication };
}

/**
 * The adjudication record beside the ledger that a report names: the `.json` file there whose
 * bytes hash to the sha256 the report committed to, else the one adjudication record of this run
 * there (it changed since; the comparison names it). Each candidate is read with the evidence
 * reader (a regular file, no link followed). Null when there is none, or more than one.
 */
async function recordBesideLedger(ledgerPath: string, sha256: string, runId: string): Promise<string | null> {
  const dir = dirname(resolve(ledgerPath));
  const self = resolve(ledgerPath);
  const names = await readdir(dir).catch(() => [] as string[]);
  const ofRun: string[] = [];
  for (const name of names.filter((n) => n.endsWith(".json")).sort()) {
    const path = join(dir, name);
    if (path === self) continue;
    const read = await readEvidenceFile(path, { maxBytes: Number.MAX_SAFE_INTEGER });
    if (read.kind !== "file") continue;
    if (sha256Hex(read.bytes) === sha256) return path;
    try {
      const json = JSON.parse(read.bytes.toString("utf8")) as { kind?: unknown; ledger?: { runId?: unknown } };
      if (json?.kind === "adjudication" && json.ledger?.runId === runId) ofRun.push(path);
    } catch {
      // Not JSON: not a record.
    }
  }
  return ofRun.length === 1 ? ofRun[0]! : null;
}

/** Setup problems a session call records from outside its own transcript's facts: taken as recorded. */
const SESSION_OUTSIDE_PROBLEMS = [...OUTSIDE_PROBLEMS, "the result's session_id ", "the gateway metered "];

/**
 * A session ledger (contract R162): its invariants, its manifest found by the recorded sha256,
 * and every call's kept transcript read again in order with the runner's rules. Each call's
 * facts are recomputed with the earlier calls' messages (the CLI's modelUsage after a resume
 * covers the whole session), and its share of the cumulative cost is derived again from the
 * session's previous result. The status is judged by the invariants (a session's own reading of
 * its structured result is not repeated here).
 */
export async function verifySessionLedger(path: string, options: VerifyOptions = {}): Promise<VerifyResult> {
  const l = await readSessionLedger(path);
  const differences = applyInvariants(SESSION_LEDGER_INVARIANTS, l);
  const manifestPath = options.manifest ?? l.manifestPath;
  const manifestBytes = await readFile(manifestPath).catch(() => null);
  if (manifestBytes === null) differences.push(`manifestPath: cannot read the session manifest ${manifestPath}; give it with --manifest PATH`);
  else if (sha256Hex(manifestBytes) !== l.manifestSha256) differences.push(`manifestSha256: ledger ${l.manifestSha256}, the manifest ${manifestPath} hashes to ${sha256Hex(manifestBytes)}`);
  else {
    const manifest = SessionManifestSchema.safeParse(JSON.parse(manifestBytes.toString("utf8")));
    if (manifest.success) {
      for (const [i, s] of l.sessions.entries()) {
        const task = manifest.data.tasks.find((t) => t.id === s.taskId);
        if (!task || task.repository !== s.repository) differences.push(`sessions[${i}].taskId: '${s.taskId}' is not a task of the manifest on ${s.repository}`);
      }
    }
  }
  const expected = new Set<string>();
  for (const [i, s] of l.sessions.entries()) for (const c of s.calls) if (c.transcriptSha256 !== undefined) expected.add(`${sessionCallTranscript(i, c.index)}.jsonl`);
  differences.push(...(await orphanProblems(path, expected)));
  let verified = 0;
  let calls = 0;
  for (const [i, s] of l.sessions.entries()) {
    const prior: Array<{ messageId: string; inputTokens: number; cacheReadInputTokens: number; cacheCreationInputTokens: number }> = [];
    let lastTotal = 0;
    let lastComputed = 0;
    for (const c of s.calls) {
      calls++;
      const where = `sessions[${i}].calls[${c.index}]`;
      if (c.transcriptSha256 === undefined) {
        if (c.phase !== "reserved") differences.push(`${where}.transcriptSha256: absent; no transcript is kept for this call, so it cannot be verified`);
        continue;
      }
      const lines = await keptTranscript(path, sessionCallTranscript(i, c.index), { where, noun: "ledger", sha256: c.transcriptSha256 }, differences);
      if (lines === null) continue;
      // A call's gateway records (--credentials gateway) answer to its transcript like an attempt's (contract R157).
      differences.push(...gatewayRecordProblems(where, c.gateway ?? undefined, lines));
      if (c.phase !== "settled" || c.statusReason?.startsWith("the runner stopped during this call")) continue;
      const init = expectedInit(c.mode === "resume" ? "session-resume" : "session-start", { model: l.model, sessionId: s.id });
      const reader = runReader("repository", l.model, l.expectedCliVersion, init, SESSION_INIT_TOOLS);
      for (const line of lines) reader.pushLine(line);
      const facts = reader.finish();
      facts.setupProblems.push(...c.setupProblems.filter((p) => OUTSIDE_PROBLEMS.some((prefix) => p.startsWith(prefix))));
      const again = interpretRun(facts, l.model, {
        exitCode: c.exitCode,
        timedOut: c.timedOut ?? false,
        truncated: c.truncated ?? false,
        stdoutLimitBytes: STDOUT_LIMIT_BYTES,
        priorMessageUsage: prior,
      });
      const fields = pick(again.fields, RUN_FIELDS);
      fields.setupProblems = (again.fields.setupProblems ?? []).filter((p: string) => !SESSION_OUTSIDE_PROBLEMS.slice(OUTSIDE_PROBLEMS.length).some((x) => p.startsWith(x)));
      const recorded: Record<string, unknown> = { ...c, setupProblems: c.setupProblems.filter((p) => !SESSION_OUTSIDE_PROBLEMS.slice(OUTSIDE_PROBLEMS.length).some((x) => p.startsWith(x))) };
      for (const [field, value] of Object.entries(fields)) if (!isDeepStrictEqual(value, recorded[field])) differences.push(differ(where, field, recorded[field], value));
      // As the run derived them: the cumulative figures of this call's facts, less the previous result's.
      const total = again.fields.cliReportedCostUsd ?? null;
      const computed = again.fields.computedCostUsd ?? null;
      const share = callShareUsd(total, lastTotal);
      const computedShare = callShareUsd(computed, lastComputed);
      if (share !== c.callCostUsd) differences.push(differ(where, "callCostUsd", c.callCostUsd, share));
      if (computedShare !== c.callComputedCostUsd) differences.push(differ(where, "callComputedCostUsd", c.callComputedCostUsd, computedShare));
      if (total !== null) lastTotal = total;
      if (computed !== null) lastComputed = computed;
      if (again.status === "completed") prior.push(...facts.perMessageUsage);
      verified++;
    }
  }
  return { path, observations: calls, verified, differences };
}
