import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type AddressInfo, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";

// docker/helpers/with-relay.cjs with --proxy (issue 9), run as a process on the host: the relay
// to the egress proxy's socket listens on the port HTTPS_PROXY names, beside the model API's.
// The in-container path is covered by tests/integration/isolation-strict.test.ts.

const WITH_RELAY = fileURLToPath(new URL("../../docker/helpers/with-relay.cjs", import.meta.url));

const cleanups: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

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

/** A unix socket server answering every connection with `<tag>:` + what it received. */
async function taggedSocket(dir: string, tag: string): Promise<string> {
  const path = join(dir, `${tag}.sock`);
  const server: Server = createServer((s) => s.on("data", (d: Buffer) => s.end(`${tag}:${d.toString()}`)));
  await new Promise<void>((r) => server.listen(path, r));
  cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
  return path;
}

function run(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [WITH_RELAY, ...args], { env: { PATH: process.env.PATH, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d));
    child.stderr.on("data", (d: Buffer) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A child that sends `msg` to a loopback port and prints what comes back. */
const talk = (portExpr: string, msg: string) =>
  `{ const s = require("net").connect(Number(${portExpr}), "127.0.0.1"); let b = ""; s.on("data", (d) => (b += d)); s.on("end", () => process.stdout.write(b + "\\n")); s.end(${JSON.stringify(msg)}); }`;

describe("with-relay.cjs --proxy", () => {
  it("relays the HTTPS_PROXY port to the proxy socket, beside the API relay on its own port", async () => {
    const dir = await mkdtemp(join(tmpdir(), "iso-relay-"));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const [api, proxy] = await Promise.all([taggedSocket(dir, "api"), taggedSocket(dir, "proxy")]);
    const [apiPort, proxyPort] = [await freePort(), await freePort()];
    const env = { ANTHROPIC_BASE_URL: `http://127.0.0.1:${apiPort}`, HTTPS_PROXY: `http://127.0.0.1:${proxyPort}`, HTTP_PROXY: `http://127.0.0.1:${proxyPort}` };
    const program = `${talk(`new URL(process.env.HTTPS_PROXY).port`, "CONNECT x:443")} ${talk(`new URL(process.env.ANTHROPIC_BASE_URL).port`, "POST")}`;
    const both = await run(["--api", api, "--proxy", proxy, "--", process.execPath, "-e", program], env);
    expect(both.code, both.stderr).toBe(0);
    expect(both.stdout.split("\n").filter(Boolean).sort()).toEqual(["api:POST", "proxy:CONNECT x:443"]);
    const only = await run(["--proxy", proxy, "--", process.execPath, "-e", talk(`new URL(process.env.HTTPS_PROXY).port`, "hi")], env);
    expect(only.code, only.stderr).toBe(0);
    expect(only.stdout).toBe("proxy:hi\n");
  });

  it("refuses, before starting the child, a proxy address that is not loopback or that HTTP_PROXY contradicts, and bad arguments", async () => {
    const good = "http://127.0.0.1:3128";
    const child = [process.execPath, "-e", "process.stdout.write('child ran')"];
    const cases: Array<[string[], Record<string, string>, RegExp]> = [
      [
        ["--proxy", "/tmp/p.sock", "--", ...child],
        { HTTPS_PROXY: "http://10.0.0.1:3128", HTTP_PROXY: "http://10.0.0.1:3128" },
        /HTTPS_PROXY "http:\/\/10\.0\.0\.1:3128" is not http:\/\/127\.0\.0\.1:<port>/,
      ],
      [["--proxy", "/tmp/p.sock", "--", ...child], {}, /HTTPS_PROXY "" is not/],
      [["--proxy", "/tmp/p.sock", "--", ...child], { HTTPS_PROXY: good, HTTP_PROXY: "http://127.0.0.1:9999" }, /HTTP_PROXY .* differs from HTTPS_PROXY/],
      [["--proxy", "/tmp/p.sock", "--", ...child], { HTTPS_PROXY: good }, /HTTP_PROXY "" differs/],
      [["--api", "/tmp/a.sock", "--proxy", "/tmp/p.sock", "--", ...child], { ANTHROPIC_BASE_URL: good, HTTPS_PROXY: good, HTTP_PROXY: good }, /name the same port 3128/],
      [["--proxy", "relative.sock", "--", ...child], { HTTPS_PROXY: good, HTTP_PROXY: good }, /not absolute/],
      [["--proxy", "/tmp/p.sock", "--proxy", "/tmp/q.sock", "--", ...child], { HTTPS_PROXY: good, HTTP_PROXY: good }, /usage/],
      [["--socks", "/tmp/p.sock", "--", ...child], { HTTPS_PROXY: good, HTTP_PROXY: good }, /usage/],
      [["--proxy", "--", ...child], { HTTPS_PROXY: good, HTTP_PROXY: good }, /usage/],
      [["--", ...child], {}, /usage/],
    ];
    for (const [args, env, message] of cases) {
      const r = await run(args, env);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stdout, args.join(" ")).toBe("");
      expect(r.stderr, args.join(" ")).toMatch(message);
    }
  });
});
