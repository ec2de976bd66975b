import {
  AssistantEventSchema,
  InitEventSchema,
  MessageUsageSchema,
  parseModelUsage,
  ResultEventSchema,
  ResultUsageSchema,
  ToolResultBlockSchema,
  ToolUseBlockSchema,
  UserEventSchema,
  type ModelUsageEntry,
} from "../claude/events.ts";
import type { Arm } from "../terms/terms.ts";
import { isDeepStrictEqual } from "node:util";
import type { ExpectedInit } from "../claude/init-expectation.ts";
import { formatPath } from "../util/zod-errors.ts";

/**
 * Reads a Claude Code stream-json transcript line by line and records the evidence that the
 * transcript rules need (contract R31 to R40, R46): the init event's model, tool set and
 * MCP servers, every tool call, denials, tool errors, the final result and its usage. Memory
 * does not grow with the transcript beyond counts, id sets, one entry per API message and the
 * last result; stored names and lists are capped, so a hostile stream cannot blow memory.
 */

export interface TranscriptExpectation {
  arm: Arm;
  /** The requested model, e.g. `claude-haiku-5-5`. */
  model: string;
  /** The exact init tool set, e.g. `["Glob","Grep","Read"]`, plus the three doc-bridge tools in the mcp arm. */
  expectedTools: readonly string[];
  /** Default `doc-bridge`. */
  mcpServerName?: string;
  /** When set, the init event's `claude_code_version` must equal it (the pinned CLI). */
  cliVersion?: string;
  /**
   * The whole init event this run's arguments produce, as measured on the pinned CLI
   * (src/claude/init-expectation.ts, `expectedInit`): every field is compared with it (contract R125).
   */
  init: ExpectedInit;
}

export type SetupProblemCode =
  /** A line that is not a JSON object. */
  | "not-json"
  /** The last line is not JSON: what a kill or the output bound leaves behind. */
  | "last-line-not-json"
  | "malformed-event"
  | "no-init"
  | "several-inits"
  | "malformed-init"
  | "init-model"
  | "init-tools"
  | "mcp-servers"
  | "no-result"
  | "several-results"
  | "result-not-last"
  | "malformed-result"
  | "tool-outside-set"
  | "unknown-tool-result"
  | "permission-denial"
  | "doc-bridge-all-errors"
  | "inconsistent-usage"
  /** init `apiKeySource` is not "none": the CLI used a key, not its own login (contract R38). */
  | "api-key-source"
  /** init `claude_code_version` is not the pinned version. */
  | "cli-version"
  /** An init field differs from the measured init of this kind of run (contract R125). */
  | "init-field"
  /** The model gateway refused a foreign request, or its metered usage differs from the transcript's (set by the CLI stage). */
  | "gateway"
  /** The engine-api channel's stream broke its format or bounds (set by the CLI stage, contract R242). */
  | "sandbox-stream"
  /** A session's worktree came back from the engine-api channel incomplete (set by the CLI stage, contract R245). */
  | "sandbox-copy-back"
  /** The doc-bridge bridge's record differs from the transcript's doc-bridge calls (set by the CLI stage, contract R40). */
  | "doc-bridge-record";

export interface McpServerFact {
  name: string;
  status: string;
}

export interface PermissionDenialFact {
  toolName: string;
  toolUseId: string;
  toolInput: unknown;
}

/** A doc-bridge tool call, for the MCP relay to compare with what the server answered. */
export interface DocBridgeCall {
  id: string;
  name: string;
  input: unknown;
  /** `true` if a `tool_result` with `is_error: true` came back, `false` if only successes, `null` if none. */
  isError: boolean | null;
}

export interface PerMessageUsage {
  messageId: string;
  inputTokens: number;
  cacheReadInputTokens: number;
  cacheCreationInputTokens: number;
}

export interface TranscriptFacts {
  arm: Arm;
  requestedModel: string;
  /** Non-empty lines read. */
  lines: number;

  initModel: string | null;
  initTools: string[] | null;
  initMcpServers: McpServerFact[] | null;
  apiKeySource: string | null;
  claudeCodeVersion: string | null;

  /** Every `tool_use` counted once by id, refused calls included. */
  toolCalls: number;
  toolCallsByName: Record<string, number>;
  /** Tool uses with a `tool_result` of `is_error: true`, once per id, keyed by full tool name. */
  toolErrorsByName: Record<string, number>;
  /** From the last result's `permission_denials`. */
  permissionDenials: PermissionDenialFact[];
  docBridgeCalls: DocBridgeCall[];
  /** More doc-bridge calls happened than `docBridgeCalls` holds. */
  docBridgeCallsTruncated: boolean;

  /** A `result` event was read (the last one supplies the fields below). */
  resultSeen: boolean;
  cliSubtype: string | null;
  isError: boolean | null;
  numTurns: number | null;
  /** `result.result`: the private answer. Never printed. */
  answer: string | null;
  inputTokens: number | null;
  outputTokens: number | null;
  cacheCreationInputTokens: number | null;
  cacheReadInputTokens: number | null;
  cacheCreation: { ephemeral5mInputTokens: number; ephemeral1hInputTokens: number } | null;
  modelUsage: Record<string, ModelUsageEntry> | null;
  /** `total_cost_usd` when it is a finite number (validity is judged by the cost check). */
  reportedCostUsd: number | null;
  /** A result with well-formed `usage` and `modelUsage` was read. */
  usageComplete: boolean;
  /** Prompt-side usage of each distinct API message (`message.id`). */
  perMessageUsage: PerMessageUsage[];

  /** Human-readable; never holds the answer or any line's content. */
  setupProblems: string[];
  /** Distinct codes of all setup problems (also those beyond the message cap). */
  setupProblemCodes: SetupProblemCode[];
}

export const DEFAULT_MCP_SERVER = "doc-bridge";
/** The built-in read tools whose denial is recorded and accepted (contract R36). */
export const READ_TOOLS: ReadonlySet<string> = new Set(["Read", "Grep", "Glob"]);

const MAX_PROBLEMS = 100;
const MAX_NAME = 200;
const MAX_LISTED = 1000;
const MAX_KEYS = 256;
const OTHER_KEY = "(other names)";
/** Differences of the init event named one by one; beyond them, one line says there are more. */
const MAX_INIT_FIELD_PROBLEMS = 20;
/** A JSON value shown in a problem, capped. */
const MAX_SHOWN = 300;

/** What the last result event supplies, plus the non-read tools it reports as denied. */
type LastResult = Pick<
  TranscriptFacts,
  | "cliSubtype"
  | "isError"
  | "numTurns"
  | "answer"
  | "inputTokens"
  | "outputTokens"
  | "cacheCreationInputTokens"
  | "cacheReadInputTokens"
  | "cacheCreation"
  | "modelUsage"
  | "reportedCostUsd"
  | "usageComplete"
  | "permissionDenials"
> & { deniedOthers: Set<string> };

/** What the facts hold when no result event was read: every field unknown, usage incomplete, no denial (in the order onResult writes them). */
function noResult(): LastResult {
  return {
    cliSubtype: null,
    isError: null,
    numTurns: null,
    answer: null,
    inputTokens: null,
    outputTokens: null,
    cacheCreationInputTokens: null,
    cacheReadInputTokens: null,
    cacheCreation: null,
    modelUsage: null,
    reportedCostUsd: null,
    usageComplete: false,
    permissionDenials: [],
    deniedOthers: new Set(),
  };
}

const RESULT_ERROR = 1;
const RESULT_OK = 2;

export class TranscriptReader {
  private readonly expected: ReadonlySet<string>;
  private readonly serverName: string;
  private readonly docBridgePrefix: string;

  private lineCount = 0;
  private pendingBadLine: number | null = null;
  private lastWasResult = false;
  private initCount = 0;
  private resultCount = 0;
  private finished: TranscriptFacts | null = null;

  private readonly problems: string[] = [];
  private problemCount = 0;
  private readonly codes = new Set<SetupProblemCode>();
  private readonly reportedOutside = new Set<string>();

  private init: Pick<TranscriptFacts, "initModel" | "initTools" | "initMcpServers" | "apiKeySource" | "claudeCodeVersion"> = {
    initModel: null,
    initTools: null,
    initMcpServers: null,
    apiKeySource: null,
    claudeCodeVersion: null,
  };

  /** tool_use id -> (capped) tool name. */
  private readonly toolNames = new Map<string, string>();
  /** tool_use id -> RESULT_ERROR | RESULT_OK bits of the results seen. */
  private readonly toolResults = new Map<string, number>();
  private readonly callsByName = new Map<string, number>();
  private readonly errorsByName = new Map<string, number>();
  private readonly docBridgeIds: string[] = [];
  private readonly docBridgeCalls = new Map<string, DocBridgeCall>();
  private readonly messages = new Map<string, PerMessageUsage>();
  private result: LastResult | null = null;

  constructor(private readonly exp: TranscriptExpectation) {
    this.serverName = exp.mcpServerName ?? DEFAULT_MCP_SERVER;
    this.docBridgePrefix = `mcp__${this.serverName}__`;
    this.expected = new Set(exp.expectedTools);
    // A wrong expectation is the runner's own bug, not an attempt outcome.
    if (this.expected.size !== exp.expectedTools.length) throw new Error("expectedTools has duplicates");
    const mcpTools = exp.expectedTools.filter((t) => t.startsWith("mcp__"));
    if (exp.arm === "repository" && mcpTools.length > 0) throw new Error("the repository arm expects no MCP tool");
    if (exp.arm === "mcp" && !mcpTools.some((t) => t.startsWith(this.docBridgePrefix))) {
      throw new Error(`the mcp arm expects at least one ${this.docBridgePrefix}* tool`);
    }
  }

  /**
   * One line of stdout without its newline. An empty line (the remainder after the final
   * newline) carries no event and is skipped; anything else must be a JSON object.
   */
  pushLine(line: string): void {
    if (this.finished) throw new Error("pushLine after finish");
    if (line.length === 0) return;
    this.lineCount++;
    const n = this.lineCount;
    if (this.pendingBadLine !== null) {
      this.problem("not-json", `line ${this.pendingBadLine} is not JSON`);
      this.pendingBadLine = null;
    }
    this.lastWasResult = false;

    let event: unknown;
    try {
      event = JSON.parse(line);
    } catch {
      // Held back: if it turns out to be the last line, a kill or the output bound may have cut it.
      this.pendingBadLine = n;
      return;
    }
    if (typeof event !== "object" || event === null || Array.isArray(event)) {
      this.problem("not-json", `line ${n} is JSON but not an event object`);
      return;
    }
    const type = (event as { type?: unknown }).type;
    if (typeof type !== "string") {
      this.problem("malformed-event", `line ${n} has no string "type"`);
      return;
    }
    switch (type) {
      case "system":
        if ((event as { subtype?: unknown }).subtype === "init") this.onInit(event, n);
        break;
      case "assistant":
        this.onAssistant(event, n);
        break;
      case "user":
        this.onUser(event, n);
        break;
      case "result":
        this.onResult(event as Record<string, unknown>, n);
        this.lastWasResult = true;
        break;
      default:
        // Unknown event types (e.g. rate_limit_event, measured between turns) are not a broken stream.
        break;
    }
  }

  finish(): TranscriptFacts {
    if (this.finished) return this.finished;
    if (this.pendingBadLine !== null) {
      this.problem("last-line-not-json", `the last line (${this.pendingBadLine}) is not JSON`);
      this.pendingBadLine = null;
    }
    if (this.initCount === 0) this.problem("no-init", "no init event");
    if (this.resultCount === 0) this.problem("no-result", "no result event");
    if (this.resultCount > 1) this.problem("several-results", `${this.resultCount} result events; exactly one is allowed`);
    if (this.resultCount > 0 && !this.lastWasResult) this.problem("result-not-last", "the result event is not the last event");

    const r = this.result;
    for (const name of r?.deniedOthers ?? []) {
      // A denied built-in read is recorded and accepted; any other denial (a refused
      // doc-bridge call included) means the arm did not get the tools it should have.
      this.problem("permission-denial", `permission denied for ${quote(name)}; only Read, Grep and Glob denials are accepted`);
    }

    if (this.exp.arm === "mcp") {
      // Stricter than "every call returned an error" (docs/doc-bridge.md, "All errors"): the
      // treatment was lost when no doc-bridge call ever succeeded and at least one failed, so a
      // call that got no result counts with the errors, since it delivered nothing either. Alone
      // (e.g. a kill mid-call) an unanswered call is not evidence of a broken server.
      let errors = 0;
      let successes = 0;
      let unanswered = 0;
      for (const id of this.docBridgeIds) {
        const bits = this.toolResults.get(id) ?? 0;
        if (bits & RESULT_OK) successes++;
        else if (bits & RESULT_ERROR) errors++;
        else unanswered++;
      }
      if (errors > 0 && successes === 0) {
        const rest = unanswered > 0 ? ` and ${unanswered} more got no result` : "";
        this.problem("doc-bridge-all-errors", `all ${errors} doc-bridge tool results were errors${rest}; the treatment was lost`);
      }
    }

    if (this.problemCount > this.problems.length) {
      this.problems.push(`… and ${this.problemCount - this.problems.length} more setup problems`);
    }

    // The last result's fields, in the facts' order; without a result, each is unknown.
    const { deniedOthers: _checkedAbove, permissionDenials, ...last } = r ?? noResult();
    this.finished = {
      arm: this.exp.arm,
      requestedModel: this.exp.model,
      lines: this.lineCount,
      ...this.init,
      toolCalls: this.toolNames.size,
      toolCallsByName: Object.fromEntries(this.callsByName),
      toolErrorsByName: Object.fromEntries(this.errorsByName),
      permissionDenials,
      docBridgeCalls: [...this.docBridgeCalls.values()],
      docBridgeCallsTruncated: this.docBridgeIds.length > this.docBridgeCalls.size,
      resultSeen: r !== null,
      ...last,
      perMessageUsage: [...this.messages.values()],
      setupProblems: [...this.problems],
      setupProblemCodes: [...this.codes],
    };
    return this.finished;
  }

  private onInit(event: object, n: number): void {
    this.initCount++;
    if (this.initCount === 2) this.problem("several-inits", `a second init event on line ${n}; exactly one is allowed`);
    if (this.initCount > 1) return;
    const parsed = InitEventSchema.safeParse(event);
    if (!parsed.success) {
      this.problem("malformed-init", `line ${n}: init event is malformed at ${issuePaths(parsed.error.issues)}`);
      return;
    }
    const init = parsed.data;
    // Fields a dedicated check below already reported; the whole-event comparison does not repeat them.
    const flagged = new Set<string>();

    this.init = {
      initModel: cap(init.model),
      initTools: init.tools.slice(0, MAX_LISTED).map(cap),
      initMcpServers: init.mcp_servers.slice(0, MAX_LISTED).map((s) => ({ name: cap(s.name), status: cap(s.status) })),
      apiKeySource: init.apiKeySource === undefined ? null : cap(init.apiKeySource),
      claudeCodeVersion: init.claude_code_version === undefined ? null : cap(init.claude_code_version),
    };

    // The study runs on the CLI's own login; a key reaching the child is a broken setup (contract R38).
    if (init.apiKeySource !== undefined && init.apiKeySource !== "none") {
      this.problem("api-key-source", `init apiKeySource is ${quote(init.apiKeySource)}; the CLI must authenticate with its own login ("none")`);
      flagged.add("apiKeySource");
    }
    if (this.exp.cliVersion !== undefined && init.claude_code_version !== this.exp.cliVersion) {
      this.problem("cli-version", `init claude_code_version ${quote(init.claude_code_version ?? "(missing)")} is not the pinned ${quote(this.exp.cliVersion)}`);
      flagged.add("claude_code_version");
    }
    if (init.model !== this.exp.model) {
      this.problem("init-model", `init model ${quote(init.model)} is not the requested ${quote(this.exp.model)}`);
      flagged.add("model");
    }

    const seen = new Set<string>();
    const duplicated = new Set<string>();
    for (const t of init.tools) (seen.has(t) ? duplicated : seen).add(t);
    const missing = [...this.expected].filter((t) => !seen.has(t));
    const extra = [...seen].filter((t) => !this.expected.has(t));
    if (missing.length + extra.length + duplicated.size > 0) {
      const parts = [missing.length ? `missing ${list(missing)}` : "", extra.length ? `extra ${list(extra)}` : "", duplicated.size ? `duplicated ${list([...duplicated])}` : ""].filter(Boolean);
      this.problem("init-tools", `init tools are not exactly the expected set: ${parts.join("; ")}`);
      flagged.add("tools");
    }

    const servers = init.mcp_servers;
    const describe = () => list(servers.map((s) => `${s.name} (${s.status})`));
    if (this.exp.arm === "mcp") {
      // A server that fails at start is silent in -p mode and the run still succeeds (facts,
      // "MCP servers, measured"): only this check notices the treatment is gone.
      const ok = servers.length === 1 && servers[0]!.name === this.serverName && servers[0]!.status === "connected";
      if (!ok) {
        this.problem("mcp-servers", `init mcp_servers must be exactly one ${quote(this.serverName)} server, connected; got ${describe()}`);
        flagged.add("mcp_servers");
      }
    } else {
      if (servers.length > 0) {
        this.problem("mcp-servers", `the repository arm must have no MCP server; init lists ${describe()}`);
        flagged.add("mcp_servers");
      }
      const mcpTools = init.tools.filter((t) => t.startsWith("mcp__"));
      if (mcpTools.length > 0) {
        this.problem("init-tools", `the repository arm must have no MCP tool; init lists ${list(mcpTools)}`);
        flagged.add("tools");
      }
    }
    this.compareWholeInit(event as Record<string, unknown>, flagged);
  }

  /**
   * Every field of the init event against the measured init of this kind of run (contract R125):
   * a field the measurement has must be there with the same value (a field set by the run's
   * arguments, such as the model, with that value); a field that varies per run by nature must be
   * there in its shape; any other field is one the runner never configured.
   */
  private compareWholeInit(event: Record<string, unknown>, flagged: ReadonlySet<string>): void {
    const { kind, fields, varying } = this.exp.init;
    const keys = [...new Set([...Object.keys(event), ...Object.keys(fields), ...Object.keys(varying)])].sort();
    let reported = 0;
    for (const key of keys) {
      // The tool list is compared as a set by the init-tools check above: its order carries no meaning.
      if (flagged.has(key) || key === "tools") continue;
      if (reported >= MAX_INIT_FIELD_PROBLEMS) {
        this.problem("init-field", `init differs from the measured ${kind} init in more fields than shown`);
        return;
      }
      const has = Object.hasOwn(event, key);
      const shape = varying[key];
      let message: string | null = null;
      if (shape !== undefined) {
        if (!has) message = `init field ${quote(key)} is missing; the measured ${kind} init has it (${shape.reason})`;
        else if (typeof event[key] !== "string" || !shape.shape.test(event[key]))
          message = `init field ${quote(key)} is ${show(event[key])}, which does not have the measured shape ${shape.shape} (${shape.reason})`;
      } else if (!Object.hasOwn(fields, key)) {
        message = `init field ${quote(key)} is ${show(event[key])}, a field the measured ${kind} init does not have`;
      } else if (!has) {
        message = `init field ${quote(key)} is missing; the measured ${kind} init has ${show(fields[key])}`;
      } else if (!isDeepStrictEqual(event[key], fields[key])) {
        message = `init field ${quote(key)} is ${show(event[key])}; the measured ${kind} init has ${show(fields[key])}`;
      }
      if (message !== null) {
        this.problem("init-field", message);
        reported++;
      }
    }
  }

  private onAssistant(event: object, n: number): void {
    const parsed = AssistantEventSchema.safeParse(event);
    if (!parsed.success) {
      this.problem("malformed-event", `line ${n}: assistant event is malformed at ${issuePaths(parsed.error.issues)}`);
      return;
    }
    const message = parsed.data.message;
    if (message.usage !== undefined) {
      const usage = MessageUsageSchema.safeParse(message.usage);
      if (!usage.success) {
        this.problem("malformed-event", `line ${n}: assistant message usage is malformed at ${issuePaths(usage.error.issues)}`);
      } else {
        // Each content block is its own event repeating the message's id and usage (measured):
        // one entry per id. A repeat whose prompt side differs cannot be priced.
        const u: PerMessageUsage = {
          messageId: message.id,
          inputTokens: usage.data.input_tokens,
          cacheReadInputTokens: usage.data.cache_read_input_tokens,
          cacheCreationInputTokens: usage.data.cache_creation_input_tokens,
        };
        const before = this.messages.get(message.id);
        if (before === undefined) this.messages.set(message.id, u);
        else if (before.inputTokens !== u.inputTokens || before.cacheReadInputTokens !== u.cacheReadInputTokens || before.cacheCreationInputTokens !== u.cacheCreationInputTokens) {
          this.problem("inconsistent-usage", `line ${n}: message ${quote(message.id)} repeats with a different prompt usage`);
        }
      }
    }
    for (const block of message.content) {
      if (block.type !== "tool_use" && !block.type.endsWith("_tool_use")) continue;
      const use = ToolUseBlockSchema.safeParse(block);
      if (!use.success) {
        this.problem("malformed-event", `line ${n}: a ${quote(block.type)} block is malformed at ${issuePaths(use.error.issues)}`);
        continue;
      }
      this.onToolUse(use.data.id, use.data.name, use.data.input);
    }
  }

  private onToolUse(id: string, name: string, input: unknown): void {
    // Checked on every sighting, so an id reused with another name cannot smuggle a tool in.
    if (!this.expected.has(name) && !this.reportedOutside.has(name)) {
      if (this.reportedOutside.size < MAX_KEYS) this.reportedOutside.add(name);
      this.problem("tool-outside-set", `tool call to ${quote(name)}, which is outside the allowed set`);
    }
    if (this.toolNames.has(id)) return;
    const capped = cap(name);
    this.toolNames.set(id, capped);
    bump(this.callsByName, capped);
    if (name.startsWith(this.docBridgePrefix)) {
      this.docBridgeIds.push(id);
      if (this.docBridgeCalls.size < MAX_LISTED) this.docBridgeCalls.set(id, { id, name: capped, input, isError: null });
    }
  }

  private onUser(event: object, n: number): void {
    const parsed = UserEventSchema.safeParse(event);
    if (!parsed.success) {
      this.problem("malformed-event", `line ${n}: user event is malformed at ${issuePaths(parsed.error.issues)}`);
      return;
    }
    const content = parsed.data.message.content;
    if (typeof content === "string") return;
    for (const block of content) {
      if (block.type !== "tool_result") continue;
      const res = ToolResultBlockSchema.safeParse(block);
      if (!res.success) {
        this.problem("malformed-event", `line ${n}: a tool_result block is malformed at ${issuePaths(res.error.issues)}`);
        continue;
      }
      const id = res.data.tool_use_id;
      const name = this.toolNames.get(id);
      if (name === undefined) {
        // A result we cannot attribute is a tool call we could not check.
        this.problem("unknown-tool-result", `line ${n}: a tool_result for tool_use id ${quote(id)}, which was never called`);
        continue;
      }
      const bits = this.toolResults.get(id) ?? 0;
      const isError = res.data.is_error === true;
      if (isError && !(bits & RESULT_ERROR)) bump(this.errorsByName, name);
      this.toolResults.set(id, bits | (isError ? RESULT_ERROR : RESULT_OK));
      const call = this.docBridgeCalls.get(id);
      if (call) call.isError = isError || call.isError === true;
    }
  }

  private onResult(event: Record<string, unknown>, n: number): void {
    this.resultCount++;
    // Field by field, so one malformed field does not hide the others; the cost fields are
    // read even from a malformed result so that its cost is charged (contract R31, R45).
    const shape = ResultEventSchema.shape;
    const bad: string[] = [];
    const field = <T>(key: keyof typeof shape & string, schema: { safeParse(v: unknown): { success: true; data: T } | { success: false } }): T | undefined => {
      const parsed = schema.safeParse(event[key]);
      if (parsed.success) return parsed.data;
      bad.push(key);
      return undefined;
    };
    const subtype = field("subtype", shape.subtype);
    const isError = field("is_error", shape.is_error);
    const numTurns = field("num_turns", shape.num_turns);
    const answer = field("result", shape.result);
    const denials = field("permission_denials", shape.permission_denials);
    if (bad.length > 0) this.problem("malformed-result", `line ${n}: result event has malformed or missing ${bad.join(", ")}`);

    const usage = ResultUsageSchema.safeParse(event.usage);
    const modelUsage = parseModelUsage(event.modelUsage);
    const cost = event.total_cost_usd;
    const split = usage.success ? usage.data.cache_creation : undefined;
    this.result = {
      cliSubtype: subtype === undefined ? null : cap(subtype),
      isError: isError ?? null,
      numTurns: numTurns ?? null,
      answer: answer ?? null,
      inputTokens: usage.success ? usage.data.input_tokens : null,
      outputTokens: usage.success ? usage.data.output_tokens : null,
      cacheCreationInputTokens: usage.success ? usage.data.cache_creation_input_tokens : null,
      cacheReadInputTokens: usage.success ? usage.data.cache_read_input_tokens : null,
      cacheCreation: split ? { ephemeral5mInputTokens: split.ephemeral_5m_input_tokens, ephemeral1hInputTokens: split.ephemeral_1h_input_tokens } : null,
      modelUsage,
      reportedCostUsd: typeof cost === "number" && Number.isFinite(cost) ? cost : null,
      usageComplete: usage.success && modelUsage !== null && Object.keys(modelUsage).length > 0,
      permissionDenials: (denials ?? []).slice(0, MAX_LISTED).map((d) => ({ toolName: cap(d.tool_name), toolUseId: cap(d.tool_use_id), toolInput: d.tool_input })),
      // Every denial is checked, also those beyond the stored list.
      deniedOthers: new Set(
        (denials ?? [])
          .map((d) => cap(d.tool_name))
          .filter((t) => !READ_TOOLS.has(t))
          .slice(0, MAX_KEYS),
      ),
    };
  }

  private problem(code: SetupProblemCode, message: string): void {
    this.codes.add(code);
    this.problemCount++;
    if (this.problems.length < MAX_PROBLEMS) this.problems.push(message);
  }
}

/** The whole transcript at once; `text` is stdout as read. */
export function readTranscript(text: string, exp: TranscriptExpectation): TranscriptFacts {
  const reader = new TranscriptReader(exp);
  for (const line of text.split("\n")) reader.pushLine(line);
  return reader.finish();
}

function cap(s: string): string {
  return s.length > MAX_NAME ? `${s.slice(0, MAX_NAME)}…` : s;
}

function quote(s: string): string {
  return JSON.stringify(cap(s));
}

function show(value: unknown): string {
  const text = value === undefined ? "undefined" : JSON.stringify(value);
  return text.length > MAX_SHOWN ? `${text.slice(0, MAX_SHOWN)}…` : text;
}

function list(items: readonly string[]): string {
  if (items.length === 0) return "none";
  const shown = items.slice(0, 10).map(quote).join(", ");
  return items.length > 10 ? `${shown} and ${items.length - 10} more` : shown;
}

function bump(map: Map<string, number>, key: string): void {
  const k = map.has(key) || map.size < MAX_KEYS ? key : OTHER_KEY;
  map.set(k, (map.get(k) ?? 0) + 1);
}

function issuePaths(issues: readonly { path: readonly PropertyKey[] }[]): string {
  const paths = [...new Set(issues.map((i) => formatPath(i.path)))];
  return cap(paths.slice(0, 5).join(", "));
}
