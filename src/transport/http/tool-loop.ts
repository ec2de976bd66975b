import type { AttemptStatus } from "../../terms/terms.ts";
import type { AssistantMessage, CallOutcome, ContentBlock, MeasuredUsage } from "./client.ts";
import { cacheWriteTokens, promptTokens } from "../../cost/usage.ts";
import { ATTEMPT_TIMEOUT_MS } from "../../terms/limits.ts";
import { MAX_OUTPUT_TOKENS } from "./pricing.ts";
import type { ToolResult, ToolSet } from "./tools.ts";
import { ownValue, setOwn } from "../../util/own-keys.ts";

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
type ApiMessage = { role: "user"; content: string | ToolResultBlock[] } | { role: "assistant"; content: ApiContent };

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
  const loop = new AgentLoop(o);
  for (let turn = 1; ; turn++) {
    const ended = await loop.turn(turn);
    if (ended) return ended;
  }
}

type ToolUse = Extract<ContentBlock, { type: "tool_use" }>;
type ToolResultBlock = { type: "tool_result"; tool_use_id: string; content: string; is_error?: true };
type Opened = { ok: true; inputCeilingTokens: number; outputCeilingTokens: number };

/** One call of a turn, sent and settled: what came back and how it stood against its ceiling and the cap. */
interface Called {
  outcome: CallOutcome;
  opened: Opened;
  capExceeded: boolean;
  overReservation: boolean;
}

/** Why the usage stopped the attempt: the cumulative cap, the call's reservation (cache writes), or the call's token ceiling. */
function overWhat(usage: MeasuredUsage, opened: Opened, overCeiling: boolean, overReservation: boolean): string {
  const prompt = promptTokens(usage);
  if (!overCeiling) return "the cumulative cap was passed";
  if (overReservation && prompt <= opened.inputCeilingTokens && usage.outputTokens <= opened.outputCeilingTokens) {
    return `the usage's cost (${prompt} prompt tokens, ${cacheWriteTokens(usage)} of them cache writes) passed the call's reservation`;
  }
  return `the usage (${prompt} prompt, ${usage.outputTokens} output tokens) passed the call's ceiling (${opened.inputCeilingTokens} prompt, ${opened.outputCeilingTokens} output)`;
}

/** The answer text of a reply: its text blocks joined, trimmed. */
function answerText(message: AssistantMessage): string {
  return message.content
    .flatMap((b) => (b.type === "text" ? [b.text] : []))
    .join("\n")
    .trim();
}

/** The reply as the next request carries it back: as sent by the API, minus blocks the request cannot carry (the API refuses empty text blocks). */
function echoed(message: AssistantMessage): ApiContent {
  const out: ApiContent = [];
  for (const b of message.content) {
    if (b.type === "text" && b.text.trim() !== "") out.push({ type: "text", text: b.text });
    else if (b.type === "tool_use") out.push({ type: "tool_use", id: b.id, name: b.name, input: b.input });
  }
  return out;
}

/** The calls of the named tools in `byName`. */
/** One more call of `name` in `byName`: the model names its tools, so own members only (src/util/own-keys.ts). */
const countCall = (byName: Record<string, number>, name: string): number => setOwn(byName, name, (ownValue(byName, name) ?? 0) + 1);

function countOf(byName: Record<string, number>, names: ReadonlySet<string>): number {
  return Object.entries(byName)
    .filter(([n]) => names.has(n))
    .reduce((n, [, c]) => n + c, 0);
}

/** One attempt's loop: the conversation so far, the tool calls counted, the usage measured, and how it ends. */
class AgentLoop {
  private readonly limits: Limits;
  private readonly offered: Set<string>;
  private readonly docBridge: Set<string>;
  private readonly started: number;
  private readonly messages: ApiMessage[];
  private readonly seenIds = new Set<string>();
  private readonly tools: Array<{ name: string; description?: string; input_schema: unknown }>;
  private readonly r: LoopResult = {
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
  private measuredCalls = 0;
  private unmeasuredCalls = 0;
  private cacheReported = true;

  constructor(private readonly o: LoopOptions) {
    this.limits = { ...PROTOCOL_LIMITS, ...o.limits };
    this.offered = new Set(o.tools.definitions.map((d) => d.name));
    this.docBridge = new Set(o.docBridgeToolNames ?? []);
    this.started = o.now();
    this.messages = [{ role: "user", content: o.prompt }];
    this.tools = o.tools.definitions.map((d) => ({ name: d.name, ...(d.description ? { description: d.description } : {}), input_schema: d.input_schema }));
  }

  private measure(u: MeasuredUsage): void {
    const r = this.r;
    this.measuredCalls++;
    r.inputTokens! += u.inputTokens;
    r.outputTokens! += u.outputTokens;
    if (!u.cacheReported.read || !u.cacheReported.write) this.cacheReported = false;
    r.cacheCreationInputTokens! += cacheWriteTokens(u);
    r.cacheReadInputTokens! += u.cacheReadInputTokens;
  }

  private elapsed(): number {
    return this.o.now() - this.started;
  }

  private finish(status: AttemptStatus, reason: string): LoopResult {
    const r = this.r;
    r.status = status;
    r.reason = reason;
    r.wallTimeMs = Math.max(0, Math.round(this.elapsed()));
    r.usageComplete = this.unmeasuredCalls === 0;
    // Only known tokens: none known after an unmeasured call is null, never a zero (contract R46).
    if (this.measuredCalls === 0 && this.unmeasuredCalls > 0) {
      r.inputTokens = r.outputTokens = null;
      this.cacheReported = false;
    }
    if (!this.cacheReported) r.cacheCreationInputTokens = r.cacheReadInputTokens = null;
    return r;
  }

  private deadlineReason(where: string): string {
    return `the ${this.limits.deadlineMs / 1000}-second deadline passed ${where}`;
  }

  private interrupted(): string | undefined {
    const { signal } = this.o;
    return signal?.aborted ? `interrupted by ${String(signal.reason ?? "a signal")}` : undefined;
  }

  /** One turn: the call, its reply checked, then the end of the attempt or the tools run for the next turn (undefined). */
  async turn(turn: number): Promise<LoopResult | undefined> {
    const call = await this.call(turn);
    if ("ended" in call) return call.ended;
    const { outcome, opened, capExceeded, overReservation } = call;
    if (outcome.kind !== "message" && outcome.kind !== "bad-message") return this.unmeasured(turn, outcome);
    this.measure(outcome.usage);
    // The input ceiling bounds every prompt token, cached or not (the gateway's token bound).
    const overCeiling = promptTokens(outcome.usage) > opened.inputCeilingTokens || outcome.usage.outputTokens > opened.outputCeilingTokens || overReservation;
    if (outcome.kind === "bad-message") {
      if (overCeiling || capExceeded) return this.finish("budget-exceeded", `turn ${turn}: the usage passed the call's ceiling; ${outcome.problem}`);
      return this.finish("failed", `turn ${turn}: ${outcome.problem}`);
    }
    const message = outcome.message;
    const uses = this.readReply(turn, message);
    // Setup is checked before cost (contract R41).
    if (this.r.setupProblems.length) return this.finish("invalid-setup", this.r.setupProblems[0]!);
    if (overCeiling || capExceeded) return this.finish("budget-exceeded", `turn ${turn}: ${overWhat(outcome.usage, opened, overCeiling, overReservation)}`);
    if (message.stopReason === "end_turn" || message.stopReason === "stop_sequence") return this.answered(turn, message, uses);
    const why = this.cannotGoOn(turn, message, uses);
    if (why) return this.finish("failed", why);
    const results = await this.runTools(turn, uses);
    if (!Array.isArray(results)) return results;
    this.messages.push({ role: "assistant", content: echoed(message) });
    this.messages.push({ role: "user", content: results });
    return undefined;
  }

  /** Checks the interruption and the deadline, then reserves, sends and settles the turn's request; `ended` when the attempt ends before a reply. */
  private async call(turn: number): Promise<Called | { ended: LoopResult }> {
    const { o, limits } = this;
    const stop = this.interrupted();
    if (stop) return { ended: this.finish("failed", stop) };
    // One reading of the clock decides both whether the turn starts and how long its request may take.
    const remainingMs = limits.deadlineMs - this.elapsed();
    if (remainingMs <= 0) return { ended: this.finish("timed-out", this.deadlineReason(`before turn ${turn}`)) };
    const body = JSON.stringify({
      model: o.model,
      max_tokens: limits.maxOutputTokens,
      temperature: limits.temperature,
      system: SYSTEM_PROMPT,
      messages: this.messages,
      tools: this.tools,
    });
    const opened = await o.account.open(turn, Buffer.byteLength(body, "utf8"));
    if (!opened.ok) return { ended: this.finish("budget-exceeded", opened.reason) };
    const outcome = await o.send(body, remainingMs, o.signal);
    const { capExceeded, overReservation } = await o.account.close(outcome);
    return { outcome, opened, capExceeded, overReservation };
  }

  /** A call that brought back no valid usage ends the attempt; its reservation stays charged and it is never retried. */
  private unmeasured(turn: number, outcome: Exclude<CallOutcome, { kind: "message" | "bad-message" }>): LoopResult {
    this.unmeasuredCalls++;
    const where = `turn ${turn}: ${outcome.problem}`;
    if (outcome.kind === "invalid-usage") {
      this.r.costProblem = `turn ${turn}: ${outcome.problem}; the call's reservation stays charged`;
      return this.finish("invalid-cost", where);
    }
    if (outcome.kind === "lost" && outcome.aborted === "deadline")
      return this.finish("timed-out", `${this.deadlineReason(`during turn ${turn}`)}; the request was abandoned and its reservation stays charged`);
    if (outcome.kind === "lost" && outcome.aborted === "signal") return this.finish("failed", `${this.interrupted() ?? "interrupted"} during turn ${turn}; the request's reservation stays charged`);
    return this.finish("failed", `${where}; the request's reservation stays charged and it is not retried`);
  }

  /** Records the reply (its model, stop reason, tool calls by id) and its setup problems; its tool calls. */
  private readReply(turn: number, message: AssistantMessage): ToolUse[] {
    const { r, o } = this;
    r.numTurns++;
    r.model ??= message.model;
    r.stopReason = message.stopReason;
    if (!sameModel(o.model, message.model)) r.setupProblems.push(`turn ${turn}: the reply's model is ${message.model}, not ${o.model}`);
    for (const block of message.content) {
      if (block.type === "other") r.setupProblems.push(`turn ${turn}: the reply holds a ${block.blockType} block; the request asked for no thinking and no server tools`);
    }
    const uses = message.content.filter((b): b is ToolUse => b.type === "tool_use");
    for (const use of uses) {
      if (this.seenIds.has(use.id)) {
        r.setupProblems.push(`turn ${turn}: tool_use id ${use.id} repeats`);
        continue;
      }
      this.seenIds.add(use.id);
      // Every tool_use counts once by id, refused ones included (contract R35).
      r.toolCalls++;
      countCall(r.toolCallsByName, use.name);
      if (!this.offered.has(use.name)) r.setupProblems.push(`turn ${turn}: the model called ${use.name}, which was not offered`);
    }
    return uses;
  }

  /** A reply that ends the turn: completed with its answer text, unless it also asks for tools, has no text, or every doc-bridge call failed. */
  private answered(turn: number, message: AssistantMessage, uses: readonly ToolUse[]): LoopResult {
    const r = this.r;
    if (uses.length) return this.finish("failed", `turn ${turn}: the reply ends the turn (${message.stopReason}) but holds tool calls`);
    const answer = answerText(message);
    if (answer === "") return this.finish("failed", `turn ${turn}: the reply ends the turn without answer text`);
    const dbCalls = countOf(r.toolCallsByName, this.docBridge);
    const dbErrors = countOf(r.toolErrorsByName, this.docBridge);
    if (dbCalls > 0 && dbErrors === dbCalls) {
      r.setupProblems.push(`every doc-bridge tool call (${dbCalls}) returned an error: the treatment was lost`);
      r.answer = answer;
      return this.finish("invalid-setup", r.setupProblems[0]!);
    }
    r.answer = answer;
    return this.finish("completed", "an answer was returned");
  }

  /** Why a reply that did not end the turn cannot lead to another: not a tool_use stop, no tool calls, too many, or no turn left. */
  private cannotGoOn(turn: number, message: AssistantMessage, uses: readonly ToolUse[]): string | undefined {
    const { limits } = this;
    if (message.stopReason !== "tool_use") {
      return `turn ${turn}: the reply stopped with ${message.stopReason ?? "no stop_reason"}${message.stopReason === "max_tokens" ? ` (the ${limits.maxOutputTokens}-token output limit)` : ""}, not with an answer`;
    }
    if (uses.length === 0) return `turn ${turn}: stop_reason tool_use without a tool call`;
    if (uses.length > limits.maxToolCallsPerTurn) {
      return `turn ${turn}: the model asked for ${uses.length} tool calls, more than the limit of ${limits.maxToolCallsPerTurn} per turn; none was run`;
    }
    if (turn >= limits.maxTurns) {
      return `turn ${turn}: the model asked for tools again, but a ${turn + 1}th turn would pass the limit of ${limits.maxTurns} turns`;
    }
    return undefined;
  }

  /** Runs the turn's tool calls in order, each bounded, checking the interruption and the deadline before each: their results, or the attempt's end. */
  private async runTools(turn: number, uses: readonly ToolUse[]): Promise<ToolResultBlock[] | LoopResult> {
    const { r, limits } = this;
    const results: ToolResultBlock[] = [];
    for (const use of uses) {
      const stop = this.interrupted();
      if (stop) return this.finish("failed", stop);
      if (this.elapsed() >= limits.deadlineMs) return this.finish("timed-out", this.deadlineReason(`before a tool call of turn ${turn}`));
      const result = await callBounded(this.o.tools, use.name, use.input, limits.toolTimeoutMs);
      if (result.isError) countCall(r.toolErrorsByName, use.name);
      results.push({ type: "tool_result", tool_use_id: use.id, content: result.content, ...(result.isError ? { is_error: true as const } : {}) });
    }
    return results;
  }
}
