/**
 * The gateway's preflight of its upstream (contract R192): a verified TLS handshake on loopback,
 * nothing sent; every failure names the host, the error and the fix, within a bounded wait.
 */
import { createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { probeUpstream as probe, upstreamRefusal } from "../../src/gateway/probe.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { makeTestCa, type TestCa } from "../support/test-ca.ts";

let ca: TestCa;
let other: TestCa;
let api: ScriptedApi;
let silent: Server;
const held: Socket[] = [];
const portOf = (s: Server) => (s.address() as { port: number }).port;

beforeAll(async () => {
  ca = makeTestCa();
  other = makeTestCa();
  api = await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, script: { name: "s", turns: [{ answer: "ok", usage: { input_tokens: 1, output_tokens: 1 } }], neverEnd: false } });
  silent = createServer((s) => void held.push(s));
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
});
afterAll(async () => {
  for (const s of held) s.destroy();
  await new Promise((resolve) => silent?.close(resolve));
  await api?.close();
});

/** A loopback port that was free a moment ago, with nothing listening on it now. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const port = portOf(s);
  await new Promise((resolve) => s.close(resolve));
  return port;
}

const probeUpstream = async (...args: Parameters<typeof probe>) => {
  const problem = await probe(...args);
  return problem && upstreamRefusal(problem);
};
const httpsOf = (url: string) => url.replace(/^http:/, "https:");

describe("the gateway's upstream preflight", () => {
  // contract: R192
  it("passes the scripted upstream whose certificate the trusted CA signed, and no request reaches it", async () => {
    expect(await probeUpstream({ url: httpsOf(api.url!), ca: ca.ca })).toBeNull();
    expect(api.requests).toEqual([]);
  });

  // contract: R192
  it("names the host, the refusal and the fix for a port with no listener", async () => {
    const port = await closedPort();
    const message = await probeUpstream({ url: `https://127.0.0.1:${port}`, ca: ca.ca });
    expect(message).toContain(`the model API at 127.0.0.1:${port} cannot be reached from the gateway (ECONNREFUSED`);
    expect(message).toMatch(/nothing was reserved.*Fix: .*--credentials login-copy/);
  });

  // contract: R192
  it("refuses an upstream whose certificate another CA signed", async () => {
    const message = await probeUpstream({ url: httpsOf(api.url!), ca: other.ca });
    expect(message).toMatch(
      new RegExp(
        `the model API at ${httpsOf(api.url!).replace("https://", "").replace(/\./g, "\\.")} cannot be reached from the gateway \\((UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT)`,
      ),
    );
    expect(api.requests).toEqual([]);
  });

  // contract: R192
  it("gives up on an upstream that accepts and never answers, within the bounded wait", async () => {
    const started = Date.now();
    const message = await probeUpstream({ url: `https://127.0.0.1:${portOf(silent)}`, ca: ca.ca }, { timeoutMs: 1500 });
    const took = Date.now() - started;
    expect(message).toContain(`the model API at 127.0.0.1:${portOf(silent)} cannot be reached from the gateway (no TLS handshake within 1.5 s)`);
    expect(took).toBeGreaterThanOrEqual(1400);
    expect(took).toBeLessThan(4000);
    expect(held.length).toBe(1);
  });
});
