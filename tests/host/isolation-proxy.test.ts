import { lstat, stat } from "node:fs/promises";
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { EgressRecordSchema } from "../../src/ledger/schema.ts";
import { EgressRefusal, type Resolve } from "../../src/isolation/policy.ts";
import { EGRESS_LIMITS, startEgressProxy, type EgressProxy, type EgressProxyOptions } from "../../src/isolation/proxy.ts";

// The strict profile's egress proxy on the host, driven over its unix socket by raw clients.
// Upstreams are loopback echo servers; the test resolver maps only "allowed.example" to one, so
// no request can leave the machine even if the policy were broken.

const cleanups: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function echoServer(): Promise<{ port: number; connections: () => number }> {
  let connections = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    connections++;
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    s.on("error", () => {});
    s.on("data", (d: Buffer) => s.write(Buffer.concat([Buffer.from("echo:"), d])));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(
    () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  );
  return { port: (server.address() as AddressInfo).port, connections: () => connections };
}

interface Started {
  proxy: EgressProxy;
  resolved: string[];
}

async function start(echoPort: number, opts: Partial<EgressProxyOptions> = {}): Promise<Started> {
  const resolved: string[] = [];
  const resolve: Resolve = async (host, port) => {
    resolved.push(`${host}:${port}`);
    if (host === "allowed.example") return { address: "127.0.0.1", port: echoPort };
    if (host === "inner.example") throw new EgressRefusal("inner.example resolves to 10.0.0.1, which is not a public address");
    throw new Error(`test resolver: ${host} does not resolve`);
  };
  const proxy = await startEgressProxy({ allow: ["allowed.example", "inner.example", "nxdomain.example"], resolve, ...opts });
  cleanups.push(() => proxy.stop());
  return { proxy, resolved };
}

/** Sends `head` over the proxy socket; resolves with the status code and the open socket. */
function request(socketPath: string, head: string, allowHalfOpen = false): Promise<{ status: number; socket: Socket; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ path: socketPath, allowHalfOpen });
    let buf = Buffer.alloc(0);
    socket.on("error", reject);
    socket.on("data", function onData(d: Buffer) {
      buf = Buffer.concat([buf, d]);
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      socket.off("data", onData);
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(buf.toString("latin1"))?.[1] ?? 0);
      resolve({ status, socket, rest: buf.subarray(end + 4) });
    });
    socket.on("close", () => reject(new Error(`closed before an answer: ${JSON.stringify(buf.toString("latin1"))}`)));
    socket.write(head);
  });
}

const connectHead = (target: string) => `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`;

function readOnce(socket: Socket): Promise<string> {
  return new Promise((resolve) => socket.once("data", (d: Buffer) => resolve(d.toString("utf8"))));
}

describe("egress proxy (isolation strict)", () => {
  it("opens a tunnel to an allowlisted name on 443 and records host, port, bytes each way and time", async () => {
    const echo = await echoServer();
    const { proxy, resolved } = await start(echo.port);
    const { status, socket } = await request(proxy.socketPath, connectHead("Allowed.Example:443"));
    expect(status).toBe(200);
    const answer = readOnce(socket);
    socket.write("hello");
    expect(await answer).toBe("echo:hello");
    socket.destroy();
    const record = await proxy.stop();
    expect(resolved).toEqual(["allowed.example:443"]);
    expect(EgressRecordSchema.parse(record)).toEqual(record);
    expect(record).toMatchObject({ requests: 1, allowed: 1, refused: 0, bytesUp: 5, bytesDown: 10, entriesDropped: 0 });
    expect(record.entries).toEqual([{ host: "allowed.example", port: 443, allowed: true, bytesUp: 5, bytesDown: 10, startedAt: expect.any(String), ms: expect.any(Number) }]);
    expect(Date.parse(record.entries[0]!.startedAt)).toBeGreaterThan(Date.now() - 60_000);
  });

  it("refuses other names, raw IPs, other ports, bad targets and plain HTTP, without resolving any of them", async () => {
    const echo = await echoServer();
    const { proxy, resolved } = await start(echo.port);
    const cases: Array<[string, number, string, number, RegExp]> = [
      [connectHead("denied.example:443"), 403, "denied.example", 443, /not on the allowlist/],
      [connectHead("127.0.0.1:443"), 403, "127.0.0.1", 443, /raw IP/],
      [connectHead(`127.0.0.1:${echo.port}`), 403, "127.0.0.1", echo.port, /port \d+ is not 443/],
      [connectHead("[::1]:443"), 403, "::1", 443, /raw IP/],
      [connectHead("allowed.example:80"), 403, "allowed.example", 80, /port 80 is not 443/],
      [connectHead("allowed.example"), 400, "", 0, /not a host:port target/],
      ["GET http://allowed.example/ HTTP/1.1\r\nHost: allowed.example\r\n\r\n", 405, "allowed.example", 80, /only CONNECT/],
      ["this is not http\r\n\r\n", 400, "", 0, /bad request/],
    ];
    for (const [head, status] of cases) {
      const r = await request(proxy.socketPath, head);
      expect(r.status, head).toBe(status);
      r.socket.destroy();
    }
    const record = await proxy.stop();
    expect(resolved).toEqual([]);
    expect(echo.connections()).toBe(0);
    expect(record).toMatchObject({ requests: cases.length, allowed: 0, refused: cases.length, bytesUp: 0, bytesDown: 0 });
    record.entries.forEach((e, i) => {
      const [, , host, port, error] = cases[i]!;
      expect(e, String(i)).toMatchObject({ host, port, allowed: false });
      expect(e.error, String(i)).toMatch(error);
    });
  });

  it("a name whose address the resolver refuses is refused; one that fails to resolve or to connect is allowed but failed", async () => {
    const echo = await echoServer();
    const { proxy } = await start(echo.port);
    expect((await request(proxy.socketPath, connectHead("inner.example:443"))).status).toBe(403);
    expect((await request(proxy.socketPath, connectHead("nxdomain.example:443"))).status).toBe(502);
    const record = await proxy.stop();
    expect(record.entries[0]).toMatchObject({ host: "inner.example", allowed: false, error: expect.stringMatching(/not a public address/) });
    expect(record.entries[1]).toMatchObject({ host: "nxdomain.example", allowed: true, error: expect.stringMatching(/cannot reach nxdomain\.example:443/) });
    expect(record).toMatchObject({ requests: 2, allowed: 1, refused: 1 });
  });

  it("answers 503 beyond the open-tunnel bound, keeps a bounded entry list, and counts everything", async () => {
    const echo = await echoServer();
    const { proxy } = await start(echo.port, { limits: { maxTunnels: 3, maxEntries: 5 } });
    const open = [];
    for (let i = 0; i < 3; i++) open.push(await request(proxy.socketPath, connectHead("allowed.example:443")));
    expect(open.map((o) => o.status)).toEqual([200, 200, 200]);
    const over = await request(proxy.socketPath, connectHead("allowed.example:443"));
    expect(over.status).toBe(503);
    for (let i = 0; i < 4; i++) (await request(proxy.socketPath, connectHead("denied.example:443"))).socket.destroy();
    // A closed tunnel frees its place.
    open.pop()!.socket.destroy();
    await new Promise((r) => setTimeout(r, 100));
    const again = await request(proxy.socketPath, connectHead("allowed.example:443"));
    expect(again.status).toBe(200);
    const record = await proxy.stop();
    expect(record.entries).toHaveLength(5);
    expect(record).toMatchObject({ requests: 9, allowed: 4, refused: 5, entriesDropped: 4 });
    expect(record.entries[3]).toMatchObject({ allowed: false, error: "too many open tunnels (3)" });
    expect(EgressRecordSchema.safeParse(record).success).toBe(true);
  });

  it("survives a flood of CONNECT requests in bounded time and stays usable", async () => {
    const echo = await echoServer();
    const { proxy } = await start(echo.port);
    const flood = 600;
    const t0 = Date.now();
    const results = await Promise.all(
      Array.from({ length: flood }, (_, i) =>
        request(proxy.socketPath, connectHead(i % 3 === 0 ? "allowed.example:443" : i % 3 === 1 ? "denied.example:443" : "10.0.0.1:443")).then(
          (r) => (r.status === 200 ? r : (r.socket.destroy(), r)),
          () => ({ status: -1, socket: undefined }),
        ),
      ),
    );
    expect(Date.now() - t0).toBeLessThan(20_000);
    const byStatus: Record<number, number> = {};
    for (const r of results) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
    expect(byStatus[200]).toBe(EGRESS_LIMITS.maxTunnels);
    // Still answers while the flood's tunnels are held open.
    expect((await request(proxy.socketPath, connectHead("denied.example:443"))).status).toBe(403);
    const record = await proxy.stop();
    for (const r of results) r.socket?.destroy();
    expect(EgressRecordSchema.safeParse(record).success).toBe(true);
    // Every request that got an answer is in the record; the rest were turned away unread (by the
    // connection bound, or by the kernel's listen backlog: EAGAIN), never left hanging.
    const answered = results.filter((r) => r.status > 0).length;
    expect(answered).toBeGreaterThan(flood / 2);
    expect(record.requests).toBe(answered + 1);
    expect(record.droppedConnections).toBeLessThanOrEqual(flood - answered);
    expect(record.allowed).toBe(EGRESS_LIMITS.maxTunnels);
    expect(record.entries.length).toBeLessThanOrEqual(EGRESS_LIMITS.maxEntries);
  }, 60_000);

  it("closes a client that never finishes its request head, within the header time bound", async () => {
    const echo = await echoServer();
    const { proxy } = await start(echo.port, { limits: { headersTimeoutMs: 1000 } });
    const socket = createConnection({ path: proxy.socketPath });
    socket.on("error", () => {});
    socket.resume();
    socket.write("CONNECT allowed.example:443 HTTP/1.1\r\nHost: allo");
    const t0 = Date.now();
    await new Promise((r) => socket.on("close", r));
    expect(Date.now() - t0).toBeLessThan(5000);
    const record = await proxy.stop();
    expect(record).toMatchObject({ requests: 1, refused: 1 });
    expect(record.entries[0]).toMatchObject({ host: "", port: 0, allowed: false, error: "bad request: ERR_HTTP_REQUEST_TIMEOUT" });
    expect(echo.connections()).toBe(0);
  });

  it("drops a refused client that keeps its connection open, freeing the slot", async () => {
    const echo = await echoServer();
    const { proxy } = await start(echo.port);
    // allowHalfOpen: the client keeps its side open after the proxy's answer and end.
    const r = await request(proxy.socketPath, connectHead("denied.example:443"), true);
    expect(r.status).toBe(403);
    r.socket.resume();
    r.socket.on("error", () => {});
    const closed = new Promise((resolve) => r.socket.on("close", resolve));
    // Past the linger time the proxy has closed its end: a write now meets a closed socket.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    r.socket.write("still here\r\n");
    const outcome = await Promise.race([closed.then(() => "closed"), new Promise((resolve) => setTimeout(() => resolve("still open"), 3000))]);
    expect(outcome).toBe("closed");
    await proxy.stop();
  });

  it("shares its socket with the container user only, and removes its folder on stop, closing open tunnels", async () => {
    const echo = await echoServer();
    const { proxy } = await start(echo.port);
    const dir = await stat(proxy.socketDir);
    const sock = await lstat(proxy.socketPath);
    expect(sock.isSocket()).toBe(true);
    expect(dir.mode & 0o777).toBe(0o700);
    expect(sock.mode & 0o777).toBe(0o600);
    if (process.getuid?.() === 0) expect([dir.uid, sock.uid, sock.gid]).toEqual([1000, 1000, 1000]);
    const tunnel = await request(proxy.socketPath, connectHead("allowed.example:443"));
    const closed = new Promise((r) => tunnel.socket.on("close", r));
    const record = await proxy.stop();
    await closed;
    expect(record.entries[0]).toMatchObject({ allowed: true });
    expect(record.entries[0]!.error).toBeUndefined();
    await expect(stat(proxy.socketDir)).rejects.toThrow(/ENOENT/);
    expect(await proxy.stop()).toEqual(record);
  });
});
