import type { AttemptStatus } from "../../terms/terms.ts";
import type { CallOutcome, ContentBlock, MeasuredUsage } from "./client.ts";
import { cacheWriteTokens, promptTokens } from "../../cost/usage.ts";
import { ATTEMPT_TIMEOUT_MS } from "../../terms/limits.ts";
import { MAX_OUTPUT_TOKENS } from "./pricing.ts";
import type { ToolResult, ToolSet } from "./tools.ts";

/**
 * The agent loop of the Messages API transport (contract R50): the runner is the agent. One request
 * per turn, tools run locally between turns, under the protocol's limits. Money is the
 * caller's: `account.open` reserves (and persists) before every call, `account.close` settles
 * it from what came back. Any call that did not bring back valid usage stops the loop, so a
 * request is never retried.
 */

export const PROTOCOL_LIMITS = {
  temperature: 0,
  maxOutputTokens: MAX_OUTPUT_TOKENS,
  maxTurns: 8,
  maxToolCallsPerTurn: 20,
  /** From the attempt's start; checked before every turn and every tool, and bounds each request. */
  deadlineMs: ATTEMPT_TIMEOUT_MS,
  /** Each local tool call (repository or doc-bridge). */
  toolTimeoutMs: 30_000,
} as const;

export type Limits = { -readonly [K in keyof typeof PROTOCOL_LIMITS]: number };

/**
 * The same in both arms; only the tool list differs. The user message is `buildPrompt(task)`,
 * the CLI transport's prompt, so both transports ask the same question.
 */
export const SYSTEM_PROMPT = [
  "You answer a question about one software repository at a fixed commit.",
  "The current working directory is that repository, but you cannot open files or run commands directly:",
  "use the tools you are given to list, read and search its files. When you have the answer, reply with it",
  "in plain text and cite the file paths that support it.",
].join(" ");

export interface CallAccount {
  /** Reserve the call's ceiling and persist it before the call; refuse when it would pass the cap. */
  open(turn: number, requestBytes: number): Promise<{ ok: true; inputCeilingTokens: number; outputCeilingTokens: number } | { ok: false; reason: string }>;
  /**
   * Settle the open call: measured usage releases the unused part, anything else keeps it charged.
   * `overReservation`: the measured cost passed the call's reservation (cache writes, which the
   * request never asks for, are dearer than input) although its tokens stayed within the ceiling.
   */
  close(outcome: CallOutcome): Promise<{ capExceeded: boolean; overReservation: boolean }>;
}

export interface LoopOptions {
  model: string;
  prompt: string;
  tools: ToolSet;
  /** Sends one request body; never throws for network or API failures. */
  send(body: string, timeoutMs: number, signal: AbortSignal | undefined): Promise<CallOutcome>;
  account: CallAccount;
  /** Milliseconds; injectable so the deadline can be tested without waiting. */
  now(): number;
  limits?: Partial<Limits>;
  signal?: AbortSignal;
  /** The doc-bridge tools' API names in the MCP arm (the all-errors rule), else empty. */
  docBridgeToolNames?: readonly string[];
}

export interface LoopResult {
  status: AttemptStatus;
  reason: string;
  answer: string | null;
  /** The `model` of the first reply. */
  model: string | null;
  /** Replies that carried a message. */
  numTurns: number;
  toolCalls: number;
  toolCallsByName: Record<string, number>;
  toolErrorsByName: Record<string, number>;
  inputTokens: number | null;
  outputTokens: number | null;
  cacheCreationInputTokens: number | null;
  cacheReadInputTokens: number | null;
  usageComplete: boolean;
  setupProblems: string[];
  costProblem: string | null;
  stopReason: string | null;
  wallTimeMs: number;
}

type ApiContent = Array<{ type: "text"; text: string } | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> }>;
type ApiMessage = { role: "user"; content: string | Array<{ type: "tool_result"; tool_use_id: string; content: string; is_error?: true }> } | { role: "assistant"; content: ApiContent };

/** A dated snapshot id of the requested alias (`claude-x` -> `claude-x-20260101`) is the same model. */
function sameModel(requested: string, reported: string): boolean {
  return reported === requested || (reported.startsWith(`${requested}-`) && /^\d{8}$/.test(reported.slice(requested.length + 1)));
}

async function callBounded(tools: ToolSet, name: string, input: Record<string, unknown>, ms: number): Promise<ToolResult> {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<ToolResult>((resolve) => {
    timer = setTimeout(() => {
      controller.abort();
      resolve({ content: `the tool call did not finish within ${ms / 1000} s and was stopped`, isError: true });
    }, ms);
  });
  const work = tools.call(name, input, controller.signal);
  // A call that fails after its bound was reached must not become an unhandled rejection.
  work.catch(() => {});
  try {
    return await Promise.race([work, bound]);
  } finally {
    clearTimeout(timer);
  }
}

export async function runAgentLoop(o: LoopOptions): Promise<LoopResult> {
  const limits: Limits = { ...PROTOCOL_LIMITS, ...o.limits };
  const offered = new Set(o.tools.definitions.map((d) => d.name));
  const docBridge = new Set(o.docBridgeToolNames ?? []);
  const started = o.now();
  const messages: ApiMessage[] = [{ role: "user", content: o.prompt }];
  const seenIds = new Set<string>();
  const r: LoopResult = {
    status: "failed",
    reason: "",
    answer: null,
    model: null,
    numTurns: 0,
    toolCalls: 0,
    toolCallsByName: {},
    toolErrorsByName: {},
    inputTokens: 0,
    outputTokens: 0,
    cacheCreationInputTokens: 0,
    cacheReadInputTokens: 0,
    usageComplete: true,
    setupProblems: [],
    costProblem: null,
    stopReason: null,
    wallTimeMs: 0,
  };
  let measuredCalls = 0;
  let unmeasuredCalls = 0;
  let cacheReported = true;
  const measure = (u: MeasuredUsage) => {
    measuredCalls++;
    r.inputTokens! += u.inputTokens;
    r.outputTokens! += u.outputTokens;
    if (!u.cacheReported.read || !u.cacheReported.write) cacheReported = false;
    r.cacheCreationInputTokens! += cacheWriteTokens(u);
    r.cacheReadInputTokens! += u.cacheReadInputTokens;
  };
  const elapsed = () => o.now() - started;
  const finish = (status: AttemptStatus, reason: string): LoopResult => {
    r.status = status;
    r.reason = reason;
    r.wallTimeMs = Math.max(0, Math.round(elapsed()));
    r.usageComplete = unmeasuredCalls === 0;
    // Only known tokens: none known after an unmeasured call is null, never a zero (contract R46).
    if (measuredCalls === 0 && unmeasuredCalls > 0) {
      r.inputTokens = r.outputTokens = null;
      cacheReported = false;
    }
    if (!cacheReported) r.cacheCreationInputTokens = r.cacheReadInputTokens = null;
    return r;
  };
  const overDeadline = () => elapsed() >= limits.deadlineMs;
  const deadlineReason = (where: string) => `the ${limits.deadlineMs / 1000}-second deadline passed ${where}`;
  const interrupted = () => (o.signal?.aborted ? `interrupted by ${String(o.signal.reason ?? "a signal")}` : undefined);

  const tools = o.tools.definitions.map((d) => ({ name: d.name, ...(d.description ? { description: d.description } : {}), input_schema: d.input_schema }));
  for (let turn = 1; ; turn++) {
    const stop = interrupted();
    if (stop) return finish("failed", stop);
    // One reading of the clock decides both whether the turn starts and how long its request may take.
    const remainingMs = limits.deadlineMs - elapsed();
    if (remainingMs <= 0) return finish("timed-out", deadlineReason(`before turn ${turn}`));

    const body = JSON.stringify({
      model: o.model,
      max_tokens: limits.maxOutputTokens,
      temperature: limits.temperature,
      system: SYSTEM_PROMPT,
      messages,
      tools,
    });
    const opened = await o.account.open(turn, Buffer.byteLength(body, "utf8"));
    if (!opened.ok) return finish("budget-exceeded", opened.reason);
    const outcome = await o.send(body, remainingMs, o.signal);
    const { capExceeded, overReservation } = await o.account.close(outcome);

    if (outcome.kind !== "message" && outcome.kind !== "bad-message") {
      unmeasuredCalls++;
      const where = `turn ${turn}: ${outcome.problem}`;
      if (outcome.kind === "invalid-usage") {
        r.costProblem = `turn ${turn}: ${outcome.problem}; the call's reservation stays charged`;
        return finish("invalid-cost", where);
      }
      if (outcome.kind === "lost" && outcome.aborted === "deadline")
        return finish("timed-out", `${deadlineReason(`during turn ${turn}`)}; the request was abandoned and its reservation stays charged`);
      if (outcome.kind === "lost" && outcome.aborted === "signal") return finish("failed", `${interrupted() ?? "interrupted"} during turn ${turn}; the request's reservation stays charged`);
      return finish("failed", `${where}; the request's reservation stays charged and it is not retried`);
    }

    measure(outcome.usage);
    // The input ceiling bounds every prompt token, cached or not (the gateway's token bound).
    const prompt = promptTokens(outcome.usage);
    const overCeiling = prompt > opened.inputCeilingTokens || outcome.usage.outputTokens > opened.outputCeilingTokens || overReservation;
    if (outcome.kind === "bad-message") {
      if (overCeiling || capExceeded) return finish("budget-exceeded", `turn ${turn}: the usage passed the call's ceiling; ${outcome.problem}`);
      return finish("failed", `turn ${turn}: ${outcome.problem}`);
    }

    const message = outcome.message;
    r.numTurns++;
    r.model ??= message.model;
    r.stopReason = message.stopReason;
    if (!sameModel(o.model, message.model)) r.setupProblems.push(`turn ${turn}: the reply's model is ${message.model}, not ${o.model}`);
    for (const block of message.content) {
      if (block.type === "other") r.setupProblems.push(`turn ${turn}: the reply holds a ${block.blockType} block; the request asked for no thinking and no server tools`);
    }
    const uses = message.content.filter((b): b is Extract<ContentBlock, { type: "tool_use" }> => b.type === "tool_use");
    for (const use of uses) {
      if (seenIds.has(use.id)) {
        r.setupProblems.push(`turn ${turn}: tool_use id ${use.id} repeats`);
        continue;
      }
      seenIds.add(use.id);
      // Every tool_use counts once by id, refused ones included (contract R35).
      r.toolCalls++;
      r.toolCallsByName[use.name] = (r.toolCallsByName[use.name] ?? 0) + 1;
      if (!offered.has(use.name)) r.setupProblems.push(`turn ${turn}: the model called ${use.name}, which was not offered`);
    }
    // Setup is checked before cost (contract R41).
    if (r.setupProblems.length) return finish("invalid-setup", r.setupProblems[0]!);
    if (overCeiling || capExceeded) {
      const what = !overCeiling
        ? "the cumulative cap was passed"
        : overReservation && prompt <= opened.inputCeilingTokens && outcome.usage.outputTokens <= opened.outputCeilingTokens
          ? `the usage's cost (${prompt} prompt tokens, ${cacheWriteTokens(outcome.usage)} of them cache writes) passed the call's reservation`
          : `the usage (${prompt} prompt, ${outcome.usage.outputTokens} output tokens) passed the call's ceiling (${opened.inputCeilingTokens} prompt, ${opened.outputCeilingTokens} output)`;
      return finish("budget-exceeded", `turn ${turn}: ${what}`);
    }

    if (message.stopReason === "end_turn" || message.stopReason === "stop_sequence") {
      if (uses.length) return finish("failed", `turn ${turn}: the reply ends the turn (${message.stopReason}) but holds tool calls`);
      const answer = message.content
        .flatMap((b) => (b.type === "text" ? [b.text] : []))
        .join("\n")
        .trim();
      if (answer === "") return finish("failed", `turn ${turn}: the reply ends the turn without answer text`);
      const dbCalls = Object.entries(r.toolCallsByName)
        .filter(([n]) => docBridge.has(n))
        .reduce((n, [, c]) => n + c, 0);
      const dbErrors = Object.entries(r.toolErrorsByName)
        .filter(([n]) => docBridge.has(n))
        .reduce((n, [, c]) => n + c, 0);
      if (dbCalls > 0 && dbErrors === dbCalls) {
        r.setupProblems.push(`every doc-bridge tool call (${dbCalls}) returned an error: the treatment was lost`);
        r.answer = answer;
        return finish("invalid-setup", r.setupProblems[0]!);
      }
      r.answer = answer;
      return finish("completed", "an answer was returned");
    }
    if (message.stopReason !== "tool_use") {
      return finish(
        "failed",
        `turn ${turn}: the reply stopped with ${message.stopReason ?? "no stop_reason"}${message.stopReason === "max_tokens" ? ` (the ${limits.maxOutputTokens}-token output limit)` : ""}, not with an answer`,
      );
    }
    if (uses.length === 0) return finish("failed", `turn ${turn}: stop_reason tool_use without a tool call`);
    if (uses.length > limits.maxToolCallsPerTurn) {
      return finish("failed", `turn ${turn}: the model asked for ${uses.length} tool calls, more than the limit of ${limits.maxToolCallsPerTurn} per turn; none was run`);
    }
    if (turn >= limits.maxTurns) {
      return finish("failed", `turn ${turn}: the model asked for tools again, but a ${turn + 1}th turn would pass the limit of ${limits.maxTurns} turns`);
    }

    const results: Array<{ type: "tool_result"; tool_use_id: string; content: string; is_error?: true }> = [];
    for (const use of uses) {
      const stop = interrupted();
      if (stop) return finish("failed", stop);
      if (overDeadline()) return finish("timed-out", deadlineReason(`before a tool call of turn ${turn}`));
      const result = await callBounded(o.tools, use.name, use.input, limits.toolTimeoutMs);
      if (result.isError) r.toolErrorsByName[use.name] = (r.toolErrorsByName[use.name] ?? 0) + 1;
      results.push({ type: "tool_result", tool_use_id: use.id, content: result.content, ...(result.isError ? { is_error: true as const } : {}) });
    }
    // Echoed as sent by the API, minus blocks the request cannot carry (the API refuses empty text blocks).
    const echoed: ApiContent = [];
    for (const b of message.content) {
      if (b.type === "text" && b.text.trim() !== "") echoed.push({ type: "text", text: b.text });
      else if (b.type === "tool_use") echoed.push({ type: "tool_use", id: b.id, name: b.name, input: b.input });
    }
    messages.push({ role: "assistant", content: echoed });
    messages.push({ role: "user", content: results });
  }
}
