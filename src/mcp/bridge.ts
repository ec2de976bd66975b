/**
 * Per-attempt delivery of the doc-bridge server. The container never runs the server and
 * never sees the checkout's .git or index: Claude Code inside it starts `mcp-relay.cjs`,
 * which joins its stdio to a unix socket bind-mounted from the host; here, on the host, each
 * bridge has a fresh server process of its own (cwd = its clone of the checkout), started before
 * the container so that the client does not wait for the engine's start, and handed the bridge's
 * one connection; every JSON-RPC message is recorded, so the transcript's doc-bridge calls can be
 * checked against what the server actually answered.
 */
import type { ChildProcess, ChildProcessWithoutNullStreams } from "node:child_process";
import { startChild } from "../process/child.ts";
import { rm } from "node:fs/promises";
import { assertSocketOwner, listenForContainer, makeSocketDir } from "../util/container-socket.ts";
import { createServer, type Server, type Socket } from "node:net";
import { performance } from "node:perf_hooks";
import { ALLOWED_DOC_BRIDGE_TOOLS, cliToolName, isDocBridgeCliName, DOC_BRIDGE_SERVER } from "../terms/tool-names.ts";
import { prepareEngineSandbox, type EngineSandbox } from "./engine-sandbox.ts";
import type { RepositoryKeys } from "./index-store.ts";
import { gitHead } from "../corpus/git.ts";

export const SOCKET_NAME = "mcp.sock";
export const CONTAINER_SOCKET_DIR = "/run/study-runner";
export const CONTAINER_RELAY_PATH = "/opt/study-runner/mcp-relay.cjs";
export const CONTAINER_NODE = "/usr/local/bin/node";
/** The uid and gid Claude Code runs as in the study image. */
export { CONTAINER_UID, CONTAINER_GID } from "../util/container-socket.ts";

/** The `--mcp-config` value of the doc-bridge arm: one stdio server, the relay, inside the container. */
export function containerMcpConfig(socketPath = `${CONTAINER_SOCKET_DIR}/${SOCKET_NAME}`): string {
  return JSON.stringify({
    mcpServers: {
      [DOC_BRIDGE_SERVER]: { type: "stdio", command: CONTAINER_NODE, args: [CONTAINER_RELAY_PATH, socketPath] },
    },
  });
}

export type Direction = "to-server" | "to-client";

export interface McpMessageRecord {
  direction: Direction;
  /** Milliseconds since the bridge started. */
  at: number;
  bytes: number;
  kind: "request" | "notification" | "response" | "unparsed" | "oversized";
  method?: string;
  id?: string | number;
  /** The tool name of a tools/call request, or of the request a response answers. */
  tool?: string;
  /** A response that is a JSON-RPC error or a tool result with isError true. */
  isError?: boolean;
}

export interface McpToolCallRecord {
  name: string;
  id: string | number;
  isError: boolean;
  /** Milliseconds from the request to the server's answer. */
  ms: number;
}

export interface McpBridgeRecord {
  /** Connections served (each with its own server process). */
  connections: number;
  /** Connections refused because one had already been served. */
  refusedConnections: number;
  /** JSON-RPC messages seen in both directions (and lines that did not parse). */
  messages: number;
  /** The first MAX_LOGGED_MESSAGES messages, metadata only; never payloads. */
  messageLog: McpMessageRecord[];
  messageLogTruncated: boolean;
  /** tools/call requests the server answered, in answer order. */
  toolCalls: McpToolCallRecord[];
  /** tools/call requests that never got an answer. */
  unansweredToolCalls: Array<{ name: string; id: string | number }>;
  /** Requests the bridge refused and never passed on: a tool outside the allowed set, or a line it could not check. */
  refusedToolCalls: Array<{ name: string; id: string | number | null }>;
  serverExits: Array<{ code: number | null; signal: string | null }>;
  spawnErrors: string[];
  /** The last bytes of the server's stderr, for diagnosis. */
  serverStderrTail: string;
}

/** Longest line the tap parses; longer ones are still relayed, recorded as "oversized". */
export const MAX_PARSED_LINE_BYTES = 4 * 1024 * 1024;
export const MAX_LOGGED_MESSAGES = 2000;
const STDERR_TAIL = 4096;

type Json = Record<string, unknown>;

/**
 * Records newline-delimited JSON-RPC (the MCP stdio framing) flowing both ways, keeping only
 * metadata. Pure: it sees copies of the bytes, the relay forwards the originals untouched.
 */
export class JsonRpcRecorder {
  private readonly start = performance.now();
  private readonly buffers: Record<Direction, { chunks: Buffer[]; size: number; oversized: boolean }> = {
    "to-server": { chunks: [], size: 0, oversized: false },
    "to-client": { chunks: [], size: 0, oversized: false },
  };
  /** The client's requests (any method; `tool` for a tools/call) the server has not answered yet, by id. */
  private readonly pending = new Map<string, { tool?: string; id: string | number; at: number }>();
  readonly record: Omit<McpBridgeRecord, "connections" | "refusedConnections" | "refusedToolCalls" | "serverExits" | "spawnErrors" | "serverStderrTail"> = {
    messages: 0,
    messageLog: [],
    messageLogTruncated: false,
    toolCalls: [],
    unansweredToolCalls: [],
  };

  constructor(private readonly now: () => number = () => performance.now() - this.start) {}

  push(direction: Direction, chunk: Buffer): void {
    const buf = this.buffers[direction];
    let from = 0;
    for (let nl = chunk.indexOf(0x0a, from); nl >= 0; nl = chunk.indexOf(0x0a, from)) {
      this.add(buf, chunk.subarray(from, nl));
      const line = buf.oversized ? undefined : Buffer.concat(buf.chunks);
      this.line(direction, line, buf.size);
      buf.chunks = [];
      buf.size = 0;
      buf.oversized = false;
      from = nl + 1;
    }
    if (from < chunk.length) this.add(buf, chunk.subarray(from));
  }

  /** How many of the client's requests still wait for the server's answer. */
  get awaitingAnswers(): number {
    return this.pending.size;
  }

  /** The pending tools/call requests become unanswered; call once the connection is over. */
  finish(): void {
    for (const p of this.pending.values()) if (p.tool !== undefined) this.record.unansweredToolCalls.push({ name: p.tool, id: p.id });
    this.pending.clear();
  }

  private add(buf: { chunks: Buffer[]; size: number; oversized: boolean }, part: Buffer): void {
    buf.size += part.length;
    if (buf.size > MAX_PARSED_LINE_BYTES) {
      buf.oversized = true;
      buf.chunks = [];
    } else if (part.length) buf.chunks.push(Buffer.from(part));
  }

  private log(entry: McpMessageRecord): void {
    this.record.messages++;
    if (this.record.messageLog.length < MAX_LOGGED_MESSAGES) this.record.messageLog.push(entry);
    else this.record.messageLogTruncated = true;
  }

  private line(direction: Direction, line: Buffer | undefined, bytes: number): void {
    const at = Math.round(this.now());
    if (line === undefined) return this.log({ direction, at, bytes, kind: "oversized" });
    const text = line.toString("utf8").replace(/\r$/, "");
    if (text.trim() === "") return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return this.log({ direction, at, bytes, kind: "unparsed" });
    }
    const messages = Array.isArray(parsed) ? parsed : [parsed];
    for (const m of messages) this.message(direction, at, messages.length === 1 ? bytes : 0, m);
  }

  private message(direction: Direction, at: number, bytes: number, m: unknown): void {
    if (!m || typeof m !== "object") return this.log({ direction, at, bytes, kind: "unparsed" });
    const msg = m as Json;
    const id = typeof msg.id === "string" || typeof msg.id === "number" ? msg.id : undefined;
    if (typeof msg.method === "string") {
      const entry: McpMessageRecord = { direction, at, bytes, kind: id === undefined ? "notification" : "request", method: msg.method, id };
      if (id !== undefined && direction === "to-server") {
        const params = msg.params as Json | undefined;
        if (msg.method === "tools/call") entry.tool = typeof params?.name === "string" ? params.name.slice(0, 200) : "(unnamed)";
        this.pending.set(JSON.stringify(id), { tool: entry.tool, id, at });
      }
      return this.log(entry);
    }
    if (id === undefined) return this.log({ direction, at, bytes, kind: "unparsed" });
    const result = msg.result as Json | undefined;
    const isError = msg.error !== undefined || result?.isError === true;
    const entry: McpMessageRecord = { direction, at, bytes, kind: "response", id, isError };
    // A response to the client answers one of its requests (the client's answers to the server's own requests are only logged).
    const request = direction === "to-client" ? this.pending.get(JSON.stringify(id)) : undefined;
    if (request) {
      this.pending.delete(JSON.stringify(id));
      if (request.tool !== undefined) {
        entry.tool = request.tool;
        this.record.toolCalls.push({ name: request.tool, id, isError, ms: at - request.at });
      }
    }
    this.log(entry);
  }
}

export interface GateOutput {
  /** Lines to hand the server, each re-serialized from what was checked, newline-terminated. */
  forward: Buffer[];
  /** JSON-RPC error answers for refused requests, to send back to the client. */
  replies: Buffer[];
  refused: Array<{ name: string; id: string | number | null }>;
}

/**
 * The bridge's own deny list: only `tools/call` of an allowed tool reaches the server. The CLI's
 * --disallowedTools is the first fence; this one holds even when a client ignores it. The server
 * gets the re-serialized form of what was checked, never the original bytes, so a line that
 * another JSON parser would read differently (duplicate keys, odd whitespace) cannot smuggle a
 * call past the check; a line that does not parse, or is over the size bound, is dropped.
 */
export class ToolCallGate {
  private chunks: Buffer[] = [];
  private size = 0;
  private oversized = false;

  constructor(private readonly allowed: ReadonlySet<string>) {}

  push(chunk: Buffer): GateOutput {
    const out: GateOutput = { forward: [], replies: [], refused: [] };
    let from = 0;
    for (let nl = chunk.indexOf(0x0a, from); nl >= 0; nl = chunk.indexOf(0x0a, from)) {
      this.add(chunk.subarray(from, nl));
      const line = this.oversized ? undefined : Buffer.concat(this.chunks);
      this.chunks = [];
      this.size = 0;
      this.oversized = false;
      this.line(line, out);
      from = nl + 1;
    }
    if (from < chunk.length) this.add(chunk.subarray(from));
    return out;
  }

  private add(part: Buffer): void {
    this.size += part.length;
    if (this.size > MAX_PARSED_LINE_BYTES) {
      this.oversized = true;
      this.chunks = [];
    } else if (part.length) this.chunks.push(Buffer.from(part));
  }

  private line(line: Buffer | undefined, out: GateOutput): void {
    if (line === undefined) return void out.refused.push({ name: "(oversized line)", id: null });
    const text = line.toString("utf8");
    if (text.trim() === "") return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return void out.refused.push({ name: "(unparsed line)", id: null });
    }
    const batch = Array.isArray(parsed);
    const kept = (batch ? (parsed as unknown[]) : [parsed]).filter((m) => {
      if (!m || typeof m !== "object") return true;
      const msg = m as Json;
      if (msg.method !== "tools/call") return true;
      const name = (msg.params as Json | undefined)?.name;
      if (typeof name === "string" && this.allowed.has(name)) return true;
      const id = typeof msg.id === "string" || typeof msg.id === "number" ? msg.id : null;
      const shown = typeof name === "string" ? name.slice(0, 200) : "(unnamed)";
      out.refused.push({ name: shown, id });
      if (id !== null) {
        const error = { code: -32601, message: `study-runner: tool ${shown} is not allowed in this study (allowed: ${[...this.allowed].join(", ")})` };
        out.replies.push(Buffer.from(JSON.stringify({ jsonrpc: "2.0", id, error }) + "\n"));
      }
      return false;
    });
    if (kept.length) out.forward.push(Buffer.from(JSON.stringify(batch ? kept : kept[0]) + "\n"));
  }
}

export interface McpBridgeOptions {
  /** Executable and arguments of the doc-bridge engine (never a shell string). */
  command: readonly string[];
  /** The checkout at the pin; the server runs in its own clone of it (src/mcp/engine-sandbox.ts). */
  cwd: string;
  /** The pin; default: the checkout's HEAD (the preflight checked it is the pin). */
  pin?: string;
  /** A directory to create for the socket (must not exist); default: a fresh one under the temp dir. */
  socketDir?: string;
  /** Server tool names a client may call (default: the three allowed doc-bridge tools). */
  allowedTools?: readonly string[];
  /** Owner of the socket when the runner is root (default 1000:1000, the container user). */
  containerUid?: number;
  containerGid?: number;
  /**
   * The engine's sandbox, made ahead by the caller with `engineSandboxFor` (which also starts the
   * engine in it); made here otherwise. The bridge stops the engine and removes the sandbox.
   */
  sandbox?: Promise<EngineSandbox | StartedEngine>;
}

/** What one engine process did, from its start: the bridge record's server fields. */
interface EngineServer {
  child: ChildProcessWithoutNullStreams;
  exits: McpBridgeRecord["serverExits"];
  spawnErrors: string[];
  stderrTail: string;
  /** The child's stdio closed (it exited and its output was read to the end). */
  closed: boolean;
  /** Where its stdout goes: held here until the connection comes, then the connection's. */
  stdout: { early: Buffer[]; bytes: number; sink?: (d: Buffer) => void };
}

/** Output an engine may write before anyone connected; past it the pipe holds the rest. */
const MAX_EARLY_OUTPUT_BYTES = 1024 * 1024;

/** A sandbox with its engine started in it, waiting for the one connection of its bridge. */
export interface StartedEngine extends EngineSandbox {
  server: EngineServer;
}

/**
 * Starts the engine in its sandbox now, before anyone connects: one fresh process for one bridge,
 * so the container's client does not wait for the engine's own start (Node, its modules, its
 * index). What it writes before the connection is held for the connection (MAX_EARLY_OUTPUT_BYTES,
 * then the pipe holds the rest); `remove` kills it (if still running) and removes the sandbox.
 */
export function startEngine(sandbox: EngineSandbox): StartedEngine {
  const [command, ...args] = sandbox.command as [string, ...string[]];
  const child = startChild(command, args, { cwd: sandbox.cwd, env: sandbox.env });
  const server: EngineServer = { child, exits: [], spawnErrors: [], stderrTail: "", closed: false, stdout: { early: [], bytes: 0 } };
  child.stdout.on("data", (d: Buffer) => {
    const out = server.stdout;
    if (out.sink) return out.sink(d);
    out.early.push(d);
    out.bytes += d.length;
    if (out.bytes > MAX_EARLY_OUTPUT_BYTES) child.stdout.pause();
  });
  child.on("error", (err) => server.spawnErrors.push(err.message));
  child.on("exit", (code, signal) => server.exits.push({ code, signal }));
  child.on("close", () => (server.closed = true));
  child.stdin.on("error", () => {});
  child.stderr.on("data", (d: Buffer) => {
    server.stderrTail = (server.stderrTail + d.toString("utf8")).slice(-STDERR_TAIL);
  });
  const remove = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    for (const stream of [child.stdin, child.stdout, child.stderr]) stream.destroy();
    await sandbox.remove();
  };
  return { ...sandbox, server, remove };
}

/** The engine's own clone and index copy for one bridge (src/mcp/engine-sandbox.ts), with the engine started in it. */
export async function engineSandboxFor(opts: Pick<McpBridgeOptions, "command" | "cwd" | "pin"> & { keys?: RepositoryKeys }): Promise<StartedEngine> {
  return startEngine(await prepareEngineSandbox({ command: opts.command, checkout: opts.cwd, pin: opts.pin ?? (await gitHead(opts.cwd)), keys: opts.keys }));
}

export interface McpBridge {
  /** Host directory holding the socket; bind-mount it at CONTAINER_SOCKET_DIR. */
  socketDir: string;
  socketPath: string;
  /** The bind mount for the attempt's container. Read-only is enough to connect to a socket. */
  mount: { source: string; target: string; readOnly: boolean };
  /** The record so far (a copy). */
  snapshot(): McpBridgeRecord;
  /** Kills the server, closes the socket, removes the socket dir and returns the record. */
  stop(): Promise<McpBridgeRecord>;
}

function waitForExit(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/** Ends the engine's stdin; SIGTERM after 0.5 s, SIGKILL 2 s later. */
async function stopEngine(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.stdin?.end();
  if (await waitForExit(child, 500)) return;
  child.kill("SIGTERM");
  if (await waitForExit(child, 2000)) return;
  child.kill("SIGKILL");
  await waitForExit(child, 2000);
}

/** The bridge's own counts, beside the engine's and the recorder's. */
interface BridgeState {
  connections: number;
  refusedConnections: number;
  refusedToolCalls: McpBridgeRecord["refusedToolCalls"];
  active?: Socket;
}

/**
 * The socket's connection handler: the first connection is joined to the engine (each line from
 * the client through the gate, both directions recorded); any later one is refused. One attempt,
 * one connection, one fresh server: a second connection could share or replay state between what
 * should be independent sessions.
 */
function serveOneConnection(server: EngineServer, state: BridgeState, recorder: JsonRpcRecorder, gate: ToolCallGate): (socket: Socket) => void {
  return (socket) => {
    if (state.connections > 0) {
      state.refusedConnections++;
      socket.destroy();
      return;
    }
    state.connections++;
    state.active = socket;
    socket.on("error", () => {});
    const proc = server.child;
    // An engine that could not be started, or that has already exited with nothing to say.
    if (server.spawnErrors.length > 0) return void socket.destroy();
    proc.on("error", () => socket.destroy());
    // The client has ended its side (its stdio server's stdin ended: the MCP SDK's stdio client, and
    // the fake CLI, then wait for that process to exit). Once every request it sent is answered, the
    // connection ends at once: the relay's exit, and so the container's, does not wait for the engine's.
    let clientEnded = false;
    const endIfDone = () => {
      if (clientEnded && recorder.awaitingAnswers === 0 && !socket.writableEnded) socket.end();
    };
    const ended = () => {
      recorder.finish();
      if (!socket.writableEnded) socket.end();
    };
    // What the engine wrote before the connection, then the rest as it comes (backpressure kept);
    // still recorded, no longer sent, once the connection has ended.
    const toClient = (d: Buffer) => {
      recorder.push("to-client", d);
      if (socket.writableEnded) return;
      if (!socket.write(d)) {
        proc.stdout.pause();
        socket.once("drain", () => proc.stdout.resume());
      }
      endIfDone();
    };
    for (const d of server.stdout.early.splice(0)) toClient(d);
    server.stdout.sink = toClient;
    proc.stdout.resume();
    if (server.closed) return ended();
    proc.on("close", ended);
    socket.on("data", (d: Buffer) => {
      const out = gate.push(d);
      state.refusedToolCalls.push(...out.refused);
      for (const line of out.forward) {
        recorder.push("to-server", line);
        proc.stdin.write(line);
      }
      for (const reply of out.replies) socket.write(reply);
    });
    socket.on("end", () => {
      clientEnded = true;
      proc.stdin.end();
      endIfDone();
    });
  };
}

/** The sandbox with its engine started: the caller's (made ahead), or one made and started now. */
async function startedEngine(opts: McpBridgeOptions): Promise<StartedEngine> {
  const sandbox = await (opts.sandbox ?? engineSandboxFor(opts));
  return "server" in sandbox ? sandbox : startEngine(sandbox);
}

export async function startMcpBridge(opts: McpBridgeOptions): Promise<McpBridge> {
  if (!opts.command[0]) throw new Error("MCP bridge: the engine command is empty");
  // The socket must be reachable by the container user and by nobody else.
  assertSocketOwner("MCP bridge", opts);
  const engine = await startedEngine(opts);
  let socketDir: string;
  try {
    socketDir = await makeSocketDir(opts.socketDir, "study-runner-mcp-");
  } catch (err) {
    await engine.remove();
    throw err;
  }
  const recorder = new JsonRpcRecorder();
  const gate = new ToolCallGate(new Set(opts.allowedTools ?? ALLOWED_DOC_BRIDGE_TOOLS));
  const state: BridgeState = { connections: 0, refusedConnections: 0, refusedToolCalls: [] };
  const server: Server = createServer({ allowHalfOpen: true }, serveOneConnection(engine.server, state, recorder, gate));
  let socketPath: string;
  try {
    socketPath = await listenForContainer(server, socketDir, SOCKET_NAME, opts);
  } catch (err) {
    // The engine started above would otherwise outlive the attempt and keep the runner from exiting.
    await stopEngine(engine.server.child);
    await rm(socketDir, { recursive: true, force: true });
    await engine.remove();
    throw err;
  }

  const snapshot = (): McpBridgeRecord =>
    structuredClone({
      connections: state.connections,
      refusedConnections: state.refusedConnections,
      ...recorder.record,
      refusedToolCalls: state.refusedToolCalls,
      serverExits: engine.server.exits,
      spawnErrors: engine.server.spawnErrors,
      serverStderrTail: engine.server.stderrTail,
    });

  let stopped: Promise<McpBridgeRecord> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      // close() stops new connections now but calls back only once the open one is gone.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      await stopEngine(engine.server.child);
      state.active?.destroy();
      await closed;
      recorder.finish();
      await rm(socketDir, { recursive: true, force: true });
      await engine.remove();
      return snapshot();
    })());

  return { socketDir, socketPath, mount: { source: socketDir, target: CONTAINER_SOCKET_DIR, readOnly: true }, snapshot, stop };
}

/**
 * Problems when the transcript and the server disagree: a doc-bridge call the transcript
 * shows that never reached the server (or the reverse), per tool, in Claude Code's names.
 * `transcriptCalls` is either the tool_use names or a `toolCallsByName` count map; names
 * outside `mcp__doc-bridge__*` are ignored.
 */
export function compareMcpRecord(
  record: Pick<McpBridgeRecord, "toolCalls" | "unansweredToolCalls" | "refusedConnections"> & Partial<Pick<McpBridgeRecord, "refusedToolCalls">>,
  transcriptCalls: readonly string[] | Readonly<Record<string, number>>,
): string[] {
  const claimed = new Map<string, number>();
  const entries: Array<[string, number]> = Array.isArray(transcriptCalls)
    ? (transcriptCalls as readonly string[]).map((n) => [n, 1])
    : Object.entries(transcriptCalls as Readonly<Record<string, number>>);
  for (const [name, n] of entries) if (isDocBridgeCliName(name)) claimed.set(name, (claimed.get(name) ?? 0) + n);

  const answered = new Map<string, number>();
  for (const call of record.toolCalls) answered.set(cliToolName(call.name), (answered.get(cliToolName(call.name)) ?? 0) + 1);

  const problems: string[] = [];
  for (const name of [...new Set([...claimed.keys(), ...answered.keys()])].sort()) {
    const c = claimed.get(name) ?? 0;
    const a = answered.get(name) ?? 0;
    if (c > a) problems.push(`the transcript shows ${c} call(s) of ${name} but the doc-bridge server answered ${a}`);
    else if (a > c) problems.push(`the doc-bridge server answered ${a} call(s) of ${name} but the transcript shows ${c}`);
  }
  for (const u of record.unansweredToolCalls) problems.push(`the doc-bridge server never answered ${cliToolName(u.name)} (request id ${String(u.id)})`);
  for (const r of record.refusedToolCalls ?? [])
    problems.push(`the bridge refused ${r.name.startsWith("(") ? `a request ${r.name}` : `a call of ${cliToolName(r.name)}`}: only the allowed doc-bridge tools reach the server`);
  if (record.refusedConnections > 0) problems.push(`${record.refusedConnections} extra connection(s) to the doc-bridge socket were refused`);
  return problems;
}
