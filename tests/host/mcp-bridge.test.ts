import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { connect } from "node:net";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { afterEach, describe, expect, it } from "vitest";
import { compareMcpRecord, startMcpBridge, type McpBridge } from "../../src/mcp/bridge.ts";
import { RELAY_SCRIPT_PATH } from "../support/mcp-relay.ts";
import { ENGINE, docFiles, makeRepo, runIndex } from "./mcp-fixtures.ts";

const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

async function bridgeFor(command: readonly string[], cwd: string, socketDir?: string): Promise<McpBridge> {
  const bridge = await startMcpBridge({ command, cwd, socketDir });
  cleanup.push(() => bridge.stop());
  return bridge;
}

/** The relay as the container would run it (here with host node), stdio piped to the test. */
function relay(socketPath: string, opts: { uid?: number; gid?: number } = {}) {
  const child = spawn(process.execPath, [RELAY_SCRIPT_PATH, socketPath], { stdio: ["pipe", "pipe", "pipe"], cwd: "/", ...opts });
  const out: Buffer[] = [];
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => out.push(d));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  cleanup.push(async () => {
    if (child.exitCode === null) child.kill("SIGKILL");
  });
  return { child, exited, output: () => Buffer.concat(out), stderr: () => stderr };
}

function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms))]);
}

const waitFor = async (cond: () => boolean, ms: number, what: string) => {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error(`${what} did not happen within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

const NODE_ECHO = [process.execPath, "-e", "process.stdin.pipe(process.stdout)"];

describe("MCP bridge", () => {
  it("serves a real MCP client through the relay and records exactly the calls the server answered", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    await runIndex(repo.dir);
    const bridge = await bridgeFor(ENGINE, repo.dir);

    const client = new Client({ name: "claude-stand-in", version: "1" });
    await client.connect(new StdioClientTransport({ command: process.execPath, args: [RELAY_SCRIPT_PATH, bridge.socketPath], cwd: "/", stderr: "pipe" }));
    const found = (await client.callTool({ name: "doc.search", arguments: { query: "rounding" } })) as { isError?: boolean; structuredContent?: Record<string, unknown> };
    expect(found.isError).toBeFalsy();
    expect(found.structuredContent).toMatchObject({ pin: repo.commit, matches: [{ path: "docs/rounding.md" }] });
    const doc = (await client.callTool({ name: "doc.get", arguments: { path: "docs/rounding.md" } })) as { structuredContent?: Record<string, unknown> };
    expect(doc.structuredContent?.text).toContain("half to even");
    const missing = (await client.callTool({ name: "doc.get", arguments: { path: "nope.md" } })) as { isError?: boolean };
    expect(missing.isError).toBe(true);
    await client.close();

    const record = await bridge.stop();
    expect(record.connections).toBe(1);
    expect(record.refusedConnections).toBe(0);
    expect(record.toolCalls.map(({ name, isError }) => ({ name, isError }))).toEqual([
      { name: "doc.search", isError: false },
      { name: "doc.get", isError: false },
      { name: "doc.get", isError: true },
    ]);
    expect(record.unansweredToolCalls).toEqual([]);
    // initialize (request + answer), notifications/initialized, three calls with their answers.
    expect(record.messages).toBe(9);
    expect(record.messageLog.filter((m) => m.method === "initialize")).toHaveLength(1);
    expect(JSON.stringify(record)).not.toContain("half to even");
    expect(record.serverExits).toHaveLength(1);
    await expect(stat(bridge.socketDir)).rejects.toMatchObject({ code: "ENOENT" });

    const claimed = ["mcp__doc-bridge__doc_search", "mcp__doc-bridge__doc_get", "mcp__doc-bridge__doc_get"];
    expect(compareMcpRecord(record, claimed)).toEqual([]);
    expect(compareMcpRecord(record, [...claimed, "mcp__doc-bridge__handoff_resolve"])).toEqual([
      "the transcript shows 1 call(s) of mcp__doc-bridge__handoff_resolve but the doc-bridge server answered 0",
    ]);
  });

  it("makes the socket usable by the container user (uid 1000) and nobody else", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const bridge = await bridgeFor(NODE_ECHO, repo.dir);
    const dir = await stat(bridge.socketDir);
    const sock = await stat(bridge.socketPath);
    expect(dir.mode & 0o777).toBe(0o700);
    expect(sock.isSocket()).toBe(true);
    expect(sock.mode & 0o777).toBe(0o600);
    expect([dir.uid, dir.gid, sock.uid, sock.gid]).toEqual([1000, 1000, 1000, 1000]);

    const stranger = relay(bridge.socketPath, { uid: 1001, gid: 1001 });
    expect(await within(stranger.exited, 5000, "the stranger's relay exit")).toBe(1);
    expect(stranger.stderr()).toContain("EACCES");

    const user = relay(bridge.socketPath, { uid: 1000, gid: 1000 });
    user.child.stdin.write('{"jsonrpc":"2.0","method":"hello"}\n');
    await waitFor(() => user.output().toString() === '{"jsonrpc":"2.0","method":"hello"}\n', 5000, "the echo through the uid-1000 relay");
    user.child.stdin.end();
    expect(await within(user.exited, 5000, "the relay exit")).toBe(0);
    expect(bridge.snapshot().connections).toBe(1);
  });

  it("refuses to start for a runner that is neither root nor the container uid", async () => {
    // This child runs the runner's TypeScript itself, so it needs tsx (the engine command no longer does).
    const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
    const script =
      `import { startMcpBridge } from ${JSON.stringify(new URL("../../src/mcp/bridge.ts", import.meta.url).href)};` +
      `startMcpBridge({ command: ["true"], cwd: "/" }).then(async (b) => { await b.stop(); console.log("started"); }, (e) => console.log(e.message));`;
    const child = spawn(process.execPath, ["--import", tsxLoader, "--input-type=module", "-e", script], {
      uid: 1001,
      gid: 1001,
      cwd: "/",
      env: { PATH: process.env.PATH ?? "", HOME: "/tmp" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    await within(new Promise((resolve) => child.on("close", resolve)), 20_000, "the uid-1001 runner's exit");
    expect(out.trim()).toBe("MCP bridge: the runner must run as root or as uid 1000 (the container user) to share the socket; it runs as uid 1001");
  });

  // contract: R288
  it("refuses a socket path too long for a unix socket, and stops the engine it started: the process can exit", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const parent = await mkdtemp(join(tmpdir(), "mcp-deep-"));
    cleanup.push(() => rm(parent, { recursive: true, force: true }));
    const socketDir = join(parent, "d".repeat(Math.max(1, 110 - parent.length)));
    // A child of its own: a started engine left behind keeps its event loop, and so the runner, alive.
    const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
    const script =
      `import { startMcpBridge } from ${JSON.stringify(new URL("../../src/mcp/bridge.ts", import.meta.url).href)};` +
      `startMcpBridge({ command: ${JSON.stringify(NODE_ECHO)}, cwd: ${JSON.stringify(repo.dir)}, socketDir: ${JSON.stringify(socketDir)} }).then(() => console.log("started"), (e) => console.log(e.message));`;
    const child = spawn(process.execPath, ["--import", tsxLoader, "--input-type=module", "-e", script], {
      cwd: "/",
      env: { PATH: process.env.PATH ?? "", HOME: "/tmp", TMPDIR: tmpdir() },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    await within(new Promise((resolve) => child.on("close", resolve)), 20_000, "the runner's exit after the refusal");
    expect(out.trim()).toMatch(new RegExp(`^the socket path ${socketDir}/mcp\\.sock is \\d+ bytes, over the 107 bytes a unix socket's path may have; set TMPDIR to a shorter folder`));
  });

  it("relays checked JSON-RPC to the server, bytes unchanged back, drops what it cannot check, and exits when its stdin closes", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const bridge = await bridgeFor(NODE_ECHO, repo.dir);
    const r = relay(bridge.socketPath);
    // Larger than one pipe buffer; a line that is not JSON (and not UTF-8) never reaches the server.
    const big = { jsonrpc: "2.0", method: "x", params: { pad: randomBytes(150_000).toString("hex") } };
    const payload = Buffer.concat([
      Buffer.from(JSON.stringify(big) + "\n"),
      randomBytes(1000).filter((b) => b !== 0x0a),
      Buffer.from([0xff, 0xfe, 0x0a]),
      Buffer.from('{"jsonrpc":"2.0","method":"y"}\n'),
    ]);
    r.child.stdin.write(payload);
    const echoed = JSON.stringify(big) + "\n" + '{"jsonrpc":"2.0","method":"y"}\n';
    await waitFor(() => r.output().length >= echoed.length, 5000, "the echo of both lines");
    r.child.stdin.end();
    expect(await within(r.exited, 5000, "the relay exit")).toBe(0);
    expect(r.output().toString()).toBe(echoed);
    await waitFor(() => bridge.snapshot().serverExits.length === 1, 5000, "the server's exit after EOF");
    const record = await bridge.stop();
    expect(record.messageLog.filter((m) => m.direction === "to-server").map((m) => m.method)).toEqual(["x", "y"]);
    expect(record.refusedToolCalls).toEqual([{ name: "(unparsed line)", id: null }]);
  });

  // An engine that answers every request at once (`{"result":{}}`, or after 300 ms for the method
  // "slow"), and once its stdin has ended stays alive for 20 s before it exits.
  const LINGERING = [
    process.execPath,
    "-e",
    `let b = ""; process.stdin.on("data", (d) => { b += d; let i; while ((i = b.indexOf("\\n")) >= 0) { const m = JSON.parse(b.slice(0, i)); b = b.slice(i + 1);
       const answer = () => process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id: m.id, result: {} }) + "\\n");
       if (m.id !== undefined) m.method === "slow" ? setTimeout(answer, 300) : answer(); } });
     process.stdin.on("end", () => setTimeout(() => process.exit(0), 20000));`,
  ];

  /** A client straight on the bridge's socket (no relay, so no relay's drain timer): what it read, and when the bridge ended. */
  function rawClient(socketPath: string) {
    const socket = connect(socketPath);
    const chunks: Buffer[] = [];
    socket.on("data", (d: Buffer) => chunks.push(d));
    const ended = new Promise<void>((resolve) => socket.on("end", () => resolve()));
    cleanup.push(async () => void socket.destroy());
    return { socket, ended, read: () => Buffer.concat(chunks).toString() };
  }

  it("ends the connection when the client has ended its side and every request is answered, without waiting for the engine's exit", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const bridge = await bridgeFor(LINGERING, repo.dir);
    const c = rawClient(bridge.socketPath);
    c.socket.write('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n');
    await waitFor(() => c.read().includes('"id":1'), 5000, "the answer to initialize");
    c.socket.end();
    // The engine lingers 20 s after its stdin ended; the connection (and with it the CLI) does not wait for it.
    await within(c.ended, 5000, "the bridge's end of the connection");
    expect(bridge.snapshot().serverExits).toEqual([]);
    const record = await within(bridge.stop(), 10_000, "stop()");
    expect(record.serverExits).toEqual([{ code: null, signal: "SIGTERM" }]);
    expect(record.messages).toBe(2);
  });

  it("keeps the connection open past the client's end until a request in flight is answered", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const bridge = await bridgeFor(LINGERING, repo.dir);
    const c = rawClient(bridge.socketPath);
    // Sent and ended at once: the answer comes 300 ms later and must still reach the client.
    c.socket.end('{"jsonrpc":"2.0","id":7,"method":"slow"}\n');
    await within(c.ended, 5000, "the bridge's end of the connection");
    expect(c.read()).toBe('{"jsonrpc":"2.0","id":7,"result":{}}\n');
    const record = await within(bridge.stop(), 10_000, "stop()");
    expect(record.messageLog.map((m) => [m.direction, m.kind, m.id])).toEqual([
      ["to-server", "request", 7],
      ["to-client", "response", 7],
    ]);
  });

  it("the relay exits when the server side closes", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const bridge = await bridgeFor([process.execPath, "-e", "process.stdout.write('bye\\n')"], repo.dir);
    const r = relay(bridge.socketPath);
    // stdin stays open: only the server's exit can end the relay.
    expect(await within(r.exited, 5000, "the relay exit")).toBe(0);
    expect(r.output().toString()).toBe("bye\n");
    expect(r.child.stdin.writableEnded).toBe(false);
  });

  it("starts its engine before anyone connects and hands the connection what it wrote meanwhile", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const bridge = await bridgeFor([process.execPath, "-e", "process.stdout.write('early\\n')"], repo.dir);
    // The engine has run and exited with no client yet: it was started with the bridge, not on the connection.
    await waitFor(() => bridge.snapshot().serverExits.length === 1, 10_000, "the engine's exit before any connection");
    expect(bridge.snapshot().connections).toBe(0);
    const r = relay(bridge.socketPath);
    expect(await within(r.exited, 5000, "the relay exit")).toBe(0);
    expect(r.output().toString()).toBe("early\n");
    const record = await bridge.stop();
    expect(record.connections).toBe(1);
    expect(record.serverExits).toEqual([{ code: 0, signal: null }]);
  });

  it("serves one connection per attempt and refuses any further one", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const bridge = await bridgeFor(NODE_ECHO, repo.dir);
    const first = relay(bridge.socketPath);
    const one = '{"jsonrpc":"2.0","method":"one"}\n';
    const still = '{"jsonrpc":"2.0","method":"still"}\n';
    first.child.stdin.write(one);
    await waitFor(() => first.output().toString() === one, 5000, "the first echo");

    const second = connect(bridge.socketPath);
    await within(new Promise((resolve) => second.on("close", resolve)), 5000, "the second connection's close");
    first.child.stdin.write(still);
    await waitFor(() => first.output().toString() === one + still, 5000, "the first connection still served");

    const record = await bridge.stop();
    expect(record.connections).toBe(1);
    expect(record.refusedConnections).toBe(1);
    expect(compareMcpRecord(record, [])).toEqual(["1 extra connection(s) to the doc-bridge socket were refused"]);
    expect(await within(first.exited, 5000, "the relay exit after stop")).toBe(0);
  });

  it("starts the server in its own clone of the checkout with an allowlisted environment", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const saved = { key: process.env.ANTHROPIC_API_KEY, canary: process.env.STUDY_RUNNER_CANARY };
    process.env.ANTHROPIC_API_KEY = "sk-ant-canary-not-a-key";
    process.env.STUDY_RUNNER_CANARY = "1";
    try {
      const bridge = await bridgeFor([process.execPath, "-e", "console.log(JSON.stringify({ cwd: process.cwd(), keys: Object.keys(process.env) }))"], repo.dir);
      const r = relay(bridge.socketPath);
      await within(r.exited, 5000, "the relay exit");
      const seen = JSON.parse(r.output().toString()) as { cwd: string; keys: string[] };
      expect(seen.cwd).not.toBe(repo.dir);
      expect(seen.cwd).toMatch(/\/study-runner-engine-\d+-[^/]+\/checkout$/);
      expect(seen.keys).toContain("PATH");
      expect(seen.keys).not.toContain("USER");
      expect(seen.keys).not.toContain("ANTHROPIC_API_KEY");
      expect(seen.keys).not.toContain("STUDY_RUNNER_CANARY");
    } finally {
      for (const [k, v] of [
        ["ANTHROPIC_API_KEY", saved.key],
        ["STUDY_RUNNER_CANARY", saved.canary],
      ] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  it("stop() kills a server that ignores EOF and SIGTERM, and reports the unanswered call", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const stubborn = [process.execPath, "-e", "process.on('SIGTERM', () => {}); process.stdin.resume(); setInterval(() => {}, 1000)"];
    const bridge = await bridgeFor(stubborn, repo.dir);
    const r = relay(bridge.socketPath);
    r.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 5, method: "tools/call", params: { name: "doc.search", arguments: {} } }) + "\n");
    await waitFor(() => bridge.snapshot().messages === 1, 5000, "the request reaching the bridge");
    const record = await within(bridge.stop(), 10_000, "stop()");
    expect(record.serverExits).toEqual([{ code: null, signal: "SIGKILL" }]);
    expect(record.unansweredToolCalls).toEqual([{ name: "doc.search", id: 5 }]);
    expect(compareMcpRecord(record, ["mcp__doc-bridge__doc_search"])).toContain("the doc-bridge server never answered mcp__doc-bridge__doc_search (request id 5)");
    expect(await within(r.exited, 5000, "the relay exit")).toBe(0);
  });

  it("records an engine that cannot be started and closes the connection", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const bridge = await bridgeFor(["/nonexistent/doc-bridge"], repo.dir);
    const r = relay(bridge.socketPath);
    expect(await within(r.exited, 5000, "the relay exit")).toBe(0);
    const record = await bridge.stop();
    expect(record.connections).toBe(1);
    // Started through setpriv when the runner is root (it reports the missing file), else spawned directly.
    expect(`${record.spawnErrors.join(" ")} ${record.serverStderrTail}`).toMatch(/ENOENT|No such file or directory/);
  });

  it("creates the socket folder fresh: an existing folder is refused", async () => {
    const repo = await makeRepo(docFiles(), cleanup);
    const parent = await mkdtemp(join(tmpdir(), "mcp-sockparent-"));
    cleanup.push(() => rm(parent, { recursive: true, force: true }));
    await expect(startMcpBridge({ command: NODE_ECHO, cwd: repo.dir, socketDir: parent })).rejects.toMatchObject({ code: "EEXIST" });
    const bridge = await bridgeFor(NODE_ECHO, repo.dir, join(parent, "attempt-1"));
    expect(bridge.socketPath).toBe(join(parent, "attempt-1", "mcp.sock"));
    expect(bridge.mount).toEqual({ source: join(parent, "attempt-1"), target: "/run/study-runner", readOnly: true });
  });
});
