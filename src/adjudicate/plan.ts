import type { Ledger, Observation } from "../ledger/schema.ts";
import type { Manifest, Task } from "../manifest/schema.ts";
import { formatIssues } from "../util/zod-errors.ts";
import { maskTerms, maskText, type MaskTerm } from "./mask.ts";
import { buildAdjudicatorPrompt, buildArmGuessPrompt, checkAdjudicatorPrompt, itemIdFor, shuffledOrder } from "./prompt.ts";
import { ArmGuessAnswerSchema, VerdictSchema, type ArmGuess, type Outcome, type Verdict } from "./schema.ts";

/**
 * What happens to each observation, decided before anything is spent (pure). An attempt that did
 * not complete is blocked (missing) with its reason; an empty or truncated answer is incomplete;
 * every other answer gets a masked prompt for its own adjudicator run. Nothing is dropped.
 */

export interface PlannedItem {
  observationIndex: number;
  task: string;
  scenario: string;
  repetition: number;
  repository: string;
  pin: string;
  /** The observation's arm: only to score the adjudicator's guess of it, never shown. */
  arm: Observation["arm"];
  itemId: string;
  position: number;
  /** Set when the runner decides without a model run. */
  decision: { outcome: Extract<Outcome, "blocked" | "incomplete">; reason: string } | null;
  /** The adjudicator's verdict prompt, when a model run is needed. */
  prompt: string | null;
  /** The arm-guess prompt, asked in its own call once the verdict is recorded; null with `prompt`. */
  guessPrompt: string | null;
  maskedTerms: Record<string, number>;
  expectedCount: number;
}

export interface AdjudicationPlan {
  seed: number;
  order: number[];
  terms: MaskTerm[];
  items: PlannedItem[];
}

function attemptDetail(o: Observation): string {
  if (o.setupProblems.length) return `: ${o.setupProblems[0]}`;
  if (o.costProblem) return `: ${o.costProblem}`;
  if (o.timedOut) return ": it reached its time limit";
  if (o.truncated) return ": its output was cut at the bound";
  if (o.cliSubtype && o.cliSubtype !== "success") return `: result subtype ${o.cliSubtype}`;
  if (o.exitCode !== undefined && o.exitCode !== null && o.exitCode !== 0) return `: exit code ${o.exitCode}`;
  return "";
}

function decide(o: Observation, task: Task | undefined): PlannedItem["decision"] {
  if (o.status === null) return { outcome: "blocked", reason: `the attempt was never settled (phase ${o.phase}); there is no answer to grade` };
  if (o.status !== "completed") return { outcome: "blocked", reason: `the attempt ended ${o.status}${attemptDetail(o)}; there is no answer to grade` };
  if (task === undefined) return { outcome: "blocked", reason: `task ${o.task} is not in the manifest; its question and expected propositions are unknown` };
  if (o.truncated === true) return { outcome: "incomplete", reason: "the answer was truncated (the attempt's output was cut at the bound)" };
  if (o.answer === null || o.answer.trim() === "") return { outcome: "incomplete", reason: "the answer is empty" };
  return null;
}

export function planAdjudication(ledger: Ledger, manifest: Manifest, seed: number): AdjudicationPlan {
  const terms = maskTerms(ledger, manifest.scenarios);
  const order = shuffledOrder(ledger.observations.length, seed);
  const tasks = new Map(manifest.tasks.map((t) => [t.id, t]));
  const items = order.map((index, position): PlannedItem => {
    const o = ledger.observations[index]!;
    const task = tasks.get(o.task);
    const itemId = itemIdFor(ledger.runId, index);
    const base = {
      observationIndex: index,
      task: o.task,
      scenario: o.scenario,
      repetition: o.repetition,
      repository: o.repository,
      pin: o.pin,
      arm: o.arm,
      itemId,
      position,
      expectedCount: task?.expected.length ?? 0,
    };
    const decision = decide(o, task);
    if (decision !== null) return { ...base, decision, prompt: null, guessPrompt: null, maskedTerms: {} };
    const masked = maskText(o.answer!, terms);
    const prompt = buildAdjudicatorPrompt({ itemId, task: task!, maskedAnswer: masked.text });
    const guessPrompt = buildArmGuessPrompt({ itemId, task: task!, maskedAnswer: masked.text });
    const tooLong = checkAdjudicatorPrompt(prompt) ?? checkAdjudicatorPrompt(guessPrompt);
    if (tooLong)
      return { ...base, decision: { outcome: "blocked", reason: `${tooLong}; the answer cannot be shown to the adjudicator whole` }, prompt: null, guessPrompt: null, maskedTerms: masked.counts };
    return { ...base, decision: null, prompt, guessPrompt, maskedTerms: masked.counts };
  });
  return { seed, order, terms, items };
}

/**
 * What the adjudicator answered in a call with a JSON schema: `structured_output` of the result
 * event, else the JSON text of `result`, which holds the same JSON as text (contract R90).
 */
function structuredAnswer(structuredOutput: unknown, resultText: string | null): { ok: true; candidate: unknown; source: "structured_output" | "result" } | { ok: false; problem: string } {
  if (structuredOutput !== undefined && structuredOutput !== null) return { ok: true, candidate: structuredOutput, source: "structured_output" };
  if (resultText === null) return { ok: false, problem: "the result has neither structured_output nor a result text" };
  try {
    return { ok: true, candidate: JSON.parse(resultText), source: "result" };
  } catch {
    // JSON.parse's message quotes the input, which is the adjudicator's private text.
    return { ok: false, problem: "the result has no structured_output and its result text is not JSON" };
  }
}

export type VerdictReading = { ok: true; verdict: Verdict; source: "structured_output" | "result" } | { ok: false; problem: string };

/**
 * The adjudicator's verdict: `structured_output` of the result event, else the JSON text of
 * `result`, which holds the same JSON as text (contract R90). It must match the verdict schema, grade each proposition P1..Pn exactly once, and
 * agree with the rubric: "correct" needs every proposition supported and no contradiction,
 * "partial" needs at least one supported or partial.
 */
export function readVerdict(structuredOutput: unknown, resultText: string | null, expectedCount: number): VerdictReading {
  const answer = structuredAnswer(structuredOutput, resultText);
  if (!answer.ok) return answer;
  const { candidate, source } = answer;
  const parsed = VerdictSchema.safeParse(candidate);
  if (!parsed.success) return { ok: false, problem: `the ${source} does not match the verdict schema: ${formatIssues(parsed.error.issues).slice(0, 5).join("; ")}` };
  const v = parsed.data;
  const ids = v.propositions.map((p) => p.id);
  const expected = Array.from({ length: expectedCount }, (_, i) => `P${i + 1}`);
  const missing = expected.filter((id) => !ids.includes(id));
  const extra = ids.filter((id) => !expected.includes(id));
  const twice = ids.filter((id, i) => ids.indexOf(id) !== i);
  if (missing.length || extra.length || twice.length) {
    const parts = [missing.length ? `missing ${missing.join(", ")}` : "", extra.length ? `unknown ${extra.join(", ")}` : "", twice.length ? `repeated ${twice.join(", ")}` : ""].filter(Boolean);
    return { ok: false, problem: `the verdict must grade ${expected.join(", ")} once each: ${parts.join("; ")}` };
  }
  if (v.outcome === "correct" && (v.propositions.some((p) => p.verdict !== "supported") || v.contradictions.length > 0)) {
    return { ok: false, problem: "the verdict says correct, but not every proposition is supported or a contradiction is listed" };
  }
  if (v.outcome === "partial" && !v.propositions.some((p) => p.verdict === "supported" || p.verdict === "partial")) {
    return { ok: false, problem: "the verdict says partial, but no proposition is supported or partial" };
  }
  return { ok: true, verdict: { ...v, propositions: [...v.propositions].sort((a, b) => Number(a.id.slice(1)) - Number(b.id.slice(1))) }, source };
}

/** The two questions asked about an item, in this order: its verdict, then the guess of its arm. */
export type Ask = "verdict" | "arm-guess";

/**
 * Where an item's transcripts are kept beside the record (<record>.transcripts/NNNN.jsonl): the
 * verdict call's under the observation's index, the arm-guess call's after every verdict's.
 */
export function transcriptIndexOf(ask: Ask, observationIndex: number, observations: number): number {
  return ask === "verdict" ? observationIndex : observations + observationIndex;
}

export type ArmGuessReading = { ok: true; guess: ArmGuess } | { ok: false; problem: string };

/** The arm-guess call's answer: `structured_output`, else the JSON text of `result`, matching `{ armGuess }`. */
export function readArmGuess(structuredOutput: unknown, resultText: string | null): ArmGuessReading {
  const answer = structuredAnswer(structuredOutput, resultText);
  if (!answer.ok) return answer;
  const parsed = ArmGuessAnswerSchema.safeParse(answer.candidate);
  if (!parsed.success) return { ok: false, problem: `the guess does not match its schema: ${formatIssues(parsed.error.issues).slice(0, 3).join("; ")}` };
  return { ok: true, guess: parsed.data.armGuess };
}

/** Keeps the structured output and the result text of the last result event; its validity is the transcript reader's verdict. */
export function readResultEvent(line: string, out: { structuredOutput: unknown; resultText: string | null }): void {
  if (!line.includes('"result"')) return;
  try {
    const event = JSON.parse(line) as Record<string, unknown>;
    if (event?.type !== "result") return;
    out.structuredOutput = event.structured_output;
    out.resultText = typeof event.result === "string" ? event.result : null;
  } catch {
    // The reader records the malformed line.
  }
}
