import { isDeepStrictEqual } from "node:util";
import { readArmGuess, readResultEvent, readVerdict, transcriptIndexOf } from "../adjudicate/plan.ts";
import { readRecord } from "../adjudicate/store.ts";
import { adjudicatorInitTools } from "../adjudicate/prompt.ts";
import { settle } from "../budget/budget.ts";
import { gatewayBudgetRefusal, interpretRun, runReader } from "../cli-attempt/interpret.ts";
import type { TranscriptFacts } from "../transcript/reader.ts";
import { observationExtras } from "../study/observation.ts";
import { STDOUT_LIMIT_BYTES } from "../terms/limits.ts";
import type { Arm } from "../terms/terms.ts";
import type { Observation, RunFacts } from "../ledger/schema.ts";
import { LEDGER_MODE, readLedger } from "../ledger/store.ts";
import { readTranscriptFile, sha256Hex, transcriptFile, transcriptLines } from "../ledger/transcripts.ts";

/**
 * `study-runner ledger verify`: every stored transcript read again with the runner's own
 * interpretation of a run (src/cli-attempt/interpret.ts, the same function the container stage
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
  const file = await readTranscriptFile(o.privateFile, o.index);
  if (file === null) {
    differences.push(`${where}.transcriptSha256: the transcript ${transcriptFile(o.privateFile, o.index)} is missing`);
    return null;
  }
  if (file.mode !== LEDGER_MODE) differences.push(`${where}: the transcript ${file.path} has mode ${file.mode.toString(8)}, not 600`);
  const hash = sha256Hex(file.bytes);
  if (hash !== run.transcriptSha256) differences.push(`${where}.transcriptSha256: ${o.noun} ${run.transcriptSha256}, the stored transcript hashes to ${hash} (edited, truncated or swapped)`);
  const lines = transcriptLines(file.bytes);
  if (run.phase !== "settled") return { lines, verified: false };

  const reader = runReader(o.arm, o.model, o.cliVersion, o.expectedTools);
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
  if (run.chargedUsd === null || Math.abs(settled.chargedUsd - run.chargedUsd) > 1e-12) differences.push(differ(where, "chargedUsd", run.chargedUsd, settled.chargedUsd));
  return { lines, verified: true };
}

export async function verifyLedger(path: string): Promise<VerifyResult> {
  const ledger = await readLedger(path);
  const differences: string[] = [];
  let verified = 0;
  if (ledger.transport !== "cli") {
    differences.push(`transport: ${ledger.transport}; only the cli transport keeps stream-json transcripts that can be verified`);
    return { path, observations: ledger.observations.length, verified, differences };
  }
  const seen = new Map<string, number>();
  for (const o of ledger.observations) {
    if (o.phase === "reserved") continue; // nothing ran: no transcript is expected
    const where = `observations[${o.index}] (${o.task}, ${o.scenario}, repetition ${o.repetition})`;
    const checked = await checkRun(
      { privateFile: path, noun: "ledger", index: o.index, where, run: o, arm: o.arm, model: ledger.model, cliVersion: ledger.expectedCliVersion ?? undefined, capUsd: ledger.budget.capUsd },
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

/**
 * The adjudication record's runs, read again the same way from `<record>.transcripts/`: the run
 * facts, status and charge, and an adjudicator verdict read again from the transcript's last
 * result. The verdict's text is never shown.
 */
export async function verifyRecord(path: string): Promise<VerifyResult> {
  const record = await readRecord(path);
  const differences: string[] = [];
  let verified = 0;
  for (const item of record.items) {
    const run = item.run;
    if (run === null || run.phase === "reserved") continue;
    const where = `items[${item.position}] (observation ${item.observationIndex}).run`;
    const checked = await checkRun(
      {
        privateFile: path,
        noun: "record",
        index: item.observationIndex,
        where,
        run,
        arm: "repository",
        expectedTools: adjudicatorInitTools(),
        model: record.adjudicator.model,
        cliVersion: record.adjudicator.expectedCliVersion,
        capUsd: record.budget.capUsd,
      },
      differences,
    );
    if (!checked?.verified) continue;
    if (item.decidedBy === "adjudicator" && item.verdict) {
      const out = { structuredOutput: undefined as unknown, resultText: null as string | null };
      for (const line of checked.lines) readResultEvent(line, out);
      const reading = readVerdict(out.structuredOutput, out.resultText, item.verdict.propositions.length);
      if (!reading.ok || !isDeepStrictEqual(reading.verdict, item.verdict))
        differences.push(`items[${item.position}] (observation ${item.observationIndex}).verdict: the record's verdict differs from the one the transcript's result gives (not shown: private)`);
    }
    verified++;
  }
  // The arm-guess calls, asked after the verdicts: their runs and guesses read again the same way.
  for (const item of record.items) {
    const run = item.armGuess?.run;
    if (run === undefined || run.phase === "reserved") continue;
    const where = `items[${item.position}] (observation ${item.observationIndex}).armGuess.run`;
    const checked = await checkRun(
      {
        privateFile: path,
        noun: "record",
        index: transcriptIndexOf("arm-guess", item.observationIndex, record.ledger.observations),
        where,
        run,
        arm: "repository",
        expectedTools: adjudicatorInitTools(),
        model: record.adjudicator.model,
        cliVersion: record.adjudicator.expectedCliVersion,
        capUsd: record.budget.capUsd,
      },
      differences,
    );
    if (!checked?.verified) continue;
    const out = { structuredOutput: undefined as unknown, resultText: null as string | null };
    for (const line of checked.lines) readResultEvent(line, out);
    const reading = run.status === "completed" ? readArmGuess(out.structuredOutput, out.resultText) : null;
    const again = reading?.ok ? reading.guess : null;
    if (again !== item.armGuess!.guess) differences.push(differ(`items[${item.position}] (observation ${item.observationIndex}).armGuess`, "guess", item.armGuess!.guess, again));
  }
  return { path, observations: record.items.length, verified, differences };
}

function pick<T extends object, K extends keyof T>(o: T, keys: readonly K[]): Record<string, unknown> {
  return Object.fromEntries(keys.map((k) => [k, o[k]]));
}
