import { createHash } from "node:crypto";
import { OUTCOME_SCORES, type AdjudicationRecord, type Item } from "../adjudicate/schema.ts";
import type { Ledger, Observation } from "../ledger/schema.ts";
import type { Manifest } from "../manifest/schema.ts";
import { ArmSchema, type Arm } from "../terms/terms.ts";
import type { AttemptRow, ReportData } from "./build.ts";

/**
 * The study as Inspect eval logs (pure, contract R166): Inspect's JSON log format (`EvalLog`, log version 2, as
 * `inspect view` reads a `.json` log), one log per arm. An eval is one arm of the study, a sample
 * one attempt (id: the task, epoch: the repetition), its input the task's question, its output
 * the answer, its score the adjudicated outcome on the five-outcome scale, its messages and
 * events the attempt's transcript. Every field Inspect's published schema requires is written,
 * null where the study has no such thing. The logs hold answers and transcripts: private, like
 * the ledger (src/report/write.ts writes them).
 */

export const INSPECT_LOG_VERSION = 2;
/** The scorer's name in every log: the blind adjudicator's outcome. */
export const INSPECT_SCORER = "adjudicator";
/** Strings of a transcript longer than this are kept once, in the sample's attachments, and referred to from the events. */
const ATTACH_OVER = 100;

export interface InspectInput {
  report: ReportData;
  ledger: Ledger;
  /** sha256 of the ledger file's bytes the logs were made from. */
  ledgerFileSha256: string;
  record: AdjudicationRecord | null;
  manifest: Manifest;
  /** Observation index -> transcript lines; absent when the transcript was not kept or does not match its hash. */
  transcripts: ReadonlyMap<number, readonly string[]>;
}

export interface InspectLog {
  arm: Arm;
  /** The file name within the output folder. */
  name: string;
  log: Record<string, unknown>;
}

type Json = Record<string, unknown>;

const GENERATE_CONFIG_KEYS = [
  "max_retries",
  "timeout",
  "attempt_timeout",
  "max_connections",
  "system_message",
  "max_tokens",
  "top_p",
  "temperature",
  "stop_seqs",
  "best_of",
  "frequency_penalty",
  "presence_penalty",
  "logit_bias",
  "seed",
  "top_k",
  "num_choices",
  "logprobs",
  "top_logprobs",
  "parallel_tool_calls",
  "internal_tools",
  "max_tool_output",
  "cache_prompt",
  "verbosity",
  "effort",
  "reasoning_effort",
  "reasoning_tokens",
  "reasoning_summary",
  "reasoning_history",
  "response_schema",
  "extra_headers",
  "extra_body",
  "cache",
  "batch",
] as const;
/** The runner sets none of the generation options: the CLI chooses them. */
const NO_GENERATE_CONFIG: Json = Object.fromEntries(GENERATE_CONFIG_KEYS.map((k) => [k, null]));

const EVAL_CONFIG_KEYS = [
  "limit",
  "sample_id",
  "sample_shuffle",
  "epochs",
  "epochs_reducer",
  "approval",
  "fail_on_error",
  "continue_on_fail",
  "retry_on_error",
  "message_limit",
  "token_limit",
  "time_limit",
  "working_limit",
  "cost_limit",
  "max_samples",
  "max_tasks",
  "max_subprocesses",
  "max_sandboxes",
  "sandbox_cleanup",
  "log_samples",
  "log_realtime",
  "log_images",
  "log_buffer",
  "log_shared",
  "score_display",
] as const;

/** Inspect names models `provider/model`; every answering model of this runner is Anthropic's. */
export const inspectModel = (model: string) => `anthropic/${model}`;

const stableId = (...parts: Array<string | number>) => createHash("sha256").update(parts.join("\0")).digest("hex").slice(0, 22);

function usageOf(tokens: { input: number | null; output: number | null; cacheWrite: number | null; cacheRead: number | null }, cost: number | null): Json | null {
  if (tokens.input === null || tokens.output === null) return null;
  return {
    input_tokens: tokens.input,
    output_tokens: tokens.output,
    total_tokens: tokens.input + tokens.output + (tokens.cacheWrite ?? 0) + (tokens.cacheRead ?? 0),
    input_tokens_cache_write: tokens.cacheWrite,
    input_tokens_cache_read: tokens.cacheRead,
    reasoning_tokens: null,
    total_cost: cost,
  };
}

function addUsage(into: Record<string, Json>, model: string, usage: Json | null): void {
  if (!usage) return;
  const prev = into[model];
  if (!prev) {
    into[model] = { ...usage };
    return;
  }
  const sum = (k: string) => (prev[k] === null || usage[k] === null ? null : (prev[k] as number) + (usage[k] as number));
  into[model] = {
    input_tokens: (prev.input_tokens as number) + (usage.input_tokens as number),
    output_tokens: (prev.output_tokens as number) + (usage.output_tokens as number),
    total_tokens: (prev.total_tokens as number) + (usage.total_tokens as number),
    input_tokens_cache_write: sum("input_tokens_cache_write"),
    input_tokens_cache_read: sum("input_tokens_cache_read"),
    reasoning_tokens: null,
    total_cost: sum("total_cost"),
  };
}

const text = (t: string): Json => ({ internal: null, type: "text", text: t, refusal: null, citations: null });

const userMessage = (content: string | Json[], id: string): Json => ({ id, content, source: "input", metadata: null, role: "user", tool_call_id: null });

function assistantMessage(content: Json[], toolCalls: Json[], model: string | null, id: string): Json {
  return { id, content, source: "generate", metadata: null, role: "assistant", tool_calls: toolCalls.length ? toolCalls : null, model };
}

/** A tool_result's content as text: strings as they are, text blocks joined, anything else named. */
function toolResultText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return content === undefined || content === null ? "" : JSON.stringify(content);
  return content.map((b: { type?: unknown; text?: unknown }) => (b?.type === "text" && typeof b.text === "string" ? b.text : `[${typeof b?.type === "string" ? b.type : "block"}]`)).join("\n");
}

interface Turn {
  messageId: string;
  model: string | null;
  content: Json[];
  toolCalls: Json[];
  usage: Json | null;
  timestamp: string | null;
}

interface ToolOutcome {
  result: string;
  isError: boolean;
  timestamp: string | null;
}

interface TranscriptView {
  init: Json | null;
  /** In transcript order: assistant turns (one per API message) and tool results. */
  steps: Array<{ kind: "turn"; turn: Turn } | { kind: "tool"; id: string; outcome: ToolOutcome } | { kind: "user"; text: string; timestamp: string | null }>;
}

/** Reads the stream-json lines: consecutive assistant events of one API message are one turn. */
export function readTranscript(lines: readonly string[]): TranscriptView {
  const view: TranscriptView = { init: null, steps: [] };
  for (const line of lines) {
    let e: Json;
    try {
      e = JSON.parse(line) as Json;
    } catch {
      continue;
    }
    if (e === null || typeof e !== "object") continue;
    const timestamp = typeof e.timestamp === "string" ? e.timestamp : null;
    if (e.type === "system" && e.subtype === "init") {
      view.init = { model: e.model ?? null, tools: e.tools ?? null, mcp_servers: e.mcp_servers ?? null, claude_code_version: e.claude_code_version ?? null, permissionMode: e.permissionMode ?? null };
      continue;
    }
    const message = e.message as { id?: unknown; model?: unknown; content?: unknown; usage?: Json } | undefined;
    if (e.type === "assistant" && message && Array.isArray(message.content)) {
      const messageId = typeof message.id === "string" ? message.id : `#${view.steps.length}`;
      const last = view.steps.at(-1);
      let turn: Turn;
      if (last?.kind === "turn" && last.turn.messageId === messageId) turn = last.turn;
      else {
        turn = { messageId, model: typeof message.model === "string" ? message.model : null, content: [], toolCalls: [], usage: null, timestamp };
        view.steps.push({ kind: "turn", turn });
      }
      const u = message.usage;
      if (u && typeof u.input_tokens === "number" && typeof u.output_tokens === "number") {
        const n = (v: unknown) => (typeof v === "number" ? v : null);
        turn.usage = usageOf({ input: u.input_tokens, output: u.output_tokens, cacheWrite: n(u.cache_creation_input_tokens), cacheRead: n(u.cache_read_input_tokens) }, null);
      }
      for (const b of message.content as Json[]) {
        if (b?.type === "text" && typeof b.text === "string") turn.content.push(text(b.text));
        else if (b?.type === "thinking" && typeof b.thinking === "string") {
          turn.content.push({ internal: null, type: "reasoning", reasoning: b.thinking, summary: null, signature: typeof b.signature === "string" ? b.signature : null, redacted: false });
        } else if (b?.type === "redacted_thinking") {
          turn.content.push({ internal: null, type: "reasoning", reasoning: "", summary: null, signature: null, redacted: true });
        } else if (b?.type === "tool_use" && typeof b.name === "string") {
          const id = typeof b.id === "string" ? b.id : `${messageId}-${turn.toolCalls.length}`;
          const args = b.input !== null && typeof b.input === "object" && !Array.isArray(b.input) ? (b.input as Json) : { input: b.input ?? null };
          turn.toolCalls.push({ id, function: b.name, arguments: args, parse_error: null, view: null, type: "function" });
        }
      }
      continue;
    }
    if (e.type === "user" && message) {
      if (typeof message.content === "string") {
        view.steps.push({ kind: "user", text: message.content, timestamp });
        continue;
      }
      if (!Array.isArray(message.content)) continue;
      for (const b of message.content as Json[]) {
        if (b?.type === "tool_result" && typeof b.tool_use_id === "string") {
          view.steps.push({ kind: "tool", id: b.tool_use_id, outcome: { result: toolResultText(b.content), isError: b.is_error === true, timestamp } });
        } else if (b?.type === "text" && typeof b.text === "string") view.steps.push({ kind: "user", text: b.text, timestamp });
      }
    }
  }
  return view;
}

/** Replaces long strings in `value` by `attachment://<id>` references kept in `attachments` (as Inspect condenses its events). */
function attach(value: unknown, attachments: Record<string, string>): unknown {
  if (typeof value === "string") {
    if (value.length <= ATTACH_OVER) return value;
    const id = createHash("sha256").update(value).digest("hex").slice(0, 32);
    attachments[id] = value;
    return `attachment://${id}`;
  }
  if (Array.isArray(value)) return value.map((v) => attach(v, attachments));
  if (value !== null && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, k === "type" || k === "role" || k === "id" ? v : attach(v, attachments)]));
  return value;
}

const EVENT_BASE = (uuid: string, timestamp: string, workingStart: number) => ({ uuid, span_id: null, timestamp, working_start: workingStart, metadata: null, pending: null });

function scoreOf(row: AttemptRow, item: Item | undefined, answer: string | null): Json | null {
  if (row.outcome === "missing") return null;
  const reasons = [item?.reason, item?.verdict?.reasons].filter((x): x is string => Boolean(x)).join(" — ");
  return {
    value: row.outcome,
    answer,
    explanation: reasons || row.outcomeReason,
    metadata: {
      score: row.score,
      decided_by: item?.decidedBy ?? null,
      propositions: item?.verdict?.propositions ?? null,
      arm_guess: item?.armGuess ?? null,
    },
    history: [],
  };
}

interface SampleParts {
  observation: Observation;
  row: AttemptRow;
  item: Item | undefined;
  question: string;
  expected: string[];
  category: string | null;
  lines: readonly string[] | undefined;
  runId: string;
}

/** What the parts of one sample share: its ids, its clock, the answering model's Inspect name and its attachments. */
interface SampleContext {
  /** A stable id within the sample (run, attempt and `parts`). */
  uid: (...parts: Array<string | number>) => string;
  /** An event's timestamp: its own, else the attempt's start, else the epoch. */
  at: (ts: string | null) => string;
  /** Seconds from the attempt's start (0 without one). */
  since: (ts: string | null) => number;
  completedAt: string | null;
  model: string;
  attachments: Record<string, string>;
}

function sampleContext(o: Observation, runId: string): SampleContext {
  const started = o.startedAt ? new Date(o.startedAt) : null;
  return {
    uid: (...parts) => stableId(runId, o.index, ...parts),
    at: (ts) => ts ?? o.startedAt ?? new Date(0).toISOString(),
    since: (ts) => (started && ts ? Math.max(0, (new Date(ts).getTime() - started.getTime()) / 1000) : 0),
    completedAt: started && o.wallTimeMs !== null ? new Date(started.getTime() + o.wallTimeMs).toISOString() : null,
    model: inspectModel(o.model ?? "unknown"),
    attachments: {},
  };
}

/** The model event of one assistant turn: the conversation so far in, the turn out. */
function modelEvent(t: Turn, msg: Json, messages: Json[], i: number, c: SampleContext): Json {
  return {
    ...EVENT_BASE(c.uid("model", i), c.at(t.timestamp), c.since(t.timestamp)),
    event: "model",
    model: t.model ? inspectModel(t.model) : c.model,
    role: null,
    input: attach(messages, c.attachments),
    tools: [],
    tool_choice: "auto",
    config: NO_GENERATE_CONFIG,
    output: {
      model: t.model ? inspectModel(t.model) : c.model,
      choices: [{ message: attach(msg, c.attachments), stop_reason: t.toolCalls.length ? "tool_calls" : "stop", logprobs: null }],
      completion: t.content.flatMap((x) => (x.type === "text" ? [x.text as string] : [])).join("\n"),
      usage: t.usage,
      time: null,
      metadata: null,
      error: null,
    },
    retries: null,
    error: null,
    traceback: null,
    traceback_ansi: null,
    cache: null,
    call: null,
    completed: t.timestamp,
    working_time: null,
  };
}

/** The tool event of one call of a turn, with its result from the transcript (or a note that it has none). */
function toolEvent(call: Json, t: Turn, out: ToolOutcome | undefined, c: SampleContext): Json {
  return {
    ...EVENT_BASE(c.uid("tool", call.id as string), c.at(out?.timestamp ?? t.timestamp), c.since(out?.timestamp ?? t.timestamp)),
    event: "tool",
    type: "function",
    id: call.id,
    function: call.function,
    arguments: call.arguments,
    view: null,
    result: attach(out ? out.result : "(no result in the transcript)", c.attachments),
    truncated: null,
    error: out?.isError ? { type: "unknown", message: attach(out.result, c.attachments) } : null,
    events: [],
    completed: out?.timestamp ?? null,
    working_time: null,
    agent: null,
    failed: out ? out.isError : null,
    message_id: null,
  };
}

/** A tool result as the chat message that answers its call. */
function toolMessage(id: string, outcome: ToolOutcome, i: number, functions: ReadonlyMap<string, string>, c: SampleContext): Json {
  return {
    id: c.uid("result", i),
    content: outcome.result,
    source: null,
    metadata: null,
    role: "tool",
    tool_call_id: id,
    function: functions.get(id) ?? null,
    error: outcome.isError ? { type: "unknown", message: outcome.result } : null,
  };
}

/** Appends the transcript to the sample in its order: each turn a message, a model event and its tool events; each result and user text a message. */
function replayTranscript(view: TranscriptView, messages: Json[], events: Json[], c: SampleContext): void {
  const outcomes = new Map<string, ToolOutcome>();
  for (const s of view.steps) if (s.kind === "tool") outcomes.set(s.id, s.outcome);
  const functions = new Map<string, string>();
  view.steps.forEach((s, i) => {
    if (s.kind === "turn") {
      const t = s.turn;
      const msg = assistantMessage(t.content, t.toolCalls, t.model, c.uid("turn", i));
      for (const call of t.toolCalls) functions.set(call.id as string, call.function as string);
      events.push(modelEvent(t, msg, messages, i, c));
      messages.push(msg);
      for (const call of t.toolCalls) events.push(toolEvent(call, t, outcomes.get(call.id as string), c));
    } else if (s.kind === "tool") messages.push(toolMessage(s.id, s.outcome, i, functions, c));
    else messages.push(userMessage(s.text, c.uid("user", i)));
  });
}

/** The sample's messages and events: the question, the CLI's init, the transcript when kept, and the score when there is one. */
function conversationOf(p: SampleParts, score: Json | null, c: SampleContext): { messages: Json[]; events: Json[] } {
  const o = p.observation;
  const question = userMessage(p.question, c.uid("question"));
  const messages: Json[] = [question];
  const sampleShape = { input: p.question, choices: null, target: p.expected, id: o.task, metadata: null, sandbox: null, files: null, setup: null };
  const events: Json[] = [{ ...EVENT_BASE(c.uid("init"), c.at(o.startedAt), 0), event: "sample_init", sample: sampleShape, state: { messages: [question] } }];
  const view = p.lines ? readTranscript(p.lines) : null;
  if (view?.init) events.push({ ...EVENT_BASE(c.uid("info"), c.at(o.startedAt), 0), event: "info", source: "claude-code init", data: view.init });
  if (view) replayTranscript(view, messages, events, c);
  if (score) {
    events.push({
      ...EVENT_BASE(c.uid("score"), c.at(c.completedAt), o.wallTimeMs !== null ? o.wallTimeMs / 1000 : 0),
      event: "score",
      score,
      target: p.expected,
      intermediate: false,
      model_usage: null,
    });
  }
  return { messages, events };
}

/** The attempt's figures from the ledger and the report, as the sample's metadata. */
function sampleMetadata(p: SampleParts): Json {
  const o = p.observation;
  return {
    attempt: o.index + 1,
    task: o.task,
    category: p.category,
    scenario: o.scenario,
    arm: o.arm,
    repetition: o.repetition,
    status: p.row.status,
    status_reason: p.row.statusReason,
    outcome: p.row.outcome,
    score: p.row.score,
    charged_usd: o.chargedUsd,
    tool_calls: o.toolCalls,
    tool_calls_by_name: o.toolCallsByName,
    num_turns: o.numTurns,
    wall_time_ms: o.wallTimeMs,
    usage_complete: o.usageComplete,
    transcript: p.lines ? "kept" : o.transcriptSha256 ? "unreadable or not matching the ledger's sha256: `study-runner ledger verify` says why" : "not kept",
  };
}

/** One attempt as an Inspect sample: the question in, the answer out, the adjudicated score, the transcript as messages and events. */
function sampleOf(p: SampleParts): Json {
  const o = p.observation;
  const c = sampleContext(o, p.runId);
  const usage = usageOf({ input: o.inputTokens, output: o.outputTokens, cacheWrite: o.cacheCreationInputTokens, cacheRead: o.cacheReadInputTokens }, o.chargedUsd);
  const score = scoreOf(p.row, p.item, o.answer);
  const { messages, events } = conversationOf(p, score, c);
  const answerMessage = assistantMessage(o.answer === null ? [] : [text(o.answer)], [], o.model, c.uid("answer"));
  const seconds = o.wallTimeMs !== null ? o.wallTimeMs / 1000 : null;
  return {
    id: o.task,
    epoch: o.repetition,
    input: p.question,
    choices: null,
    target: p.expected,
    sandbox: null,
    files: null,
    setup: null,
    messages,
    output: {
      model: c.model,
      choices: o.answer === null ? [] : [{ message: answerMessage, stop_reason: "stop", logprobs: null }],
      completion: o.answer ?? "",
      usage,
      time: seconds,
      metadata: null,
      error: null,
    },
    scores: score ? { [INSPECT_SCORER]: score } : null,
    metadata: sampleMetadata(p),
    store: {},
    events,
    model_usage: usage ? { [c.model]: usage } : {},
    started_at: o.startedAt,
    completed_at: c.completedAt,
    total_time: seconds,
    working_time: seconds,
    uuid: c.uid("sample"),
    invalidation: null,
    error: o.status !== "completed" ? { message: `attempt ${p.row.status}${p.row.statusReason ? `: ${p.row.statusReason}` : ""}`, traceback: "", traceback_ansi: "" } : null,
    error_retries: null,
    attachments: c.attachments,
    limit: null,
  };
}

const metric = (name: string, value: number): Json => ({ name, value, params: {}, metadata: null });

/** What every arm's log reads: the input, and its items, tasks and report rows by key. */
interface LogContext {
  input: InspectInput;
  items: Map<number, Item>;
  tasks: Map<string, Manifest["tasks"][number]>;
  rows: Map<number, AttemptRow>;
  /** The outcome scale (outcome -> score) the logs state. */
  scale: Json;
}

/** One arm of the study: its attempts in the ledger, its rows in the report (those never run included), its scenario. */
interface ArmPart {
  arm: Arm;
  scenario: string;
  observations: Observation[];
  /** The plan's attempts of this arm (the ledger's, and those never run when the manifest gave the plan). */
  armRows: AttemptRow[];
}

/** The sample of one attempt, its question and expected propositions from the manifest. */
function attemptSample(o: Observation, ctx: LogContext): Json {
  const task = ctx.tasks.get(o.task);
  return sampleOf({
    observation: o,
    row: ctx.rows.get(o.index)!,
    item: ctx.items.get(o.index),
    question: task?.question ?? `(task ${o.task} is not in the manifest)`,
    expected: task?.expected ?? [],
    category: task?.category ?? null,
    lines: ctx.input.transcripts.get(o.index),
    runId: ctx.input.ledger.runId,
  });
}

/** The eval's metadata: the protocol, the run and the pairing, the labels of the figures, the attempts never run. */
function evalMetadata(part: ArmPart, ctx: LogContext): Json {
  const { report: r, ledger } = ctx.input;
  return {
    protocol_hash: ledger.protocol.protocolHash,
    ledger_file_sha256: ctx.input.ledgerFileSha256,
    pinned_cli_version: ledger.expectedCliVersion,
    probed_cli_version: ledger.cliVersion,
    runner_hash: ledger.runnerHash,
    run_id: ledger.runId,
    arm: part.arm,
    scenario: part.scenario,
    paired_with: r.scenarios[part.arm === "mcp" ? "repository" : "mcp"],
    mode: ledger.mode,
    transport: ledger.transport,
    isolation: ledger.isolation,
    model_api: ledger.modelApi ?? null,
    usd_label: r.spend.usd,
    tokens_label: r.spend.tokens,
    statement: r.statement,
    adjudicator_model: r.adjudication?.model ?? null,
    outcome_scale: ctx.scale,
    not_run: part.armRows.filter((a) => a.index === null).map((a) => `${a.task} repetition ${a.repetition}`),
  };
}

/** The eval of one arm: the task (the arm's scenario over the manifest's questions), the solver, the models, the config. */
function evalOf(part: ArmPart, ctx: LogContext): Json {
  const { report: r, ledger, manifest } = ctx.input;
  const { arm, scenario, armRows } = part;
  const sampleIds = [...new Set(armRows.map((a) => a.task))];
  const pinned = ledger.expectedCliVersion;
  return {
    eval_set_id: null,
    eval_id: stableId(ledger.runId, arm, "eval"),
    run_id: ledger.runId,
    created: ledger.createdAt,
    task: scenario,
    task_id: stableId(ledger.runId, arm, "task"),
    task_version: manifest.version,
    task_file: ledger.protocol.manifestPath,
    task_display_name: `${manifest.title ?? "study"} · ${scenario}`,
    task_registry_name: null,
    task_attribs: {},
    task_args: {},
    task_args_passed: {},
    solver: `claude-code (${arm === "mcp" ? "repository tools and the doc-bridge MCP server" : "repository tools only"})`,
    solver_args: null,
    solver_args_passed: null,
    tags: [arm, ledger.mode],
    // Inspect counts dataset samples (the tasks) and epochs (the repetitions) apart: the viewer shows samples × epochs as the total.
    dataset: { name: manifest.title ?? null, location: ledger.protocol.manifestPath, samples: sampleIds.length, sample_ids: sampleIds, shuffled: false },
    sandbox: null,
    model: inspectModel(ledger.model),
    model_generate_config: NO_GENERATE_CONFIG,
    model_base_url: null,
    model_args: {},
    model_roles: r.adjudication ? { grader: { model: inspectModel(r.adjudication.model), config: NO_GENERATE_CONFIG, base_url: null, args: {} } } : null,
    config: { ...Object.fromEntries(EVAL_CONFIG_KEYS.map((k) => [k, null])), epochs: Math.max(1, ...armRows.map((a) => a.repetition)) },
    revision: null,
    packages: pinned ? { "claude-code": pinned } : {},
    metadata: evalMetadata(part, ctx),
    scorers: [{ name: INSPECT_SCORER, options: null, metrics: [{ name: "mean", options: null }], metadata: { outcome_scale: ctx.scale } }],
    metrics: null,
  };
}

/** The arm's results: samples planned and completed, and the scorer's mean and outcome counts. */
function resultsOf(part: ArmPart, ctx: LogContext): Json {
  const r = ctx.input.report;
  const dist = r.outcomes[part.scenario];
  const metrics: Record<string, Json> = {};
  if (dist?.meanScore !== null && dist?.meanScore !== undefined) metrics.mean = metric("mean", dist.meanScore);
  for (const [outcome, n] of Object.entries(dist?.counts ?? {})) metrics[outcome] = metric(outcome, n);
  return {
    total_samples: part.armRows.length,
    completed_samples: part.observations.filter((o) => o.status === "completed").length,
    early_stopping: null,
    scores: [
      {
        name: INSPECT_SCORER,
        scorer: INSPECT_SCORER,
        reducer: null,
        scored_samples: dist?.scored ?? 0,
        unscored_samples: part.armRows.length - (dist?.scored ?? 0),
        params: {},
        metrics,
        metadata: { outcome_scale: ctx.scale, note: "mean over scored attempts: correct 1, partial 0.5, incorrect and incomplete 0; blocked and missing have no score" },
      },
    ],
    metadata: null,
  };
}

/** The arm's first start, last end and usage summed per model over its samples. */
function statsOf(observations: readonly Observation[], samples: readonly Json[]): Json {
  const usage: Record<string, Json> = {};
  for (const s of samples) for (const [m, u] of Object.entries(s.model_usage as Record<string, Json>)) addUsage(usage, m, u);
  const starts = observations.flatMap((o) => (o.startedAt ? [o.startedAt] : [])).sort();
  const ends = samples.flatMap((s) => (typeof s.completed_at === "string" ? [s.completed_at] : [])).sort();
  return { started_at: starts[0] ?? "", completed_at: ends.at(-1) ?? "", model_usage: usage };
}

/** The log of one arm: its eval, plan, results, stats and samples; an error when the run is blocked. */
function armLog(arm: Arm, ctx: LogContext): InspectLog {
  const { report: r, ledger } = ctx.input;
  const part: ArmPart = { arm, scenario: r.scenarios[arm], observations: ledger.observations.filter((o) => o.arm === arm), armRows: r.attempts.filter((a) => a.arm === arm) };
  const samples = part.observations.map((o) => attemptSample(o, ctx));
  const status = ledger.status === "running" ? "started" : ledger.status === "blocked" ? "error" : "success";
  const log = {
    version: INSPECT_LOG_VERSION,
    status,
    eval: evalOf(part, ctx),
    plan: {
      name: "plan",
      steps: [{ solver: "claude-code", params: { scenario: part.scenario, arm, cli_version: ledger.cliVersion }, params_passed: {} }],
      finish: null,
      config: NO_GENERATE_CONFIG,
    },
    results: resultsOf(part, ctx),
    stats: statsOf(part.observations, samples),
    error: status === "error" ? { message: ledger.statusReason ?? "the run is blocked", traceback: "", traceback_ansi: "" } : null,
    invalidated: false,
    samples,
    reductions: null,
    eval_set_info: null,
  };
  return { arm, name: `${ledger.runId}_${part.scenario}.json`, log };
}

/** The logs of the study, one per arm, in the order of the manifest's scenarios. */
export function buildInspectLogs(input: InspectInput): InspectLog[] {
  const ctx: LogContext = {
    input,
    items: new Map((input.record?.items ?? []).map((i) => [i.observationIndex, i])),
    tasks: new Map(input.manifest.tasks.map((t) => [t.id, t])),
    rows: new Map(input.report.attempts.flatMap((a) => (a.index === null ? [] : [[a.index, a] as const]))),
    scale: Object.fromEntries(Object.entries(OUTCOME_SCORES)),
  };
  return ArmSchema.options.map((arm) => armLog(arm, ctx));
}
