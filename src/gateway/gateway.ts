import { randomBytes } from "node:crypto";
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
import { CLI_REQUEST_SHAPES } from "./cli-requests.generated.ts";
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
  /** The request shapes admitted: the pinned CLI's measured ones (cli-requests.generated.ts) unless a test gives others. */
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
    const limitPico = usdToPico(o.limitUsd, "floor");
    const record: GatewayRecord = { requests: [], dropped: 0, forwarded: 0, refused: 0, meteredCostUsd: 0, budgetRefused: false, setupProblems: [] };
    let spentPico = 0n;
    const inflight = new Set<{ bound: bigint }>();
    let seq = 0;
    const maxBytes = this.options.maxRequestBytes ?? MAX_REQUEST_BYTES;
    const model = this.options.model;
    const shapes = this.options.requestShapes ?? CLI_REQUEST_SHAPES;
    const buffered: BufferBudget = { held: 0, limit: this.options.attemptBufferedBytes ?? Math.min(MAX_ATTEMPT_BUFFERED_BYTES, maxBytes) };
    const maxConnections = this.options.attemptConnections ?? MAX_ATTEMPT_CONNECTIONS;

    const keep = (r: GatewayRequestRecord) => {
      if (record.requests.length < MAX_RECORDED_REQUESTS) record.requests.push(r);
      else record.dropped++;
    };
    const problem = (text: string) => {
      if (record.setupProblems.length < 20 && !record.setupProblems.includes(text)) record.setupProblems.push(text);
    };

    const handle = async (req: IncomingMessage, res: ServerResponse) => {
      const t0 = performance.now();
      const r: GatewayRequestRecord = {
        seq: seq++,
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
      };
      keep(r);
      /** Gives back the attempt's buffered-bytes budget this request's body holds (set once the body is read). */
      let releaseBody = () => {};
      const refuse = (kind: RefusalKind, reason: string, status = REFUSAL_STATUS, type = REFUSAL_TYPE) => {
        releaseBody();
        r.refused = { kind, reason };
        r.status = status;
        r.durationMs = performance.now() - t0;
        record.refused++;
        if (kind === "budget") record.budgetRefused = true;
        else problem(`gateway refused ${r.method} ${r.path}: ${reason}`);
        sendError(res, status, type, reason);
      };

      // The target read by a URL parser, compared whole with the measured ones: `?beta=true?&x=y`
      // is the query `beta=true?&x=y`, which the CLI never sends.
      const targetWhy = targetProblem(shapes, req.method ?? "", req.url ?? "");
      const target = parseTarget(req.url ?? "");
      if (targetWhy) {
        req.resume();
        return refuse("path", targetWhy, 404, "not_found_error");
      }
      const token = tokenOf(req.headers);
      if (token !== placeholder) {
        req.resume();
        const other = token === undefined ? undefined : this.issued.get(token);
        if (other !== undefined) return refuse("foreign-placeholder", `the request carries the placeholder of another attempt of this run`, 401, "authentication_error");
        return refuse("unknown-token", token === undefined ? "the request carries no credential" : "the request's credential is not this attempt's placeholder", 401, "authentication_error");
      }
      const headerWhy = headerProblem(shapes, req.rawHeaders);
      if (headerWhy) {
        req.resume();
        return refuse("header", headerWhy);
      }
      const read = await readBody(req, maxBytes, buffered);
      if ("refused" in read) {
        res.setHeader("connection", "close");
        return refuse("size", read.refused, 413, "request_too_large");
      }
      const raw = read.body;
      releaseBody = read.release;
      // A backstop: whatever happens to this request (a throw below included), its bytes stop counting when its response closes.
      res.on("close", releaseBody);
      r.requestBytes = raw.length;
      let body: Record<string, unknown>;
      try {
        const parsed = parseStrictJson(raw.toString("utf8"));
        if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new StrictJsonError("not a JSON object");
        const why = shapeProblem(shapes.body, parsed);
        if (why) return refuse("body", `${why}; refused before sending`);
        body = parsed;
      } catch (err) {
        if (!(err instanceof StrictJsonError)) {
          releaseBody();
          throw err;
        }
        return refuse("body", `the request body is not one JSON object with each key once: ${err.message}`);
      }
      r.requestModel = typeof body.model === "string" ? body.model.slice(0, 200) : null;
      if (body.model !== model) return refuse("model", `the request asks for model ${JSON.stringify(r.requestModel)}, not the study's ${model}`);
      const maxTokens = body.max_tokens;
      if (typeof maxTokens !== "number" || !Number.isSafeInteger(maxTokens) || maxTokens < 1) return refuse("body", "the request has no whole max_tokens");

      // The ceiling: what is metered, plus what is in flight, plus this request's worst case.
      const bound = requestBound(model, raw.length, maxTokens);
      r.boundUsd = picoToUsd(bound.costPico);
      let held = spentPico + bound.costPico;
      for (const f of inflight) held += f.bound;
      const runLeft = o.runRemainingUsd ? usdToPico(Math.max(0, o.runRemainingUsd()), "floor") : undefined;
      if (held > limitPico || (runLeft !== undefined && bound.costPico > runLeft)) {
        const which = held > limitPico ? `the attempt's limit of ${o.limitUsd} USD` : "the run's remaining cap";
        return refuse("budget", `this request could cost up to ${r.boundUsd} USD, which with ${picoToUsd(spentPico)} USD metered would pass ${which}; not sent`);
      }
      const flight = { bound: bound.costPico };
      inflight.add(flight);
      record.forwarded++;

      let settledOnce = false;
      /** `errorAnswered`: the upstream answered with an error status and its whole body arrived. */
      const settle = (facts: ReplyFacts | undefined, errorAnswered = false) => {
        // A reply can end in more than one way (an error after the response began): count it once.
        if (settledOnce) return;
        settledOnce = true;
        inflight.delete(flight);
        r.durationMs = performance.now() - t0;
        if (facts) {
          r.messageId = facts.messageId;
          r.model = facts.model;
          r.complete = facts.complete;
          if (facts.usage) setUsage(r, facts.usage);
        }
        let cost = 0n;
        // An error status line comes before any generation: the API produced no message and bills
        // no tokens for it, so a whole error answer costs nothing (the CLI's measured retry of a
        // 400 must not be refused for a spend that never happened).
        if (errorAnswered) cost = 0n;
        else if (facts?.usage && facts.complete) cost = meteredCostPico(model, facts.usage);
        // Broke off after the request left (it may have been billed): the worst case stays counted.
        else if (facts?.usage || (r.status >= 200 && r.status < 300) || upstreamReq.writableFinished) cost = bound.costPico;
        spentPico += cost;
        r.costUsd = picoToUsd(cost);
        record.meteredCostUsd = picoToUsd(spentPico);
        if (facts?.usage && promptTokens(facts.usage) > raw.length) {
          problem(`the reply to request ${r.seq} claims ${promptTokens(facts.usage)} prompt tokens for a request of ${raw.length} bytes, which no request that size can produce`);
        }
        if (facts?.serverToolUse) problem(`the reply to request ${r.seq} reports server-tool use (${facts.serverToolUse}), which the runner never offers and does not meter`);
        if (facts?.model && facts.model !== model) problem(`the reply to request ${r.seq} is from model ${facts.model}, not the study's ${model}`);
      };

      const upstreamReq = httpsRequest({
        protocol: "https:",
        hostname: this.upstream.hostname,
        port: this.upstream.port || 443,
        ...(isIP(this.upstream.hostname) ? {} : { servername: this.upstream.hostname }),
        method: "POST",
        // The target as checked: the parser's path and query, not the bytes the container sent.
        path: `${target!.path}${target!.search}`,
        headers: upstreamHeaders(req.headers, o.credential, raw.length),
        agent: this.agent,
        rejectUnauthorized: true,
      });
      upstreamReq.on("socket", (s: Socket) => s.setNoDelay(true));
      // The body stops counting against the attempt's buffered bytes once it is handed on (or the request failed).
      upstreamReq.on("finish", releaseBody);
      upstreamReq.on("close", releaseBody);
      const aborted = () => upstreamReq.destroy();
      res.on("close", aborted);
      upstreamReq.on("error", (err) => {
        if (settledOnce) return;
        settle(undefined);
        r.status = 502;
        r.refused = { kind: "upstream-unreachable", reason: `the upstream did not answer (${(err as NodeJS.ErrnoException).code ?? "error"})` };
        sendError(res, 502, "api_error", "the Messages API could not be reached");
      });
      upstreamReq.on("response", (up) => {
        r.status = up.statusCode ?? 0;
        if (r.status >= 300 && r.status < 400) {
          // A redirect could carry the credential elsewhere: never followed, never passed on.
          up.resume();
          settle(undefined);
          r.status = 502;
          r.refused = { kind: "upstream-redirect", reason: `the upstream answered ${up.statusCode} (a redirect); refused` };
          problem(`the upstream answered request ${r.seq} with a redirect (${up.statusCode})`);
          sendError(res, 502, "api_error", "the Messages API answered with a redirect, which the gateway does not follow");
          return;
        }
        const streamed = /^text\/event-stream/i.test(String(up.headers["content-type"] ?? ""));
        const sse = streamed ? new SseMeter() : undefined;
        const jsonChunks: Buffer[] = [];
        let jsonBytes = 0;
        res.writeHead(r.status, replyHeaders(up.headers));
        res.flushHeaders();
        up.on("data", (chunk: Buffer) => {
          if (r.ttfbMs === null) r.ttfbMs = performance.now() - t0;
          // Passed on first, metered second: the CLI never waits for the meter.
          res.write(chunk);
          if (sse) sse.push(chunk);
          else if (jsonBytes < 4 * 1024 * 1024) {
            jsonChunks.push(chunk);
            jsonBytes += chunk.length;
          }
        });
        up.on("end", () => {
          res.off("close", aborted);
          res.end();
          if (sse) {
            sse.end();
            settle(r.status >= 200 && r.status < 300 ? sse.facts : undefined, r.status >= 400);
          } else {
            settle(r.status >= 200 && r.status < 300 ? jsonReplyFacts(Buffer.concat(jsonChunks)) : undefined, r.status >= 400);
          }
        });
        up.on("error", () => {
          res.destroy();
          settle(sse?.facts);
        });
      });
      upstreamReq.end(raw);
    };

    const server: Server = createServer((req, res) => {
      handle(req, res).catch(() => sendError(res, 500, "api_error", "the gateway failed on this request"));
    });
    server.keepAliveTimeout = 5_000;
    // At most this many connections of the attempt at once: Node closes any further one as it is accepted.
    server.maxConnections = maxConnections;
    let droppedConnections = 0;
    server.on("drop", () => {
      droppedConnections++;
      const text = (n: number) => `the attempt opened more than ${maxConnections} connections to the gateway at once; ${n} were closed unanswered`;
      const at = record.setupProblems.indexOf(text(droppedConnections - 1));
      if (at >= 0) record.setupProblems[at] = text(droppedConnections);
      else problem(text(droppedConnections));
    });
    const connections = new Set<Socket>();
    server.on("connection", (s: Socket) => {
      connections.add(s);
      s.on("close", () => connections.delete(s));
    });
    const socketDir = await makeSocketDir(o.socketDir, "sr-gateway-");
    const socketPath = await listenForContainer(server, socketDir, GATEWAY_SOCKET_NAME, { containerUid: this.options.containerUid, containerGid: this.options.containerGid });
    let stopped: Promise<GatewayRecord> | undefined;
    return {
      placeholder,
      socketDir,
      socketPath,
      record,
      stop: () =>
        (stopped ??= (async () => {
          await new Promise<void>((resolve) => {
            server.close(() => resolve());
            for (const s of connections) s.destroy();
          });
          await rm(socketDir, { recursive: true, force: true });
          return record;
        })()),
    };
  }

  close(): void {
    this.agent.destroy();
  }
}

function setUsage(r: GatewayRequestRecord, u: MeteredUsage): void {
  r.inputTokens = u.inputTokens;
  r.cacheReadInputTokens = u.cacheReadInputTokens;
  r.cacheWrite5mInputTokens = u.cacheWrite5mInputTokens;
  r.cacheWrite1hInputTokens = u.cacheWrite1hInputTokens;
  r.outputTokens = u.outputTokens;
}
