import { isDeepStrictEqual } from "node:util";
import { readVerdict } from "../adjudicate/plan.ts";
import type { AdjudicatorRun } from "../adjudicate/schema.ts";
import { readRecord } from "../adjudicate/store.ts";
import { settle } from "../budget/budget.ts";
import { expectedInitTools } from "../claude/args.ts";
import { computeCost } from "../cost/compute.ts";
import { factsToObservation, tokenCounts } from "../study/observation.ts";
import { classifyAttempt } from "../transcript/classify.ts";
import { TranscriptReader } from "../transcript/reader.ts";
import type { Ledger, Observation } from "./schema.ts";
import { readLedger } from "./store.ts";
import { LEDGER_MODE } from "./store.ts";
import { readTranscriptFile, sha256Hex, transcriptFile, transcriptLines } from "./transcripts.ts";

/**
 * `study-runner ledger verify`: every stored transcript read again with the runner's own rules
 * (TranscriptReader, computeCost, classifyAttempt, settle) and compared with the ledger field by
 * field, and every transcript's sha256 checked. It never writes. Differences name the
 * observation and the field; they never quote an answer or a tool input (both are private).
 *
 * What the transcript cannot tell is taken from the ledger as given: the container's exit code,
 * timeout and output-bound flags, and the doc-bridge server's own record (setup problems that
 * begin with "doc-bridge record:"), since those come from the engine and the bridge, not from
 * stdout.
 */

export interface VerifyResult {
  path: string;
  observations: number;
  verified: number;
  differences: string[];
}

/** Fields recomputed from the transcript; `answer` is compared but its values are never shown. */
const FACT_FIELDS = [
  "inputTokens",
  "outputTokens",
  "cacheCreationInputTokens",
  "cacheReadInputTokens",
  "model",
  "tools",
  "mcpServers",
  "toolCallsByName",
  "toolCalls",
  "permissionDenials",
  "numTurns",
  "cliSubtype",
  "isError",
  "usageComplete",
  "toolErrorsByName",
  "cliReportedCostUsd",
  "computedCostUsd",
  "costBasis",
  "setupProblems",
  "costProblem",
  "answer",
] as const satisfies ReadonlyArray<keyof Observation>;

const PRIVATE_FIELDS: ReadonlySet<string> = new Set(["answer"]);

const show = (v: unknown) => (typeof v === "string" ? JSON.stringify(v.length > 120 ? `${v.slice(0, 120)}…` : v) : JSON.stringify(v));

function differ(where: string, field: string, ledger: unknown, recomputed: unknown): string {
  if (PRIVATE_FIELDS.has(field)) return `${where}.${field}: the ledger's value differs from the transcript's (not shown: private)`;
  return `${where}.${field}: ledger ${show(ledger)}, transcript gives ${show(recomputed)}`;
}

/** The runner's recomputation of one settled cli observation from its transcript lines. */
export function recompute(ledger: Ledger, o: Observation, lines: readonly string[]) {
  const reader = new TranscriptReader({ arm: o.arm, model: ledger.model, expectedTools: expectedInitTools(o.arm), cliVersion: ledger.expectedCliVersion ?? undefined });
  for (const line of lines) reader.pushLine(line);
  const facts = reader.finish();
  facts.setupProblems.push(...o.setupProblems.filter((p) => p.startsWith("doc-bridge record: ")));
  const cost = computeCost({ ...facts, model: ledger.model });
  const fields = factsToObservation(facts, cost);
  const verdict = classifyAttempt({ facts, exitCode: o.exitCode ?? null, timedOut: o.timedOut ?? false, truncated: o.truncated ?? false, cost });
  if (verdict.status === "invalid-setup" && (fields.setupProblems ?? []).length === 0) fields.setupProblems = [verdict.reason];
  if (verdict.status === "invalid-cost" && fields.costProblem === null) fields.costProblem = verdict.reason;
  // The reservation alone in a budget: settle's charge depends only on it and the outcome.
  const settled = settle({ capUsd: Math.max(ledger.budget.capUsd, o.reservationUsd), spentUsd: 0, reservedUsd: o.reservationUsd }, { reservedUsd: o.reservationUsd }, {
    status: verdict.status,
    reportedCostUsd: cost.reportedCostUsd,
    computedCostUsd: cost.computedCostUsd,
  });
  return { fields, status: settled.status, chargedUsd: settled.chargedUsd };
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
    const where = `observations[${o.index}] (${o.task}, ${o.scenario}, repetition ${o.repetition})`;
    if (o.phase === "reserved") continue; // nothing ran: no transcript is expected
    if (o.transcriptSha256 === undefined) {
      differences.push(`${where}.transcriptSha256: absent; the ledger records no transcript for this attempt, so it cannot be verified`);
      continue;
    }
    const file = await readTranscriptFile(path, o.index);
    if (file === null) {
      differences.push(`${where}.transcriptSha256: the transcript ${transcriptFile(path, o.index)} is missing`);
      continue;
    }
    if (file.mode !== LEDGER_MODE) differences.push(`${where}: the transcript ${file.path} has mode ${file.mode.toString(8)}, not 600`);
    const hash = sha256Hex(file.bytes);
    if (hash !== o.transcriptSha256) differences.push(`${where}.transcriptSha256: ledger ${o.transcriptSha256}, the stored transcript hashes to ${hash} (edited, truncated or swapped)`);
    const twin = seen.get(hash);
    if (twin !== undefined) differences.push(`${where}: its transcript has the same bytes as observation ${twin}'s`);
    seen.set(hash, o.index);
    if (o.phase !== "settled") continue;
    const again = recompute(ledger, o, transcriptLines(file.bytes));
    for (const field of FACT_FIELDS) {
      if (!isDeepStrictEqual(again.fields[field], o[field])) differences.push(differ(where, field, o[field], again.fields[field]));
    }
    if (again.status !== o.status) differences.push(differ(where, "status", o.status, again.status));
    if (o.chargedUsd === null || Math.abs(again.chargedUsd - o.chargedUsd) > 1e-12) differences.push(differ(where, "chargedUsd", o.chargedUsd, again.chargedUsd));
    verified++;
  }
  return { path, observations: ledger.observations.length, verified, differences };
}

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
] as const satisfies ReadonlyArray<keyof AdjudicatorRun>;

/**
 * The adjudication record's runs, read again the same way from `<record>.transcripts/`: the run
 * facts, status and charge, and an adjudicator verdict read again from the transcript's last
 * result. The verdict's text is never shown.
 */
export async function verifyRecord(path: string): Promise<VerifyResult> {
  const record = await readRecord(path);
  const differences: string[] = [];
  let verified = 0;
  const model = record.adjudicator.model;
  for (const item of record.items) {
    const run = item.run;
    const where = `items[${item.position}] (observation ${item.observationIndex})`;
    if (run === null || run.phase === "reserved") continue;
    if (run.transcriptSha256 === undefined) {
      differences.push(`${where}.run.transcriptSha256: absent; the record keeps no transcript for this run, so it cannot be verified`);
      continue;
    }
    const file = await readTranscriptFile(path, item.observationIndex);
    if (file === null) {
      differences.push(`${where}.run.transcriptSha256: the transcript ${transcriptFile(path, item.observationIndex)} is missing`);
      continue;
    }
    if (file.mode !== LEDGER_MODE) differences.push(`${where}: the transcript ${file.path} has mode ${file.mode.toString(8)}, not 600`);
    const hash = sha256Hex(file.bytes);
    if (hash !== run.transcriptSha256) differences.push(`${where}.run.transcriptSha256: record ${run.transcriptSha256}, the stored transcript hashes to ${hash} (edited, truncated or swapped)`);
    if (run.phase !== "settled") continue;
    const lines = transcriptLines(file.bytes);
    const reader = new TranscriptReader({ arm: "repository", model, expectedTools: expectedInitTools("repository"), cliVersion: record.adjudicator.expectedCliVersion });
    let structuredOutput: unknown;
    let resultText: string | null = null;
    for (const line of lines) {
      reader.pushLine(line);
      try {
        const event = JSON.parse(line) as Record<string, unknown>;
        if (event?.type === "result") {
          structuredOutput = event.structured_output;
          resultText = typeof event.result === "string" ? event.result : null;
        }
      } catch {
        // The reader records the malformed line.
      }
    }
    const facts = reader.finish();
    const cost = computeCost({ ...facts, model });
    const again: Partial<AdjudicatorRun> = {
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
    };
    const verdict = classifyAttempt({ facts, exitCode: run.exitCode, timedOut: run.timedOut, truncated: run.truncated, cost });
    if (verdict.status === "invalid-setup" && again.setupProblems!.length === 0) again.setupProblems = [verdict.reason];
    if (verdict.status === "invalid-cost" && again.costProblem === null) again.costProblem = verdict.reason;
    for (const field of RUN_FIELDS) if (!isDeepStrictEqual(again[field], run[field])) differences.push(differ(`${where}.run`, field, run[field], again[field]));
    const settled = settle({ capUsd: Math.max(record.budget.capUsd, run.reservationUsd), spentUsd: 0, reservedUsd: run.reservationUsd }, { reservedUsd: run.reservationUsd }, {
      status: verdict.status,
      reportedCostUsd: cost.reportedCostUsd,
      computedCostUsd: cost.computedCostUsd,
    });
    if (settled.status !== run.status) differences.push(differ(`${where}.run`, "status", run.status, settled.status));
    if (run.chargedUsd === null || Math.abs(settled.chargedUsd - run.chargedUsd) > 1e-12) differences.push(differ(`${where}.run`, "chargedUsd", run.chargedUsd, settled.chargedUsd));
    if (item.decidedBy === "adjudicator" && item.verdict) {
      const reading = readVerdict(structuredOutput, resultText, item.verdict.propositions.length);
      if (!reading.ok || !isDeepStrictEqual(reading.verdict, item.verdict)) differences.push(`${where}.verdict: the record's verdict differs from the one the transcript's result gives (not shown: private)`);
    }
    verified++;
  }
  return { path, observations: record.items.length, verified, differences };
}
