import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createConnection, createServer, type AddressInfo, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { buildImage } from "../../src/image/build.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { runHardened, SOCKET_DIR_IN_CONTAINER } from "./scripted-api-fixtures.ts";

// docker/helpers/api-relay.cjs and with-relay.cjs: on the host (byte-for-byte forwarding) and
// inside a NetworkMode "none" container, where loopback plus a bind-mounted socket folder is the
// only way out. The container image is the fake-claude image: the same layout (Node at
// /usr/local/bin/node, every docker/helpers/*.cjs at /opt/study-runner) as the real one.

const RELAY = fileURLToPath(new URL("../../docker/helpers/api-relay.cjs", import.meta.url));
const WITH_RELAY = `${IMAGE_LAYOUT.helpers}/with-relay.cjs`;
const SOCKET = `${SOCKET_DIR_IN_CONTAINER}/api.sock`;

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function socketDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "api-relay-"));
  // uid 1000 in the container must reach the socket inside.
  await chmod(dir, 0o755);
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** Starts the relay script as its own process and waits for its "listening" line. */
async function startRelayProcess(port: number, socketPath: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, [RELAY, String(port), socketPath], { stdio: ["ignore", "pipe", "pipe"] });
  cleanups.push(() => {
    child.kill("SIGKILL");
  });
  await new Promise<void>((resolve, reject) => {
    let err = "";
    child.stderr!.on("data", (d: Buffer) => {
      err += d.toString();
      if (err.includes("->")) resolve();
    });
    child.on("exit", (code) => reject(new Error(`relay exited ${code}: ${err}`)));
  });
  return child;
}

function roundTrip(port: number, payload: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const c = createConnection({ host: "127.0.0.1", port, allowHalfOpen: true });
    c.on("data", (d: Buffer) => chunks.push(d));
    c.on("end", () => resolve(Buffer.concat(chunks)));
    c.on("error", reject);
    c.end(payload);
  });
}

describe("api-relay.cjs on the host", () => {
  it("forwards arbitrary bytes both ways unchanged, half-close included", async () => {
    const dir = await socketDir();
    const socketPath = join(dir, "echo.sock");
    // An echo server that answers only after the client finished sending (half-close).
    const echo: Server = createServer({ allowHalfOpen: true }, (s) => {
      const got: Buffer[] = [];
      s.on("data", (d: Buffer) => got.push(d));
      s.on("end", () => s.end(Buffer.concat(got).reverse()));
    });
    await new Promise<void>((r) => echo.listen(socketPath, r));
    cleanups.push(() => new Promise<void>((r) => echo.close(() => r())));
    const port = await freePort();
    await startRelayProcess(port, socketPath);

    const payload = randomBytes(3 * 1024 * 1024);
    const [a, b] = await Promise.all([roundTrip(port, payload), roundTrip(port, Buffer.from("second connection"))]);
    expect(a.equals(Buffer.from(payload).reverse())).toBe(true);
    expect(b.toString()).toBe("noitcennoc dnoces");
  });

  it("closes the client's connection when the socket is not there, instead of leaving it hanging", async () => {
    const dir = await socketDir();
    const port = await freePort();
    await startRelayProcess(port, join(dir, "missing.sock"));
    const outcome = await new Promise<string>((resolve) => {
      const c = createConnection({ host: "127.0.0.1", port });
      c.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? "error"));
      c.on("close", () => resolve("closed"));
      c.write("GET / HTTP/1.1\r\n\r\n");
    });
    expect(["ECONNRESET", "closed", "EPIPE"]).toContain(outcome);
  });

  it("refuses bad arguments with exit code 2", async () => {
    for (const args of [["not-a-port", "/tmp/x.sock"], ["8080", "relative.sock"], ["70000", "/tmp/x.sock"], []]) {
      const code = await new Promise<number | null>((resolve) => spawn(process.execPath, [RELAY, ...args], { stdio: "ignore" }).on("exit", resolve));
      expect(code).toBe(2);
    }
  });
});

describe("with-relay.cjs in a NetworkMode none container", () => {
  const runtime = new DockerRuntime();
  let image = "";
  let api: ScriptedApi | undefined;
  let dir = "";

  beforeAll(async () => {
    image = (await buildImage(runtime, await fakeClaudeImageSpec())).id;
  }, 300_000);

  // biome-ignore lint/suspicious/noDuplicateTestHooks: the image build above has its own long timeout; this one sets up the socket folder
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "with-relay-"));
    await chmod(dir, 0o755);
    api = await startScriptedApi({
      socketPath: join(dir, "api.sock"),
      script: {
        name: "relay",
        turns: [{ answer: "through the relay", usage: { input_tokens: 11, output_tokens: 7 } }],
      },
    });
  });
  afterAll(async () => {
    await api?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const wrapped = (program: string, baseUrl = "http://127.0.0.1:8080") => ({
    entrypoint: [IMAGE_LAYOUT.node, WITH_RELAY],
    cmd: [SOCKET, "--", IMAGE_LAYOUT.node, "-e", program],
    env: { ANTHROPIC_BASE_URL: baseUrl },
  });

  it("lets a process that only knows ANTHROPIC_BASE_URL reach the host server, and adds nothing to stdout", async () => {
    const program = `
      const r = await fetch(process.env.ANTHROPIC_BASE_URL + "/v1/messages?beta=true", {
        method: "POST",
        headers: { "content-type": "application/json", authorization: "Bearer test-access-token-not-real" },
        body: JSON.stringify({ model: "claude-haiku-5-5", max_tokens: 10, stream: true, messages: [{ role: "user", content: "hi" }] }),
      });
      process.stdout.write("status " + r.status + "\\n" + (await r.text()));
      // And nothing else can be reached: there is no network besides loopback.
      try { await fetch("http://1.1.1.1/", { signal: AbortSignal.timeout(3000) }); process.stdout.write("\\nOUTSIDE REACHED"); } catch {}
    `;
    const before = api!.requests.length;
    const run = await runHardened(runtime, { image, socketDir: dir, ...wrapped(`(async () => {${program}})()`) });
    expect(run.exitCode).toBe(0);
    const text = run.stdout.toString("utf8");
    expect(text.startsWith("status 200\nevent: message_start\n")).toBe(true);
    expect(text).toContain('"text":"through the relay"');
    expect(text.trimEnd().endsWith('data: {"type":"message_stop"}')).toBe(true);
    expect(text).not.toContain("OUTSIDE REACHED");
    const recorded = api!.requests.slice(before);
    expect(recorded).toHaveLength(1);
    expect(recorded[0]).toMatchObject({ method: "POST", path: "/v1/messages?beta=true", auth: { bearer: true }, answer: { kind: "answer" } });
    expect(recorded[0]!.headers.host).toBe("127.0.0.1:8080");
  });

  it("passes on the child's exit code and the signals it receives", async () => {
    const exit7 = await runHardened(runtime, { image, socketDir: dir, ...wrapped("process.stdout.write('bye'); process.exit(7)") });
    expect(exit7.exitCode).toBe(7);
    expect(exit7.stdout.toString()).toBe("bye");

    const trap = `process.on("SIGTERM", () => { process.stdout.write("got TERM"); process.exit(42); }); process.stdout.write("ready\\n"); setInterval(() => {}, 1000);`;
    const term = await runHardened(runtime, { image, socketDir: dir, ...wrapped(trap), signalAfter: { text: "ready\n", signal: "SIGTERM" } });
    expect(term.stdout.toString()).toBe("ready\ngot TERM");
    expect(term.exitCode).toBe(42);

    // A child killed by a signal: 128 + its number, as a shell would report it.
    const killed = await runHardened(runtime, { image, socketDir: dir, ...wrapped("process.kill(process.pid, 'SIGKILL')") });
    expect(killed.exitCode).toBe(137);
  });

  it("refuses, before starting the child, a base URL that is not http://127.0.0.1:<port>", async () => {
    for (const url of ["http://10.0.0.1:8080", "https://127.0.0.1:8080", "http://localhost:8080", "http://127.0.0.1:8080/v1", ""]) {
      const run = await runHardened(runtime, { image, socketDir: dir, ...wrapped("process.stdout.write('child ran')", url) });
      expect(run.exitCode, url).toBe(2);
      expect(run.stdout.toString(), url).toBe("");
      expect(run.stderr).toMatch(/with-relay: ANTHROPIC_BASE_URL/);
    }
    const noDash = await runHardened(runtime, {
      image,
      socketDir: dir,
      entrypoint: [IMAGE_LAYOUT.node, WITH_RELAY],
      cmd: [SOCKET, IMAGE_LAYOUT.node],
      env: { ANTHROPIC_BASE_URL: "http://127.0.0.1:8080" },
    });
    expect(noDash.exitCode).toBe(2);
    const missing = await runHardened(runtime, {
      image,
      socketDir: dir,
      entrypoint: [IMAGE_LAYOUT.node, WITH_RELAY],
      cmd: [SOCKET, "--", "/no/such/program"],
      env: { ANTHROPIC_BASE_URL: "http://127.0.0.1:8080" },
    });
    expect(missing.exitCode).toBe(127);
  });
});
