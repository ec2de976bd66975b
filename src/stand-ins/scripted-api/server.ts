import { createHash, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createTlsServer } from "node:https";
import { chmod, lstat, unlink } from "node:fs/promises";
import { parseScripts, TurnSchema, type Script, type ScriptInput, type ScriptedUsage, type Turn } from "./script.ts";

/**
 * A scripted Anthropic Messages API for the real Claude Code CLI (and for tests and the demo):
 * it drives real tool calls at zero cost. What 2.1.296 sends and accepts is measured in
 * docs/claude-cli-observations.md; the rules below cite it.
 */

export interface StartScriptedApiOptions {
  /** Listen on this unix socket (for containers: bind-mount its folder, relay inside). */
  socketPath?: string;
  /** Listen on 127.0.0.1:<port> (0: any free port). Exactly one of socketPath and port. */
  port?: number;
  /** One script, or several selected by marker or claimed in order (see ScriptSchema.marker). */
  script?: ScriptInput | readonly ScriptInput[];
  /**
   * Instead of a script: choose each turn from the request as it arrives (exactly one of
   * `script` and `respond`). A measurement that adapts to what the CLI reports, such as a
   * bisection on the CLI's running cost, needs this; `undefined` fails the request closed
   * like a script that ran out of turns.
   */
  respond?: (request: DynamicRequest) => Turn | undefined;
  /** Keep each request's parsed JSON body in its record (large: the system prompt is in it). */
  recordBodies?: boolean;
  /**
   * Awaited before each Messages request is answered, while the client waits (tests inspect the
   * attempt's container at that moment: it is running and blocked on this reply).
   */
  onRequest?: (record: RecordedRequest) => Promise<void> | void;
  /** Serve HTTPS with this key and certificate (the gateway's upstream in tests: TLS on loopback with a test CA). */
  tls?: { key: string | Buffer; cert: string | Buffer };
  /**
   * Wait this long before answering each Messages request (scripted turns, errors and faults
   * alike), as a model that takes time to answer: benchmarks of concurrent attempts need the
   * wait that dominates a real attempt.
   */
  turnDelayMs?: number;
}

/** What `respond` sees of one Messages request. */
export interface DynamicRequest {
  /** The parsed JSON body (messages, system, model, …). */
  body: Record<string, unknown>;
  /** The record of the request so far (its `answer` is filled in afterwards). */
  record: RecordedRequest;
}

export interface ToolResultSummary {
  toolUseId: string;
  isError: boolean;
  /** The text of the result (text blocks joined), at most 4,000 characters. */
  content: string;
}

/** What the server answered; `script`/`turn` name the scripted turn when one was served. */
export type Answer =
  | { kind: "hello" }
  | { kind: "tool-calls"; script: string; turn: number; toolUseIds: string[]; messageId: string }
  | { kind: "answer"; script: string; turn: number; messageId: string }
  | { kind: "error"; status: number; errorType: string; script?: string; turn?: number; reason: string }
  | { kind: "fault"; fault: "connection-reset" | "hang" | "missing-usage"; script: string; turn: number }
  | { kind: "count-tokens"; inputTokens: number }
  | { kind: "not-found" };

export interface RecordedRequest {
  /** Arrival order, from 0. */
  seq: number;
  at: string;
  method: string;
  /** Path with the query string, e.g. `/v1/messages?beta=true`. */
  path: string;
  /** Lower-case names; `authorization` and `x-api-key` values are replaced by `[redacted]`. */
  headers: Record<string, string>;
  /** A bearer token was sent; only a sha256 prefix of it is kept, never the token. */
  auth: { bearer: boolean; bearerSha256Prefix?: string; apiKey: boolean };
  body?: {
    model?: string;
    stream?: boolean;
    maxTokens?: number;
    messageCount: number;
    /** Roles of `messages` in order (shows the CLI's trailing `system` entries). */
    roles: string[];
    assistantTurns: number;
    toolNames: string[];
    /** The tool results of the newest user message, found by scanning back past `system` entries. */
    newestToolResults: ToolResultSummary[];
    firstUserText: string;
  };
  /**
   * Which conversation (CLI session) the request belongs to: `session:<id>` from the
   * `x-claude-code-session-id` header (measured: 2.1.296 sends it on every request) or the
   * body's `metadata.user_id`, else `first-message:<sha256>` of the first user message.
   */
  conversation?: string;
  /** The parsed body when `recordBodies` was set. */
  rawBody?: unknown;
  /** Set when the body was not JSON. */
  bodyProblem?: string;
  answer: Answer;
}

export interface ScriptedApi {
  /** `http://127.0.0.1:<port>` when listening on TCP. */
  url?: string;
  socketPath?: string;
  /** Every request in arrival order (a live array). */
  readonly requests: RecordedRequest[];
  /** The queued script each conversation claimed, keyed by `RecordedRequest.conversation`. */
  readonly claims: ReadonlyMap<string, string>;
  close(): Promise<void>;
}

/** The name records give the turns a `respond` function chose. */
const DYNAMIC_SCRIPT: Script = {
  name: "dynamic",
  turns: [{ answer: "dynamic", usage: { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 } }],
  neverEnd: false,
};

const MAX_BODY_BYTES = 32 * 1024 * 1024;
const RESULT_TEXT_LIMIT = 4000;

interface Message {
  role?: unknown;
  content?: unknown;
}

interface Block {
  type?: unknown;
  text?: unknown;
  content?: unknown;
  tool_use_id?: unknown;
  is_error?: unknown;
}

function blocks(content: unknown): Block[] {
  if (typeof content === "string") return [{ type: "text", text: content }];
  return Array.isArray(content) ? content.filter((b): b is Block => typeof b === "object" && b !== null) : [];
}

function textOf(content: unknown): string {
  return blocks(content)
    .filter((b) => b.type === "text" && typeof b.text === "string")
    .map((b) => b.text as string)
    .join("\n");
}

/**
 * The tool results the model is answering: the CLI appends `role: "system"` entries after the
 * last user message (measured), so scan back past them to the newest other message.
 */
export function newestToolResults(messages: readonly Message[]): ToolResultSummary[] {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role === "system") continue;
    if (m.role !== "user") return [];
    return blocks(m.content)
      .filter((b) => b.type === "tool_result")
      .map((b) => ({
        toolUseId: typeof b.tool_use_id === "string" ? b.tool_use_id : "",
        isError: b.is_error === true,
        content: textOf(b.content).slice(0, RESULT_TEXT_LIMIT),
      }));
  }
  return [];
}

function firstUserText(messages: readonly Message[]): string {
  const first = messages.find((m) => m.role === "user");
  return first ? textOf(first.content) : "";
}

function conversationKey(headers: Record<string, string>, metadata: unknown, first: string): string {
  const header = headers["x-claude-code-session-id"];
  if (header) return `session:${header}`;
  const userId = (metadata as { user_id?: unknown } | undefined)?.user_id;
  if (typeof userId === "string") {
    try {
      const sessionId = (JSON.parse(userId) as { session_id?: unknown }).session_id;
      if (typeof sessionId === "string" && sessionId !== "") return `session:${sessionId}`;
    } catch {
      // Older CLIs put a plain string here; fall through to the first message.
    }
  }
  return `first-message:${sha256(first)}`;
}

function sha256(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

function redactHeaders(req: IncomingMessage): { headers: Record<string, string>; auth: RecordedRequest["auth"] } {
  const headers: Record<string, string> = {};
  const auth: RecordedRequest["auth"] = { bearer: false, apiKey: false };
  for (const [name, value] of Object.entries(req.headers)) {
    const text = Array.isArray(value) ? value.join(", ") : (value ?? "");
    if (name === "authorization") {
      const token = /^Bearer\s+(.+)$/i.exec(text)?.[1];
      if (token !== undefined) {
        auth.bearer = true;
        // 12 hex digits tell two logins apart in a record without letting anyone use one.
        auth.bearerSha256Prefix = sha256(token).slice(0, 12);
      }
      headers[name] = "[redacted]";
    } else if (name === "x-api-key") {
      auth.apiKey = true;
      headers[name] = "[redacted]";
    } else {
      headers[name] = text;
    }
  }
  return { headers, auth };
}

function id(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString("hex")}`;
}

function sse(res: ServerResponse, event: string, data: unknown): void {
  res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}

function startUsage(u: ScriptedUsage): Record<string, unknown> {
  return {
    input_tokens: u.input_tokens,
    cache_creation_input_tokens: u.cache_creation_input_tokens,
    cache_read_input_tokens: u.cache_read_input_tokens,
    ...(u.cache_creation ? { cache_creation: u.cache_creation } : {}),
    // The API's own placeholder: the real count arrives in message_delta (measured: the CLI's
    // per-message usage keeps this 1, its totals use the message_delta count).
    output_tokens: 1,
  };
}

type ContentBlock = { type: "text"; text: string } | { type: "thinking"; thinking: string; signature: string } | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> };

function writeMessage(
  res: ServerResponse,
  stream: boolean,
  model: string,
  messageId: string,
  content: ContentBlock[],
  stopReason: "tool_use" | "end_turn",
  usage: ScriptedUsage | undefined,
  deltaUsage?: Record<string, number | undefined>,
): void {
  const headers = { "request-id": id("req") };
  if (!stream) {
    res.writeHead(200, { ...headers, "content-type": "application/json" });
    res.end(
      JSON.stringify({
        id: messageId,
        type: "message",
        role: "assistant",
        model,
        content,
        stop_reason: stopReason,
        stop_sequence: null,
        ...(usage ? { usage: { ...startUsage(usage), output_tokens: usage.output_tokens } } : {}),
      }),
    );
    return;
  }
  res.writeHead(200, { ...headers, "content-type": "text/event-stream", "cache-control": "no-cache" });
  sse(res, "message_start", {
    type: "message_start",
    message: { id: messageId, type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, ...(usage ? { usage: startUsage(usage) } : {}) },
  });
  content.forEach((block, index) => {
    if (block.type === "text") {
      sse(res, "content_block_start", { type: "content_block_start", index, content_block: { type: "text", text: "" } });
      sse(res, "content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text: block.text } });
    } else if (block.type === "thinking") {
      sse(res, "content_block_start", { type: "content_block_start", index, content_block: { type: "thinking", thinking: "", signature: "" } });
      sse(res, "content_block_delta", { type: "content_block_delta", index, delta: { type: "thinking_delta", thinking: block.thinking } });
      sse(res, "content_block_delta", { type: "content_block_delta", index, delta: { type: "signature_delta", signature: block.signature } });
    } else {
      sse(res, "content_block_start", {
        type: "content_block_start",
        index,
        content_block: { type: "tool_use", id: block.id, name: block.name, input: {} },
      });
      sse(res, "content_block_delta", {
        type: "content_block_delta",
        index,
        delta: { type: "input_json_delta", partial_json: JSON.stringify(block.input) },
      });
    }
    sse(res, "content_block_stop", { type: "content_block_stop", index });
  });
  sse(res, "message_delta", { type: "message_delta", delta: { stop_reason: stopReason, stop_sequence: null }, ...(usage ? { usage: { ...deltaUsage, output_tokens: usage.output_tokens } } : {}) });
  sse(res, "message_stop", { type: "message_stop" });
  res.end();
}

function writeError(res: ServerResponse, status: number, type: string, message: string, retryAfterSeconds?: number): void {
  res.writeHead(status, { "content-type": "application/json", "request-id": id("req"), ...(retryAfterSeconds === undefined ? {} : { "retry-after": String(retryAfterSeconds) }) });
  res.end(JSON.stringify({ type: "error", error: { type, message } }));
}

async function readBody(req: IncomingMessage): Promise<Buffer | "too-large"> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) return "too-large";
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/**
 * The turn for a request with `assistantTurns` assistant messages: error turns sit before the
 * turn that follows them and are served until their `times` run out (`served` counts them per
 * script, so the state lives with the server, not the request).
 */
function pickTurn(script: Script, assistantTurns: number, served: number[]): { turn: Turn; index: number } | undefined {
  let answered = 0;
  for (let i = 0; i < script.turns.length; i++) {
    const turn = script.turns[i]!;
    if ("error" in turn || "fault" in turn) {
      if (answered === assistantTurns && served[i]! < (turn.times ?? Infinity)) {
        served[i]!++;
        return { turn, index: i };
      }
      continue;
    }
    if (answered === assistantTurns) return { turn, index: i };
    answered++;
  }
  if (!script.neverEnd) return undefined;
  for (let i = script.turns.length - 1; i >= 0; i--) if ("toolCalls" in script.turns[i]!) return { turn: script.turns[i]!, index: i };
  return undefined;
}

/** Starts the server; resolves once it listens. */
export async function startScriptedApi(options: StartScriptedApiOptions): Promise<ScriptedApi> {
  if ((options.socketPath === undefined) === (options.port === undefined)) {
    throw new Error("startScriptedApi needs exactly one of socketPath and port");
  }
  if ((options.script === undefined) === (options.respond === undefined)) {
    throw new Error("startScriptedApi needs exactly one of script and respond");
  }
  const scripted = new ScriptedAnswers(options);
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    scripted.handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) writeError(res, 500, "api_error", `scripted API fault: ${(err as Error).message}`);
      else res.destroy();
    });
  };
  const server: Server = options.tls ? createTlsServer({ key: options.tls.key, cert: options.tls.cert }, listener) : createServer(listener);
  // The CLI keeps connections alive between turns; close() must not wait for it to hang up.
  server.keepAliveTimeout = 5_000;
  const url = await listen(server, options);
  return {
    url,
    socketPath: options.socketPath,
    requests: scripted.requests,
    claims: scripted.claims,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}

/** Listens on the unix socket (open to the container user) or on loopback TCP; the URL when on TCP. */
async function listen(server: Server, options: StartScriptedApiOptions): Promise<string | undefined> {
  if (options.socketPath !== undefined) {
    // A killed run leaves its socket file behind; replace that, but never another kind of file.
    const existing = await lstat(options.socketPath).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return undefined;
      throw err;
    });
    if (existing && !existing.isSocket()) throw new Error(`scripted API: ${options.socketPath} exists and is not a socket`);
    if (existing) await unlink(options.socketPath);
  }
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    if (options.socketPath !== undefined) server.listen(options.socketPath, resolve);
    else server.listen(options.port, "127.0.0.1", resolve);
  });
  if (options.socketPath !== undefined) {
    // The container user (uid 1000) must be able to connect; the folder's mode guards access.
    await chmod(options.socketPath, 0o666);
    return undefined;
  }
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("scripted API: no TCP address");
  return `${options.tls ? "https" : "http"}://127.0.0.1:${address.port}`;
}

/** Answers a request with a 400 invalid_request_error the CLI does not retry, and records why. */
function refuse(res: ServerResponse, record: RecordedRequest, reason: string, script?: Script): void {
  record.answer = { kind: "error", status: 400, errorType: "invalid_request_error", ...(script ? { script: script.name } : {}), reason };
  writeError(res, 400, "invalid_request_error", `scripted API: ${reason}`);
}

/** What the record keeps of a Messages request's body, and the conversation's messages and first user text. */
function summarizeBody(body: Record<string, unknown>): { summary: NonNullable<RecordedRequest["body"]>; messages: Message[]; first: string } {
  const messages = (Array.isArray(body.messages) ? body.messages : []).filter((m): m is Message => typeof m === "object" && m !== null);
  const tools = Array.isArray(body.tools) ? body.tools : [];
  const first = firstUserText(messages);
  const summary = {
    model: typeof body.model === "string" ? body.model : undefined,
    stream: typeof body.stream === "boolean" ? body.stream : undefined,
    maxTokens: typeof body.max_tokens === "number" ? body.max_tokens : undefined,
    messageCount: messages.length,
    roles: messages.map((m) => String(m.role)),
    assistantTurns: messages.filter((m) => m.role === "assistant").length,
    toolNames: tools.map((t) => (typeof t === "object" && t !== null ? String((t as { name?: unknown }).name) : "")),
    newestToolResults: newestToolResults(messages),
    firstUserText: first.slice(0, RESULT_TEXT_LIMIT),
  };
  return { summary, messages, first };
}

/** Drops the request's connection unanswered: a TCP RST where there is TCP (the client sees ECONNRESET); a unix socket can only be closed. */
function resetConnection(req: IncomingMessage): void {
  // A TLS socket cannot always send a RST (it throws); then the connection is closed unanswered.
  try {
    if (req.socket.remoteFamily) req.socket.resetAndDestroy();
    else req.socket.destroy();
  } catch {
    req.socket.destroy();
  }
}

/** A Messages request on its way to its turn: its record, its parsed body and the model it named. */
interface MessagesRequest {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly record: RecordedRequest;
  readonly body: Record<string, unknown>;
  readonly model: string;
}

/**
 * The server's side of the conversations: the scripts, the turns each has served, the script
 * each conversation claimed, and every request recorded in arrival order.
 */
class ScriptedAnswers {
  readonly requests: RecordedRequest[] = [];
  readonly claims = new Map<string, string>();
  private readonly scripts: Script[];
  private readonly served: Map<string, number[]>;

  constructor(private readonly options: StartScriptedApiOptions) {
    this.scripts = options.script === undefined ? [] : parseScripts(options.script as ScriptInput | ScriptInput[]);
    this.served = new Map(this.scripts.map((s) => [s.name, s.turns.map(() => 0)]));
  }

  /** The script a conversation follows: one its first message or tools select, else the one it claimed, else the next unclaimed one. */
  private scriptFor(firstText: string, conversation: string, toolNames: readonly string[]): Script | undefined {
    const { scripts, claims } = this;
    const selects = (s: Script) => s.marker !== undefined || s.tool !== undefined;
    const marked = scripts.find((s) => selects(s) && (s.marker === undefined || firstText.includes(s.marker)) && (s.tool === undefined || toolNames.includes(s.tool)));
    if (marked) return marked;
    const key = conversation;
    const claimed = claims.get(key);
    if (claimed !== undefined) return scripts.find((s) => s.name === claimed);
    const taken = new Set(claims.values());
    const next = scripts.find((s) => !selects(s) && !taken.has(s.name));
    if (next) claims.set(key, next.name);
    return next;
  }

  /** One request: recorded, routed, its body read, and answered with its conversation's turn. */
  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const record = this.recordArrival(req);
    const path = (req.url ?? "").split("?")[0];
    if (path === "/api/hello" && (req.method === "HEAD" || req.method === "GET")) {
      record.answer = { kind: "hello" };
      res.writeHead(200, { "content-type": "application/json" });
      res.end(req.method === "GET" ? "{}" : undefined);
      return;
    }
    if (req.method !== "POST" || (path !== "/v1/messages" && path !== "/v1/messages/count_tokens")) {
      await readBody(req);
      writeError(res, 404, "not_found_error", `scripted API: no route ${req.method} ${path}`);
      return;
    }
    const read = await this.readJson(req, res, record);
    if (!read) return;
    const { body, raw } = read;
    if (this.options.recordBodies) record.rawBody = body;
    const { summary, messages, first } = summarizeBody(body);
    record.body = summary;
    record.conversation = conversationKey(record.headers, body.metadata, first);
    await this.options.onRequest?.(record);
    if (path === "/v1/messages/count_tokens") {
      // Only the size matters to the CLI; a rough count keeps it from deciding to compact.
      const inputTokens = Math.ceil(raw.length / 4);
      record.answer = { kind: "count-tokens", inputTokens };
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ input_tokens: inputTokens }));
      return;
    }
    const model = summary.model;
    if (model === undefined || messages.length === 0) return refuse(res, record, "request has no model or no messages");
    await this.answer({ req, res, record, body, model }, first);
  }

  private recordArrival(req: IncomingMessage): RecordedRequest {
    const { headers, auth } = redactHeaders(req);
    const record: RecordedRequest = {
      seq: this.requests.length,
      at: new Date().toISOString(),
      method: req.method ?? "",
      path: req.url ?? "",
      headers,
      auth,
      answer: { kind: "not-found" },
    };
    this.requests.push(record);
    return record;
  }

  /** The body as one JSON object; undefined when it was too large or not one (answered 413 or 400). */
  private async readJson(req: IncomingMessage, res: ServerResponse, record: RecordedRequest): Promise<{ body: Record<string, unknown>; raw: Buffer } | undefined> {
    const raw = await readBody(req);
    if (raw === "too-large") {
      record.bodyProblem = "body over 32 MiB";
      record.answer = { kind: "error", status: 413, errorType: "request_too_large", reason: record.bodyProblem };
      writeError(res, 413, "request_too_large", "scripted API: request body too large");
      return undefined;
    }
    try {
      const parsed: unknown = JSON.parse(raw.toString("utf8"));
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("not a JSON object");
      return { body: parsed as Record<string, unknown>, raw };
    } catch (err) {
      record.bodyProblem = `body is not a JSON object: ${(err as Error).message}`;
      refuse(res, record, record.bodyProblem);
      return undefined;
    }
  }

  /** The turn `respond` chooses, or the conversation's script's next one. */
  private chooseTurn(m: MessagesRequest, first: string): { script: Script | undefined; picked: { turn: Turn; index: number } | undefined } {
    const summary = m.record.body!;
    if (this.options.respond) {
      const turn = this.options.respond({ body: m.body, record: m.record });
      return { script: DYNAMIC_SCRIPT, picked: turn === undefined ? undefined : { turn: TurnSchema.parse(turn), index: summary.assistantTurns } };
    }
    const script = this.scriptFor(first, m.record.conversation!, summary.toolNames);
    return { script, picked: script ? pickTurn(script, summary.assistantTurns, this.served.get(script.name)!) : undefined };
  }

  /** Serves the conversation's turn (after the configured delay): an error, a fault, an answer or tool calls. */
  private async answer(m: MessagesRequest, first: string): Promise<void> {
    const { req, res, record, model } = m;
    const { script, picked } = this.chooseTurn(m, first);
    if (!script) return refuse(res, record, "no script matches this conversation");
    // Fail closed: a conversation longer than its script is a broken test, not a reason to
    // invent an answer. 400 is not retried by the CLI, so the run ends at once.
    if (!picked) return refuse(res, record, `script ${script.name} has no turn after ${record.body!.assistantTurns} assistant turns`, script);
    const { turn, index } = picked;
    if (this.options.turnDelayMs) await new Promise((r) => setTimeout(r, this.options.turnDelayMs));
    const stream = m.body.stream === true;
    if ("error" in turn) {
      record.answer = { kind: "error", status: turn.error.status, errorType: turn.error.type, script: script.name, turn: index, reason: "scripted" };
      const echoed = turn.echoApiKey ? ` (x-api-key: ${String(req.headers["x-api-key"] ?? "")})` : "";
      writeError(res, turn.error.status, turn.error.type, turn.error.message + echoed, turn.retryAfterSeconds);
      return;
    }
    if ("fault" in turn) {
      record.answer = { kind: "fault", fault: turn.fault, script: script.name, turn: index };
      if (turn.fault === "connection-reset") resetConnection(req);
      else if (turn.fault === "missing-usage") writeMessage(res, stream, model, id("msg"), [{ type: "text", text: "scripted answer without usage" }], "end_turn", undefined);
      // "hang": no reply; close() ends the connection.
      return;
    }
    const messageId = id("msg");
    if ("answer" in turn) {
      record.answer = { kind: "answer", script: script.name, turn: index, messageId };
      writeMessage(res, stream, model, messageId, [{ type: "text", text: turn.answer }], "end_turn", turn.usage, turn.deltaUsage);
      return;
    }
    const toolBlocks = turn.toolCalls.map((c) => ({ type: "tool_use" as const, id: id("toolu"), name: c.name, input: c.input }));
    record.answer = { kind: "tool-calls", script: script.name, turn: index, toolUseIds: toolBlocks.map((b) => b.id), messageId };
    const content: ContentBlock[] = [
      ...(turn.thinking ? [{ type: "thinking" as const, thinking: turn.thinking, signature: randomBytes(48).toString("base64") }] : []),
      ...(turn.text ? [{ type: "text" as const, text: turn.text }] : []),
      ...toolBlocks,
    ];
    writeMessage(res, stream, model, messageId, content, "tool_use", turn.usage, turn.deltaUsage);
  }
}
