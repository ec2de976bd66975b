/**
 * The strict profile's only way out of an attempt container (contract R72): an HTTP CONNECT proxy
 * run by the runner on the host, listening on a unix socket in a fresh per-attempt folder that
 * is bind-mounted into the container (whose network is "none"). Inside, with-relay.cjs listens
 * on 127.0.0.1 and joins each connection to this socket; HTTPS_PROXY names that port.
 *
 * It opens a tunnel only to an allowlisted host name on port 443 (src/isolation/policy.ts) and
 * records every request: host, port, allowed or refused, bytes each way, start and duration.
 * Everything is bounded (open tunnels, connections, recorded entries, header size, time to
 * send a request and to dial), so a flood from one attempt costs that attempt's proxy and
 * nothing else; the next attempt gets a new proxy.
 */
import { STATUS_CODES, createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { rm } from "node:fs/promises";
import { connect as netConnect, isIP, type Socket } from "node:net";
import { performance } from "node:perf_hooks";
import type { Duplex } from "node:stream";
import type { EgressRecord, EgressRequest } from "../ledger/schema.ts";
import { assertSocketOwner, CONTAINER_UID, listenForContainer, makeSocketDir } from "../util/container-socket.ts";
import { EGRESS_PORT, EgressRefusal, normalizeHost, systemResolver, type Resolve } from "./policy.ts";

export const EGRESS_SOCKET_NAME = "egress.sock";
/** The uid and gid Claude Code runs as in the study image (as for the MCP bridge's socket). */

export interface EgressLimits {
  maxTunnels: number;
  maxConnections: number;
  maxEntries: number;
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  maxHeaderBytes: number;
}

export const EGRESS_LIMITS: Readonly<EgressLimits> = {
  /** Tunnels open (or being opened) at once; more are answered 503 and recorded as refused. */
  maxTunnels: 32,
  /** Client connections at once; beyond it the server closes new ones unread (counted). */
  maxConnections: 128,
  /** Entries kept in the record; later requests are counted in the totals only. */
  maxEntries: 1000,
  /** Time to resolve and dial an allowed host. */
  connectTimeoutMs: 10_000,
  /** Time a client has to send a complete request head. */
  headersTimeoutMs: 10_000,
  /** Largest request head accepted. */
  maxHeaderBytes: 8192,
};

export interface EgressProxyOptions {
  /** Allowed host names (normalized, no IPs): parseEgressAllow's output or DEFAULT_EGRESS_ALLOW. */
  allow: readonly string[];
  /** Default: the system resolver, public addresses only. Tests map an allowed name to loopback. */
  resolve?: Resolve;
  /** A folder to create for the socket (must not exist); default: a fresh one under the temp dir. */
  socketDir?: string;
  /** Owner of the socket when the runner is root (default 1000:1000, the container user). */
  containerUid?: number;
  containerGid?: number;
  limits?: Partial<EgressLimits>;
}

export interface EgressProxy {
  /** Host folder holding the socket; bind-mount it read-only into the attempt container. */
  socketDir: string;
  socketPath: string;
  /** Closes the socket and every tunnel, removes the folder and returns the attempt's record. */
  stop(): Promise<EgressRecord>;
}

interface OpenEntry {
  entry: EgressRequest;
  t0: number;
  done: boolean;
  /** Set while a tunnel is being opened or is open: counted against maxTunnels. */
  tunnel: boolean;
  /** The upstream connection is up and the client was told so. */
  established: boolean;
}

/** How long a refused client may keep its connection open after the answer. */
const ANSWERED_LINGER_MS = 2000;

const TARGET_RE = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:/[\]@]+)):([0-9]{1,5})$/;

/**
 * The proxy's socket is shared with the container user only (the same rule as the MCP bridge),
 * which needs a runner that is root or that user: a problem to report before anything is
 * reserved, or null.
 */
export function checkEgressRunner(uid: number | undefined = process.getuid?.()): string | null {
  if (uid === 0 || uid === CONTAINER_UID) return null;
  return `--isolation strict needs the runner to run as root or as uid ${CONTAINER_UID} (the container user) to share the proxy socket; it runs as uid ${uid}`;
}

export async function startEgressProxy(opts: EgressProxyOptions): Promise<EgressProxy> {
  const limits = { ...EGRESS_LIMITS, ...opts.limits };
  const allow = new Set(opts.allow.map(normalizeHost));
  const resolve = opts.resolve ?? systemResolver();
  // As for the MCP bridge: only the container user may reach the socket.
  assertSocketOwner("egress proxy", opts);
  const socketDir = await makeSocketDir(opts.socketDir, "study-runner-egress-");
  const tunnels = new EgressTunnels(limits, allow, resolve);
  const server = proxyServer(tunnels, limits);
  const socketPath = await listenForContainer(server, socketDir, EGRESS_SOCKET_NAME, opts);

  let stopped: Promise<EgressRecord> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      const closed = new Promise<void>((ok) => server.close(() => ok()));
      tunnels.stop();
      await closed;
      await rm(socketDir, { recursive: true, force: true });
      return tunnels.record();
    })());

  return { socketDir, socketPath, stop };
}

/**
 * The proxy's server: a CONNECT opens a tunnel (or is refused), a plain request or a request
 * head that does not parse is a refused entry; connections beyond the limit are closed unread
 * (counted), and a request head must arrive whole and in time.
 */
function proxyServer(tunnels: EgressTunnels, limits: EgressLimits): Server {
  // connectionsCheckingInterval: Node checks the header timeout only that often (default 30 s).
  const server = createServer({
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.headersTimeoutMs,
    connectionsCheckingInterval: 1000,
    maxHeaderSize: limits.maxHeaderBytes,
  });
  server.maxConnections = limits.maxConnections;
  server.on("drop", () => tunnels.connectionDropped());
  server.on("connection", (s: Socket) => tunnels.track(s));
  server.on("connect", (req: IncomingMessage, socket: Duplex, head: Buffer) => void tunnels.onConnect(req, socket, head));
  // A plain HTTP request through HTTP_PROXY (http://host/...): nothing but CONNECT to port 443 is served.
  server.on("request", (req: IncomingMessage, res: ServerResponse) => tunnels.refusePlainRequest(req, res));
  // A request head that does not parse (or comes too slowly) is a refused request of unknown target.
  server.on("clientError", (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (err.code?.startsWith("HPE_") || err.code === "ERR_HTTP_REQUEST_TIMEOUT") tunnels.refuseBadHead(err.code, socket);
    socket.destroy();
  });
  return server;
}

/** Answers a refused request and closes the connection (soon, if the client does not). */
function answer(socket: Duplex, status: number): void {
  if (socket.destroyed) return;
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  // A client that never closes its side would hold a connection slot until the attempt ends.
  (socket as Socket).setTimeout?.(ANSWERED_LINGER_MS, () => socket.destroy());
}

/** Waits until the socket is connected or the deadline passes (a connection error rejects). */
function connected(up: Socket, deadline: Promise<never>): Promise<void> {
  return Promise.race([
    new Promise<void>((ok, fail) => {
      up.once("connect", ok);
      up.once("error", fail);
    }),
    deadline,
  ]);
}

/**
 * One attempt's egress: every request's entry (kept up to maxEntries) and the totals, the
 * tunnels being opened or open, and every socket, so stopping can end them all.
 */
class EgressTunnels {
  private readonly totals = { requests: 0, allowed: 0, refused: 0, bytesUp: 0, bytesDown: 0, entriesDropped: 0, droppedConnections: 0 };
  private readonly entries: EgressRequest[] = [];
  private readonly open = new Set<OpenEntry>();
  private readonly sockets = new Set<Duplex>();
  private tunnels = 0;
  private stopping = false;

  constructor(
    private readonly limits: EgressLimits,
    private readonly allow: ReadonlySet<string>,
    private readonly resolve: Resolve,
  ) {}

  /** Keeps the socket until it closes, so stopping can destroy it. */
  track(s: Duplex): void {
    this.sockets.add(s);
    s.on("close", () => this.sockets.delete(s));
  }

  connectionDropped(): void {
    this.totals.droppedConnections++;
  }

  private begin(host: string, port: number): OpenEntry {
    const entry: EgressRequest = { host, port, allowed: false, bytesUp: 0, bytesDown: 0, startedAt: new Date().toISOString(), ms: 0 };
    if (this.entries.length < this.limits.maxEntries) this.entries.push(entry);
    else this.totals.entriesDropped++;
    const o: OpenEntry = { entry, t0: performance.now(), done: false, tunnel: false, established: false };
    this.open.add(o);
    return o;
  }

  // Every entry ends here exactly once; the totals count it then, so they always agree with the entries.
  private finish(o: OpenEntry, error?: string): void {
    if (o.done) return;
    o.done = true;
    this.open.delete(o);
    if (o.tunnel) this.tunnels--;
    o.entry.ms = Math.round(performance.now() - o.t0);
    if (error !== undefined) o.entry.error = error.slice(0, 300);
    const { totals } = this;
    totals.requests++;
    if (o.entry.allowed) totals.allowed++;
    else totals.refused++;
    totals.bytesUp += o.entry.bytesUp;
    totals.bytesDown += o.entry.bytesDown;
  }

  private refuse(o: OpenEntry, socket: Duplex, status: number, reason: string): void {
    o.entry.allowed = false;
    this.finish(o, reason);
    answer(socket, status);
  }

  /** A CONNECT: checked against the policy, then dialled and joined to the client as a tunnel. */
  async onConnect(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    this.track(socket);
    socket.on("error", () => {});
    const admitted = this.admit(req, socket);
    if (!admitted) return;
    const up = await this.dial(admitted.o, socket, admitted.host, admitted.port);
    if (up) this.join(admitted.o, socket, up, head);
  }

  /** The target checked (a host:port, the attempt still on, port 443, an allowlisted name, a free tunnel): its entry, now counted as a tunnel, or undefined when refused. */
  private admit(req: IncomingMessage, socket: Duplex): { o: OpenEntry; host: string; port: number } | undefined {
    const m = TARGET_RE.exec(req.url ?? "");
    const host = m ? normalizeHost(m[1] ?? m[2]!) : "";
    const port = m ? Number(m[3]) : 0;
    const o = this.begin(host, port <= 65535 ? port : 0);
    const why = (status: number, reason: string) => (this.refuse(o, socket, status, reason), undefined);
    if (!m || port > 65535) return why(400, `not a host:port target: ${JSON.stringify((req.url ?? "").slice(0, 100))}`);
    if (this.stopping) return why(503, "the attempt is over");
    if (port !== EGRESS_PORT) return why(403, `port ${port} is not ${EGRESS_PORT}`);
    if (isIP(host)) return why(403, "raw IP addresses are refused; only allowlisted host names");
    if (!this.allow.has(host)) return why(403, "not on the allowlist");
    if (this.tunnels >= this.limits.maxTunnels) return why(503, `too many open tunnels (${this.limits.maxTunnels})`);
    o.entry.allowed = true;
    o.tunnel = true;
    this.tunnels++;
    return { o, host, port };
  }

  /** Resolves and connects to the allowed host within the connect timeout: the connection, or undefined when it failed (answered) or the client left. */
  private async dial(o: OpenEntry, socket: Duplex, host: string, port: number): Promise<Socket | undefined> {
    const { connectTimeoutMs } = this.limits;
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no connection within ${connectTimeoutMs} ms`)), connectTimeoutMs)));
    let upstream: Socket | undefined;
    try {
      const target = await Promise.race([this.resolve(host, port), deadline]);
      if (o.done || socket.destroyed) {
        this.finish(o, "the client went away before the tunnel opened");
        return undefined;
      }
      upstream = netConnect({ host: target.address, port: target.port });
      this.track(upstream);
      await connected(upstream, deadline);
    } catch (err) {
      upstream?.destroy();
      if (err instanceof EgressRefusal) this.refuse(o, socket, 403, err.message);
      else {
        this.finish(o, `cannot reach ${host}:${port}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
        answer(socket, 502);
      }
      return undefined;
    } finally {
      clearTimeout(timer);
    }
    if (o.done || socket.destroyed) {
      upstream.destroy();
      this.finish(o, "the client went away before the tunnel opened");
      return undefined;
    }
    return upstream;
  }

  /** Tells the client the tunnel is up and pipes both ways, counting bytes; the entry ends when either side closes. */
  private join(o: OpenEntry, socket: Duplex, up: Socket, head: Buffer): void {
    up.on("error", () => {});
    const close = () => {
      this.finish(o);
      up.destroy();
      socket.destroy();
    };
    up.on("close", close);
    socket.on("close", close);
    socket.on("data", (d: Buffer) => (o.entry.bytesUp += d.length));
    up.on("data", (d: Buffer) => (o.entry.bytesDown += d.length));
    o.established = true;
    socket.write("HTTP/1.1 200 Connection Established\r\n\r\n");
    if (head.length) {
      o.entry.bytesUp += head.length;
      up.write(head);
    }
    socket.pipe(up);
    up.pipe(socket);
  }

  /** A plain HTTP request: recorded with the host and port its absolute URL names, refused 405. */
  refusePlainRequest(req: IncomingMessage, res: ServerResponse): void {
    let host = "";
    let port = 0;
    try {
      const url = new URL(req.url ?? "");
      host = normalizeHost(url.hostname.replace(/^\[|\]$/g, ""));
      port = url.port ? Number(url.port) : url.protocol === "https:" ? 443 : 80;
    } catch {
      // not an absolute URL: host and port stay unknown
    }
    const o = this.begin(host, port);
    this.finish(o, `method ${req.method} refused; only CONNECT to port ${EGRESS_PORT} is served`);
    res.writeHead(405, { connection: "close", "content-length": "0" }).end();
  }

  /** A request head that did not parse or came too slowly: a refused entry of unknown target, answered 400 or 408. */
  refuseBadHead(code: string, socket: Duplex): void {
    const o = this.begin("", 0);
    this.finish(o, `bad request: ${code}`);
    answer(socket, code === "ERR_HTTP_REQUEST_TIMEOUT" ? 408 : 400);
  }

  /** The attempt is over: every socket destroyed; tunnels still open end now, one still being opened never opened. */
  stop(): void {
    this.stopping = true;
    for (const s of this.sockets) s.destroy();
    for (const o of [...this.open]) this.finish(o, o.established ? undefined : "the attempt ended before the tunnel opened");
  }

  /** The attempt's record: the totals and the entries kept (a copy). */
  record(): EgressRecord {
    return structuredClone({ ...this.totals, entries: this.entries });
  }
}
