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
import { STATUS_CODES, createServer, type IncomingMessage } from "node:http";
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

  const totals = { requests: 0, allowed: 0, refused: 0, bytesUp: 0, bytesDown: 0, entriesDropped: 0, droppedConnections: 0 };
  const entries: EgressRequest[] = [];
  const open = new Set<OpenEntry>();
  const sockets = new Set<Duplex>();
  let tunnels = 0;
  let stopping = false;

  const begin = (host: string, port: number): OpenEntry => {
    const entry: EgressRequest = { host, port, allowed: false, bytesUp: 0, bytesDown: 0, startedAt: new Date().toISOString(), ms: 0 };
    if (entries.length < limits.maxEntries) entries.push(entry);
    else totals.entriesDropped++;
    const o: OpenEntry = { entry, t0: performance.now(), done: false, tunnel: false, established: false };
    open.add(o);
    return o;
  };
  // Every entry ends here exactly once; the totals count it then, so they always agree with the entries.
  const finish = (o: OpenEntry, error?: string) => {
    if (o.done) return;
    o.done = true;
    open.delete(o);
    if (o.tunnel) tunnels--;
    o.entry.ms = Math.round(performance.now() - o.t0);
    if (error !== undefined) o.entry.error = error.slice(0, 300);
    totals.requests++;
    if (o.entry.allowed) totals.allowed++;
    else totals.refused++;
    totals.bytesUp += o.entry.bytesUp;
    totals.bytesDown += o.entry.bytesDown;
  };
  const answer = (socket: Duplex, status: number) => {
    if (socket.destroyed) return;
    socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    // A client that never closes its side would hold a connection slot until the attempt ends.
    (socket as Socket).setTimeout?.(ANSWERED_LINGER_MS, () => socket.destroy());
  };
  const refuse = (o: OpenEntry, socket: Duplex, status: number, reason: string) => {
    o.entry.allowed = false;
    finish(o, reason);
    answer(socket, status);
  };

  const onConnect = async (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    sockets.add(socket);
    socket.on("error", () => {});
    socket.on("close", () => sockets.delete(socket));
    const m = TARGET_RE.exec(req.url ?? "");
    const host = m ? normalizeHost(m[1] ?? m[2]!) : "";
    const port = m ? Number(m[3]) : 0;
    const o = begin(host, port <= 65535 ? port : 0);
    if (!m || port > 65535) return refuse(o, socket, 400, `not a host:port target: ${JSON.stringify((req.url ?? "").slice(0, 100))}`);
    if (stopping) return refuse(o, socket, 503, "the attempt is over");
    if (port !== EGRESS_PORT) return refuse(o, socket, 403, `port ${port} is not ${EGRESS_PORT}`);
    if (isIP(host)) return refuse(o, socket, 403, "raw IP addresses are refused; only allowlisted host names");
    if (!allow.has(host)) return refuse(o, socket, 403, "not on the allowlist");
    if (tunnels >= limits.maxTunnels) return refuse(o, socket, 503, `too many open tunnels (${limits.maxTunnels})`);
    o.entry.allowed = true;
    o.tunnel = true;
    tunnels++;

    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no connection within ${limits.connectTimeoutMs} ms`)), limits.connectTimeoutMs)));
    let upstream: Socket | undefined;
    try {
      const target = await Promise.race([resolve(host, port), deadline]);
      if (o.done || socket.destroyed) return finish(o, "the client went away before the tunnel opened");
      upstream = netConnect({ host: target.address, port: target.port });
      const up = upstream;
      sockets.add(up);
      up.on("close", () => sockets.delete(up));
      await Promise.race([
        new Promise<void>((ok, fail) => {
          up.once("connect", ok);
          up.once("error", fail);
        }),
        deadline,
      ]);
    } catch (err) {
      upstream?.destroy();
      if (err instanceof EgressRefusal) return refuse(o, socket, 403, err.message);
      finish(o, `cannot reach ${host}:${port}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
      return answer(socket, 502);
    } finally {
      clearTimeout(timer);
    }
    if (o.done || socket.destroyed) {
      upstream.destroy();
      return finish(o, "the client went away before the tunnel opened");
    }
    const up = upstream;
    up.on("error", () => {});
    const close = () => {
      finish(o);
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
  };

  // connectionsCheckingInterval: Node checks the header timeout only that often (default 30 s).
  const server = createServer({
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.headersTimeoutMs,
    connectionsCheckingInterval: 1000,
    maxHeaderSize: limits.maxHeaderBytes,
  });
  server.maxConnections = limits.maxConnections;
  server.on("drop", () => totals.droppedConnections++);
  server.on("connection", (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  server.on("connect", (req: IncomingMessage, socket: Duplex, head: Buffer) => void onConnect(req, socket, head));
  // A plain HTTP request through HTTP_PROXY (http://host/...): nothing but CONNECT to port 443 is served.
  server.on("request", (req, res) => {
    let host = "";
    let port = 0;
    try {
      const url = new URL(req.url ?? "");
      host = normalizeHost(url.hostname.replace(/^\[|\]$/g, ""));
      port = url.port ? Number(url.port) : url.protocol === "https:" ? 443 : 80;
    } catch {
      // not an absolute URL: host and port stay unknown
    }
    const o = begin(host, port);
    finish(o, `method ${req.method} refused; only CONNECT to port ${EGRESS_PORT} is served`);
    res.writeHead(405, { connection: "close", "content-length": "0" }).end();
  });
  // A request head that does not parse (or comes too slowly) is a refused request of unknown target.
  server.on("clientError", (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (err.code?.startsWith("HPE_") || err.code === "ERR_HTTP_REQUEST_TIMEOUT") {
      const o = begin("", 0);
      finish(o, `bad request: ${err.code}`);
      answer(socket, err.code === "ERR_HTTP_REQUEST_TIMEOUT" ? 408 : 400);
    }
    socket.destroy();
  });

  const socketPath = await listenForContainer(server, socketDir, EGRESS_SOCKET_NAME, opts);

  let stopped: Promise<EgressRecord> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      stopping = true;
      const closed = new Promise<void>((ok) => server.close(() => ok()));
      for (const s of sockets) s.destroy();
      // Tunnels still open when the attempt ends end now; one still being opened never opened.
      for (const o of [...open]) finish(o, o.established ? undefined : "the attempt ended before the tunnel opened");
      await closed;
      await rm(socketDir, { recursive: true, force: true });
      return structuredClone({ ...totals, entries });
    })());

  return { socketDir, socketPath, stop };
}
