import { createHash, randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { rm } from "node:fs/promises";
import { performance } from "node:perf_hooks";
import { isIP, type Socket } from "node:net";
import { picoToUsd, usdToPico } from "../cost/money.ts";
import { pricesFor } from "../cost/prices.ts";
import { assertSocketOwner, listenForContainer, makeSocketDir } from "../util/container-socket.ts";
import { promptTokens, type MeteredUsage } from "../cost/usage.ts";
import { parseStrictJson, StrictJsonError } from "../util/strict-json.ts";
import { activeProfile } from "../profile/load.ts";
import { jsonReplyFacts, meteredCostPico, requestBound, SseMeter, type ReplyFacts } from "./meter.ts";
import { headerProblem, parseTarget, shapeProblem, targetProblem, type RequestShapes } from "./request-shape.ts";

/**
 * The model gateway (docs/gateway.md): the one way an attempt container reaches the Messages
 * API when the runner holds the credential. One gateway per run; each attempt gets its own unix
 * socket (a fresh folder bind-mounted into that attempt's container only) and its own random
 * placeholder token, so every request is bound to one attempt twice over: by the socket it came
 * in on and by the token it carries. The gateway swaps the placeholder for the real credential,
 * forwards only the measured requests of the pinned CLI for the study's model, reads every reply
 * as it streams to meter it, and refuses a request before it is sent when its worst-case cost
 * would pass what the attempt may still spend.
 */

export const DEFAULT_UPSTREAM = "https://api.anthropic.com";
export const GATEWAY_SOCKET_NAME = "model-api.sock";
/**
 * The largest request body forwarded. The pinned CLI's bodies grow with the conversation (the
 * whole history is re-sent each turn); a 1,000,000-token context is a few MiB of JSON.
 */
export const MAX_REQUEST_BYTES = 16 * 1024 * 1024;
/** Requests kept in an attempt's record; later ones are counted in the totals only. */
export const MAX_RECORDED_REQUESTS = 2000;

/**
 * The status of a refusal the CLI stops on (measured with the scripted API, docs/gateway.md):
 * a 400 invalid_request_error ends the run without the retries a 429 or 5xx gets.
 */
export const REFUSAL_STATUS = 400;
export const REFUSAL_TYPE = "invalid_request_error";

/**
 * Connections one attempt may hold open at once. The pinned CLI sends one request at a time per
 * conversation over a kept-alive connection; a connection beyond this is closed unanswered as it
 * is accepted, counted, and makes the attempt invalid-setup.
 */
export const MAX_ATTEMPT_CONNECTIONS = 8;
/**
 * Request-body bytes one attempt may have buffered in the runner at once, across all its
 * connections: one request of the largest size. A body that would pass it is refused (413) and
 * its connection closed, so many stalled uploads cannot grow the runner's memory
 * (bench/gateway-memory.ts).
 */
export const MAX_ATTEMPT_BUFFERED_BYTES = MAX_REQUEST_BYTES;

export type RefusalKind = "budget" | "unknown-token" | "foreign-placeholder" | "model" | "path" | "header" | "size" | "body" | "upstream-redirect" | "upstream-unreachable";

export interface GatewayRequestRecord {
  seq: number;
  method: string;
  /** Path and query as asked. */
  path: string;
  /** The HTTP status the CLI got. */
  status: number;
  requestBytes: number;
  /** The request's model, when its body named one. */
  requestModel: string | null;
  messageId: string | null;
  /** The reply's model. */
  model: string | null;
  inputTokens: number | null;
  cacheReadInputTokens: number | null;
  cacheWrite5mInputTokens: number | null;
  cacheWrite1hInputTokens: number | null;
  outputTokens: number | null;
  /** The stream ended with message_stop (or a whole JSON message was read). */
  complete: boolean;
  /** The worst case the ceiling checked before sending, USD. */
  boundUsd: number | null;
  /** The list-price cost of the metered usage (the bound when the reply broke off), USD. */
  costUsd: number | null;
  ttfbMs: number | null;
  durationMs: number;
  refused: { kind: RefusalKind; reason: string } | null;
  /** The sha256 of the request body as forwarded; null when it was not read (contract R176). */
  requestSha256?: string | null;
  /** The sha256 of the reply body's bytes as relayed to the CLI; null when no reply was relayed. */
  replySha256?: string | null;
  /** The sha256 of the reply message's canonical content (text, tool calls; src/transcript/content.ts), null when not known whole. */
  contentSha256?: string | null;
}

export interface GatewayRecord {
  requests: GatewayRequestRecord[];
  /** Requests not kept in `requests` (beyond MAX_RECORDED_REQUESTS). */
  dropped: number;
  forwarded: number;
  refused: number;
  meteredCostUsd: number;
  /** A request was refused because its bound would pass the attempt's limit. */
  budgetRefused: boolean;
  /** Anything that makes the attempt invalid-setup: a foreign model or token, an unlisted request, impossible usage. */
  setupProblems: string[];
}

export interface UpstreamOptions {
  /** `https://host[:port]`; DEFAULT_UPSTREAM unless a test sets it. */
  url: string;
  /** Tests: a CA to trust instead of the system's (the scripted API's own). */
  ca?: string | Buffer;
}

export interface GatewayOptions {
  model: string;
  upstream?: UpstreamOptions;
  maxRequestBytes?: number;
  /** The request shapes admitted: the measured ones of the run's CLI version (its calibration profile) unless a test gives others. */
  requestShapes?: RequestShapes;
  /** Connections per attempt (MAX_ATTEMPT_CONNECTIONS; the memory benchmark's unbounded baseline sets Infinity). */
  attemptConnections?: number;
  /** Request-body bytes buffered per attempt (MAX_ATTEMPT_BUFFERED_BYTES, at most maxRequestBytes; the baseline sets Infinity). */
  attemptBufferedBytes?: number;
  /** Owner of the socket when the runner is root (default the container user). */
  containerUid?: number;
  containerGid?: number;
}

export interface AttemptGatewayOptions {
  /** A folder to create for the socket (must not exist). */
  socketDir?: string;
  /** The real credential (an OAuth access token): sent upstream as `Authorization: Bearer`, never anywhere else. */
  credential: string;
  /** What the attempt may spend in all (its reservation), USD. */
  limitUsd: number;
  /** What the run may still spend besides this attempt's metered spend, USD (checked too when given). */
  runRemainingUsd?: () => number;
}

export interface AttemptGateway {
  /** The token the container's placeholder login holds. */
  readonly placeholder: string;
  readonly socketDir: string;
  readonly socketPath: string;
  /** The record so far (a live object). */
  readonly record: GatewayRecord;
  /** Closes the socket and every connection, removes the folder, returns the record. */
  stop(): Promise<GatewayRecord>;
}

const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length"]);

function upstreamHeaders(incoming: IncomingHttpHeaders, credential: string, bodyBytes: number): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(incoming)) {
    if (value === undefined || HOP_BY_HOP.has(name) || name === "authorization" || name === "x-api-key" || name === "accept-encoding") continue;
    out[name] = value;
  }
  // The placeholder login is an OAuth login, so the CLI sends `Authorization: Bearer` with the
  // oauth beta (measured); the real credential (a setup token or the host login's access token)
  // is an OAuth token of the same kind and goes in the same header. No compression: the meter
  // reads the stream as it passes.
  out.authorization = `Bearer ${credential}`;
  out["accept-encoding"] = "identity";
  out["content-length"] = String(bodyBytes);
  return out;
}

function replyHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value;
  return out;
}

function sendError(res: ServerResponse, status: number, type: string, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ type: "error", error: { type, message: `study-runner gateway: ${message}` } });
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function tokenOf(headers: IncomingHttpHeaders): string | undefined {
  const bearer = /^Bearer\s+(\S+)$/i.exec(headers.authorization ?? "")?.[1];
  if (bearer) return bearer;
  const key = headers["x-api-key"];
  return typeof key === "string" && key !== "" ? key : undefined;
}

/** The bytes an attempt has buffered in the runner, across its connections. */
interface BufferBudget {
  held: number;
  readonly limit: number;
}

/**
 * Reads a request body into memory under two bounds: the request's own size limit and the
 * attempt's buffered bytes (`budget`, shared by its connections). A declared length that cannot
 * fit is refused before a byte is read. What was counted is released by the caller (`release`).
 */
async function readBody(req: IncomingMessage, limit: number, budget: BufferBudget): Promise<{ body: Buffer; release: () => void } | { refused: string }> {
  let counted = 0;
  const release = () => {
    budget.held -= counted;
    counted = 0;
  };
  const declared = Number(req.headers["content-length"] ?? Number.NaN);
  if (declared > limit) return { refused: `the request body is larger than ${limit} bytes` };
  if (declared > budget.limit - budget.held) return { refused: `the attempt already holds ${budget.held} bytes of request bodies, and this one's ${declared} would pass its ${budget.limit}` };
  const chunks: Buffer[] = [];
  for await (const chunk of req) {
    const n = (chunk as Buffer).length;
    counted += n;
    budget.held += n;
    if (counted > limit) {
      release();
      return { refused: `the request body is larger than ${limit} bytes` };
    }
    if (budget.held > budget.limit) {
      release();
      return { refused: `the attempt's request bodies held in the runner would pass ${budget.limit} bytes` };
    }
    chunks.push(chunk as Buffer);
  }
  return { body: Buffer.concat(chunks), release };
}

/** The study model's gateway for one run. */
export class Gateway {
  private readonly upstream: URL;
  private readonly ca: string | Buffer | undefined;
  private readonly agent: HttpsAgent;
  /** Every placeholder issued in this run, so a token of another attempt is named as such. */
  private readonly issued = new Map<string, number>();
  private attempts = 0;

  constructor(private readonly options: GatewayOptions) {
    if (!pricesFor(options.model)) throw new Error(`the gateway needs a price row for the study model ${options.model} to bound requests`);
    const url = new URL(options.upstream?.url ?? DEFAULT_UPSTREAM);
    if (url.protocol !== "https:" || url.pathname !== "/" || url.search !== "" || url.username !== "" || url.password !== "") {
      throw new Error(`the gateway's upstream must be a bare https:// origin, got ${url.origin}${url.pathname}`);
    }
    this.upstream = url;
    this.ca = options.upstream?.ca;
    // TLS verification stays on: the system's CAs, or the test's own CA when one is given.
    this.agent = new HttpsAgent({ keepAlive: true, maxSockets: 16, ...(this.ca ? { ca: this.ca } : {}) });
  }

  get upstreamOrigin(): string {
    return this.upstream.origin;
  }

  /** Opens the socket of one attempt. The runner must be root or the container user (the socket is shared with it alone). */
  async openAttempt(o: AttemptGatewayOptions): Promise<AttemptGateway> {
    assertSocketOwner("the model gateway", { containerUid: this.options.containerUid });
    const attemptNo = ++this.attempts;
    const placeholder = `study-runner-placeholder-${randomBytes(24).toString("hex")}`;
    this.issued.set(placeholder, attemptNo);
    const maxBytes = this.options.maxRequestBytes ?? MAX_REQUEST_BYTES;
    const run: RunSide = { model: this.options.model, shapes: this.options.requestShapes ?? activeProfile().requestShapes, maxBytes, upstream: this.upstream, agent: this.agent, issued: this.issued };
    const bufferLimit = this.options.attemptBufferedBytes ?? Math.min(MAX_ATTEMPT_BUFFERED_BYTES, maxBytes);
    const attempt = new AttemptSide(run, o, placeholder, bufferLimit);
    const { server, connections } = attemptServer(attempt, this.options.attemptConnections ?? MAX_ATTEMPT_CONNECTIONS);
    const socketDir = await makeSocketDir(o.socketDir, "sr-gateway-");
    const socketPath = await listenForContainer(server, socketDir, GATEWAY_SOCKET_NAME, { containerUid: this.options.containerUid, containerGid: this.options.containerGid });
    let stopped: Promise<GatewayRecord> | undefined;
    return {
      placeholder,
      socketDir,
      socketPath,
      record: attempt.record,
      stop: () =>
        (stopped ??= (async () => {
          await new Promise<void>((resolve) => {
            server.close(() => resolve());
            for (const s of connections) s.destroy();
          });
          await rm(socketDir, { recursive: true, force: true });
          return attempt.record;
        })()),
    };
  }

  close(): void {
    this.agent.destroy();
  }
}

/** What every attempt of a run shares: the study model, the admitted shapes, the upstream and its connections, the placeholders issued. */
interface RunSide {
  model: string;
  shapes: RequestShapes;
  maxBytes: number;
  upstream: URL;
  agent: HttpsAgent;
  issued: ReadonlyMap<string, number>;
}

/**
 * The attempt's server on its socket: every request goes to the attempt's handler, at most
 * `maxConnections` connections at once (Node closes any further one as it is accepted, and the
 * attempt counts it), and the open connections are kept so stopping can close them.
 */
function attemptServer(attempt: AttemptSide, maxConnections: number): { server: Server; connections: Set<Socket> } {
  const server: Server = createServer((req, res) => {
    attempt.handle(req, res).catch(() => sendError(res, 500, "api_error", "the gateway failed on this request"));
  });
  server.keepAliveTimeout = 5_000;
  // At most this many connections of the attempt at once: Node closes any further one as it is accepted.
  server.maxConnections = maxConnections;
  let droppedConnections = 0;
  server.on("drop", () => attempt.connectionsDropped(++droppedConnections, maxConnections));
  const connections = new Set<Socket>();
  server.on("connection", (s: Socket) => {
    connections.add(s);
    s.on("close", () => connections.delete(s));
  });
  return { server, connections };
}

/** One request on its way through the gateway: its line in the record, when it began, and the body bytes it holds. */
interface Exchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly r: GatewayRequestRecord;
  readonly t0: number;
  /** Gives back the attempt's buffered-bytes budget this request's body holds (set once the body is read). */
  releaseBody: () => void;
}

/** A forwarded request's hold on the attempt's ceiling, until its reply is settled (once). */
interface Flight {
  readonly bound: bigint;
  readonly requestBytes: number;
  settled: boolean;
}

function newRequestRecord(seq: number, req: IncomingMessage): GatewayRequestRecord {
  return {
    seq,
    method: req.method ?? "",
    path: (req.url ?? "").slice(0, 300),
    status: 0,
    requestBytes: 0,
    requestModel: null,
    messageId: null,
    model: null,
    inputTokens: null,
    cacheReadInputTokens: null,
    cacheWrite5mInputTokens: null,
    cacheWrite1hInputTokens: null,
    outputTokens: null,
    complete: false,
    boundUsd: null,
    costUsd: null,
    ttfbMs: null,
    durationMs: 0,
    refused: null,
    requestSha256: null,
    replySha256: null,
    contentSha256: null,
  };
}

/**
 * Reads a request body as the one JSON object of a measured shape; why not, when it is not. A
 * throw other than the strict parser's is passed on.
 */
function parseRequestBody(raw: Buffer, shapes: RequestShapes): { body: Record<string, unknown> } | { why: string } {
  try {
    const parsed = parseStrictJson(raw.toString("utf8"));
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new StrictJsonError("not a JSON object");
    const why = shapeProblem(shapes.body, parsed);
    if (why) return { why: `${why}; refused before sending` };
    return { body: parsed };
  } catch (err) {
    if (!(err instanceof StrictJsonError)) throw err;
    return { why: `the request body is not one JSON object with each key once: ${err.message}` };
  }
}

/**
 * One attempt's side of the gateway: its placeholder, its record, what it has spent and has in
 * flight. Each request is checked (target, token, headers, body, model, ceiling) and refused at
 * the first check it fails, or forwarded with the real credential and its reply metered.
 */
class AttemptSide {
  readonly record: GatewayRecord = { requests: [], dropped: 0, forwarded: 0, refused: 0, meteredCostUsd: 0, budgetRefused: false, setupProblems: [] };
  private readonly limitPico: bigint;
  private readonly buffered: BufferBudget;
  private spentPico = 0n;
  private readonly inflight = new Set<Flight>();
  private seq = 0;

  constructor(
    private readonly run: RunSide,
    private readonly o: AttemptGatewayOptions,
    private readonly placeholder: string,
    bufferLimit: number,
  ) {
    this.limitPico = usdToPico(o.limitUsd, "floor");
    this.buffered = { held: 0, limit: bufferLimit };
  }

  private keep(r: GatewayRequestRecord): void {
    if (this.record.requests.length < MAX_RECORDED_REQUESTS) this.record.requests.push(r);
    else this.record.dropped++;
  }

  private problem(text: string): void {
    const problems = this.record.setupProblems;
    if (problems.length < 20 && !problems.includes(text)) problems.push(text);
  }

  /** The server closed the attempt's `dropped`th connection beyond `maxConnections`: one setup problem, its count kept current. */
  connectionsDropped(dropped: number, maxConnections: number): void {
    const text = (n: number) => `the attempt opened more than ${maxConnections} connections to the gateway at once; ${n} were closed unanswered`;
    const at = this.record.setupProblems.indexOf(text(dropped - 1));
    if (at >= 0) this.record.setupProblems[at] = text(dropped);
    else this.problem(text(dropped));
  }

  /** One request: checked, then refused or forwarded. */
  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const x: Exchange = { req, res, r: newRequestRecord(this.seq++, req), t0: performance.now(), releaseBody: () => {} };
    this.keep(x.r);
    const target = this.checkArrival(x);
    if (target === undefined) return;
    const read = await this.readRequest(x);
    if (!read) return;
    const maxTokens = this.checkModel(x, read.body);
    if (maxTokens === undefined) return;
    const flight = this.reserve(x, read.raw.length, maxTokens);
    if (!flight) return;
    this.forward(x, target, read.raw, flight);
  }

  /**
   * The one place a request is marked refused: its kind, reason and status set and the record's
   * count kept with it, so no path can mark a request without counting it (contract R174).
   */
  private markRefused(r: GatewayRequestRecord, kind: RefusalKind, reason: string, status: number): void {
    if (r.refused !== null) return;
    r.refused = { kind, reason };
    r.status = status;
    this.record.refused++;
    if (kind === "budget") this.record.budgetRefused = true;
  }

  /** Answers the request with an error and records why; undefined, so a check can return it. */
  private refuse(x: Exchange, kind: RefusalKind, reason: string, status = REFUSAL_STATUS, type = REFUSAL_TYPE): undefined {
    x.releaseBody();
    this.markRefused(x.r, kind, reason, status);
    x.r.durationMs = performance.now() - x.t0;
    if (kind !== "budget") this.problem(`gateway refused ${x.r.method} ${x.r.path}: ${reason}`);
    sendError(x.res, status, type, reason);
    return undefined;
  }

  /** The checks before the body is read: a measured target, this attempt's placeholder, measured headers. The target as parsed, or undefined when refused. */
  private checkArrival(x: Exchange): { path: string; search: string } | undefined {
    const { req } = x;
    // The target read by a URL parser, compared whole with the measured ones: `?beta=true?&x=y`
    // is the query `beta=true?&x=y`, which the CLI never sends.
    const targetWhy = targetProblem(this.run.shapes, req.method ?? "", req.url ?? "");
    const target = parseTarget(req.url ?? "");
    if (targetWhy) {
      req.resume();
      return this.refuse(x, "path", targetWhy, 404, "not_found_error");
    }
    const token = tokenOf(req.headers);
    if (token !== this.placeholder) {
      req.resume();
      const other = token === undefined ? undefined : this.run.issued.get(token);
      if (other !== undefined) return this.refuse(x, "foreign-placeholder", `the request carries the placeholder of another attempt of this run`, 401, "authentication_error");
      return this.refuse(x, "unknown-token", token === undefined ? "the request carries no credential" : "the request's credential is not this attempt's placeholder", 401, "authentication_error");
    }
    const headerWhy = headerProblem(this.run.shapes, req.rawHeaders);
    if (headerWhy) {
      req.resume();
      return this.refuse(x, "header", headerWhy);
    }
    return target!;
  }

  /** The body read under the size bounds and parsed as a measured shape; undefined when refused. */
  private async readRequest(x: Exchange): Promise<{ raw: Buffer; body: Record<string, unknown> } | undefined> {
    const read = await readBody(x.req, this.run.maxBytes, this.buffered);
    if ("refused" in read) {
      x.res.setHeader("connection", "close");
      return this.refuse(x, "size", read.refused, 413, "request_too_large");
    }
    const raw = read.body;
    x.releaseBody = read.release;
    // A backstop: whatever happens to this request (a throw below included), its bytes stop counting when its response closes.
    x.res.on("close", x.releaseBody);
    x.r.requestBytes = raw.length;
    x.r.requestSha256 = createHash("sha256").update(raw).digest("hex");
    let parsed: ReturnType<typeof parseRequestBody>;
    try {
      parsed = parseRequestBody(raw, this.run.shapes);
    } catch (err) {
      x.releaseBody();
      throw err;
    }
    if ("why" in parsed) return this.refuse(x, "body", parsed.why);
    return { raw, body: parsed.body };
  }

  /** The study's model and a whole max_tokens: the max_tokens, or undefined when refused. */
  private checkModel(x: Exchange, body: Record<string, unknown>): number | undefined {
    const model = this.run.model;
    x.r.requestModel = typeof body.model === "string" ? body.model.slice(0, 200) : null;
    if (body.model !== model) return this.refuse(x, "model", `the request asks for model ${JSON.stringify(x.r.requestModel)}, not the study's ${model}`);
    const maxTokens = body.max_tokens;
    if (typeof maxTokens !== "number" || !Number.isSafeInteger(maxTokens) || maxTokens < 1) return this.refuse(x, "body", "the request has no whole max_tokens");
    return maxTokens;
  }

  /** The ceiling: what is metered, plus what is in flight, plus this request's worst case. The request's hold when it fits, else undefined (refused). */
  private reserve(x: Exchange, requestBytes: number, maxTokens: number): Flight | undefined {
    const bound = requestBound(this.run.model, requestBytes, maxTokens);
    x.r.boundUsd = picoToUsd(bound.costPico);
    let held = this.spentPico + bound.costPico;
    for (const f of this.inflight) held += f.bound;
    const runLeft = this.o.runRemainingUsd ? usdToPico(Math.max(0, this.o.runRemainingUsd()), "floor") : undefined;
    if (held > this.limitPico || (runLeft !== undefined && bound.costPico > runLeft)) {
      const which = held > this.limitPico ? `the attempt's limit of ${this.o.limitUsd} USD` : "the run's remaining cap";
      return this.refuse(x, "budget", `this request could cost up to ${x.r.boundUsd} USD, which with ${picoToUsd(this.spentPico)} USD metered would pass ${which}; not sent`);
    }
    const flight: Flight = { bound: bound.costPico, requestBytes, settled: false };
    this.inflight.add(flight);
    this.record.forwarded++;
    return flight;
  }

  /** Sends the request upstream with the real credential, to the target as checked, and relays its reply. */
  private forward(x: Exchange, target: { path: string; search: string }, raw: Buffer, flight: Flight): void {
    const { upstream, agent } = this.run;
    const upstreamReq = httpsRequest({
      protocol: "https:",
      hostname: upstream.hostname,
      port: upstream.port || 443,
      ...(isIP(upstream.hostname) ? {} : { servername: upstream.hostname }),
      method: "POST",
      // The target as checked: the parser's path and query, not the bytes the container sent.
      path: `${target.path}${target.search}`,
      headers: upstreamHeaders(x.req.headers, this.o.credential, raw.length),
      agent,
      rejectUnauthorized: true,
    });
    /** `errorAnswered`: the upstream answered with an error status and its whole body arrived. */
    const settle = (facts: ReplyFacts | undefined, errorAnswered = false) => this.settle(x, flight, facts, errorAnswered, upstreamReq.writableFinished);
    upstreamReq.on("socket", (s: Socket) => s.setNoDelay(true));
    // The body stops counting against the attempt's buffered bytes once it is handed on (or the request failed).
    upstreamReq.on("finish", x.releaseBody);
    upstreamReq.on("close", x.releaseBody);
    const aborted = () => upstreamReq.destroy();
    x.res.on("close", aborted);
    upstreamReq.on("error", (err) => {
      if (flight.settled) return;
      settle(undefined);
      this.markRefused(x.r, "upstream-unreachable", `the upstream did not answer (${(err as NodeJS.ErrnoException).code ?? "error"})`, 502);
      sendError(x.res, 502, "api_error", "the Messages API could not be reached");
    });
    upstreamReq.on("response", (up) => this.relayReply(x, up, settle, aborted));
    upstreamReq.end(raw);
  }

  /** Passes the upstream's reply on as it streams (a redirect never), metering it on the way, and settles the request when it ends. */
  private relayReply(x: Exchange, up: IncomingMessage, settle: (facts: ReplyFacts | undefined, errorAnswered?: boolean) => void, aborted: () => void): void {
    const { r, res } = x;
    r.status = up.statusCode ?? 0;
    if (r.status >= 300 && r.status < 400) {
      // A redirect could carry the credential elsewhere: never followed, never passed on.
      up.resume();
      settle(undefined);
      this.markRefused(r, "upstream-redirect", `the upstream answered ${up.statusCode} (a redirect); refused`, 502);
      this.problem(`the upstream answered request ${r.seq} with a redirect (${up.statusCode})`);
      sendError(res, 502, "api_error", "the Messages API answered with a redirect, which the gateway does not follow");
      return;
    }
    const streamed = /^text\/event-stream/i.test(String(up.headers["content-type"] ?? ""));
    const sse = streamed ? new SseMeter() : undefined;
    const jsonChunks: Buffer[] = [];
    let jsonBytes = 0;
    const relayed = createHash("sha256");
    res.writeHead(r.status, replyHeaders(up.headers));
    res.flushHeaders();
    up.on("data", (chunk: Buffer) => {
      if (r.ttfbMs === null) r.ttfbMs = performance.now() - x.t0;
      // Passed on first, metered second: the CLI never waits for the meter.
      res.write(chunk);
      relayed.update(chunk);
      if (sse) sse.push(chunk);
      else if (jsonBytes < 4 * 1024 * 1024) {
        jsonChunks.push(chunk);
        jsonBytes += chunk.length;
      }
    });
    up.on("end", () => {
      res.off("close", aborted);
      res.end();
      r.replySha256 = relayed.digest("hex");
      if (sse) {
        sse.end();
        settle(r.status >= 200 && r.status < 300 ? sse.facts : undefined, r.status >= 400);
      } else {
        settle(r.status >= 200 && r.status < 300 ? jsonReplyFacts(Buffer.concat(jsonChunks)) : undefined, r.status >= 400);
      }
    });
    up.on("error", () => {
      res.destroy();
      r.replySha256 ??= relayed.digest("hex");
      settle(sse?.facts);
    });
  }

  /**
   * The request's end, counted once however it came (an error after the response began): its
   * hold released, the reply's facts and its cost recorded and added to what is metered.
   * `sentWhole`: the request left in full (it may have been billed).
   */
  private settle(x: Exchange, flight: Flight, facts: ReplyFacts | undefined, errorAnswered: boolean, sentWhole: boolean): void {
    const { r } = x;
    // A reply can end in more than one way (an error after the response began): count it once.
    if (flight.settled) return;
    flight.settled = true;
    this.inflight.delete(flight);
    r.durationMs = performance.now() - x.t0;
    if (facts) {
      r.messageId = facts.messageId;
      r.model = facts.model;
      r.complete = facts.complete;
      r.contentSha256 = facts.contentSha256;
      if (facts.usage) setUsage(r, facts.usage);
    }
    let cost = 0n;
    // An error status line comes before any generation: the API produced no message and bills
    // no tokens for it, so a whole error answer costs nothing (the CLI's measured retry of a
    // 400 must not be refused for a spend that never happened).
    if (errorAnswered) cost = 0n;
    else if (facts?.usage && facts.complete) cost = meteredCostPico(this.run.model, facts.usage);
    // Broke off after the request left (it may have been billed): the worst case stays counted.
    else if (facts?.usage || (r.status >= 200 && r.status < 300) || sentWhole) cost = flight.bound;
    this.spentPico += cost;
    r.costUsd = picoToUsd(cost);
    this.record.meteredCostUsd = picoToUsd(this.spentPico);
    this.checkReply(r, facts, flight.requestBytes);
  }

  /** What a reply claims that no honest one to this request can: each a setup problem. */
  private checkReply(r: GatewayRequestRecord, facts: ReplyFacts | undefined, requestBytes: number): void {
    const model = this.run.model;
    if (facts?.usage && promptTokens(facts.usage) > requestBytes) {
      this.problem(`the reply to request ${r.seq} claims ${promptTokens(facts.usage)} prompt tokens for a request of ${requestBytes} bytes, which no request that size can produce`);
    }
    if (facts?.serverToolUse) this.problem(`the reply to request ${r.seq} reports server-tool use (${facts.serverToolUse}), which the runner never offers and does not meter`);
    if (facts?.model && facts.model !== model) this.problem(`the reply to request ${r.seq} is from model ${facts.model}, not the study's ${model}`);
  }
}

function setUsage(r: GatewayRequestRecord, u: MeteredUsage): void {
  r.inputTokens = u.inputTokens;
  r.cacheReadInputTokens = u.cacheReadInputTokens;
  r.cacheWrite5mInputTokens = u.cacheWrite5mInputTokens;
  r.cacheWrite1hInputTokens = u.cacheWrite1hInputTokens;
  r.outputTokens = u.outputTokens;
}
