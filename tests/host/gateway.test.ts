import { createHash } from "node:crypto";
import { request } from "node:http";
import { createServer as createTlsServer } from "node:https";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Gateway } from "../../src/gateway/gateway.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { makeTestCa, type TestCa } from "../support/test-ca.ts";
import { meteredCostPico, meteredCostUsd, requestBound } from "../../src/gateway/meter.ts";
import { picoToUsd } from "../../src/cost/money.ts";

const MODEL = "claude-haiku-5-5";
const REAL = "test-real-credential-not-a-real-token";
const sha12 = (t: string) => createHash("sha256").update(t).digest("hex").slice(0, 12);

function post(socketPath: string, o: { token?: string; body?: unknown; path?: string; method?: string }): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const body = o.body === undefined ? "" : JSON.stringify(o.body);
    const req = request(
      {
        socketPath,
        method: o.method ?? "POST",
        path: o.path ?? "/v1/messages?beta=true",
        headers: { "content-type": "application/json", ...(o.token ? { authorization: `Bearer ${o.token}` } : {}), "anthropic-beta": "oauth-2025-04-20" },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const message = (text: string, extra: Record<string, unknown> = {}) => ({ model: MODEL, max_tokens: 1000, stream: true, messages: [{ role: "user", content: text }], ...extra });

describe("model gateway (scripted API over TLS on loopback, test CA)", () => {
  let ca: TestCa;
  let api: ScriptedApi;
  let gateway: Gateway;
  beforeAll(async () => {
    ca = makeTestCa();
    api = await startScriptedApi({
      port: 0,
      tls: { key: ca.key, cert: ca.cert },
      script: [
        {
          name: "plain",
          marker: "plain",
          turns: [
            {
              answer: "hello",
              usage: {
                input_tokens: 50,
                output_tokens: 7,
                cache_read_input_tokens: 20,
                cache_creation_input_tokens: 30,
                cache_creation: { ephemeral_5m_input_tokens: 10, ephemeral_1h_input_tokens: 20 },
              },
            },
          ],
        },
        { name: "reset", marker: "reset-me", turns: [{ fault: "connection-reset" }, { answer: "after", usage: { input_tokens: 1, output_tokens: 1 } }] },
        { name: "liar", marker: "liar", turns: [{ answer: "big", usage: { input_tokens: 5_000_000, output_tokens: 1 } }] },
        {
          name: "refused-by-api",
          marker: "bad-request",
          turns: [
            { error: { status: 400, type: "invalid_request_error", message: "scripted bad request" } },
            { error: { status: 400, type: "invalid_request_error", message: "scripted bad request" } },
          ],
        },
      ],
    });
    gateway = new Gateway({ model: MODEL, upstream: { url: api.url!.replace("http:", "https:"), ca: ca.ca } });
  }, 60_000);
  afterAll(async () => {
    gateway?.close();
    await api?.close();
  });

  it("swaps the placeholder for the real credential, streams the reply and meters every kind of token", async () => {
    const a = await gateway.openAttempt({ credential: REAL, limitUsd: 1 });
    try {
      const before = api.requests.length;
      const res = await post(a.socketPath, { token: a.placeholder, body: message("plain question") });
      expect(res.status).toBe(200);
      expect(res.text).toContain("event: message_stop");
      const seen = api.requests.slice(before);
      expect(seen).toHaveLength(1);
      // The upstream saw the real credential only, as a bearer token; never the placeholder.
      expect(seen[0]!.auth).toMatchObject({ bearer: true, bearerSha256Prefix: sha12(REAL), apiKey: false });
      const r = a.record.requests[0]!;
      expect(r).toMatchObject({
        status: 200,
        model: MODEL,
        inputTokens: 50,
        cacheReadInputTokens: 20,
        cacheWrite5mInputTokens: 10,
        cacheWrite1hInputTokens: 20,
        outputTokens: 7,
        complete: true,
        refused: null,
      });
      expect(r.messageId).toBe((seen[0]!.answer as { messageId: string }).messageId);
      expect(r.ttfbMs).toBeGreaterThan(0);
      expect(r.durationMs).toBeGreaterThanOrEqual(r.ttfbMs!);
      expect(a.record.meteredCostUsd).toBe(meteredCostUsd(MODEL, { inputTokens: 50, cacheReadInputTokens: 20, cacheWrite5mInputTokens: 10, cacheWrite1hInputTokens: 20, outputTokens: 7 }));
      expect(a.record.setupProblems).toEqual([]);
    } finally {
      await a.stop();
    }
  });

  it("refuses another attempt's placeholder, an unknown token, a foreign model and an unlisted path before anything is sent, and records each", async () => {
    const a = await gateway.openAttempt({ credential: REAL, limitUsd: 1 });
    const b = await gateway.openAttempt({ credential: REAL, limitUsd: 1 });
    try {
      const before = api.requests.length;
      expect((await post(a.socketPath, { token: b.placeholder, body: message("plain") })).status).toBe(401);
      expect((await post(a.socketPath, { token: "made-up", body: message("plain") })).status).toBe(401);
      expect((await post(a.socketPath, { body: message("plain") })).status).toBe(401);
      expect((await post(a.socketPath, { token: a.placeholder, body: message("plain", { model: "claude-opus-5-5" }) })).status).toBe(400);
      expect((await post(a.socketPath, { token: a.placeholder, path: "/v1/messages/count_tokens", body: message("plain") })).status).toBe(404);
      expect((await post(a.socketPath, { token: a.placeholder, method: "HEAD", path: "/api/hello" })).status).toBe(404);
      expect(api.requests.length).toBe(before);
      expect(a.record.requests.map((r) => r.refused?.kind)).toEqual(["foreign-placeholder", "unknown-token", "unknown-token", "model", "path", "path"]);
      expect(a.record.setupProblems.join("\n")).toMatch(/another attempt/);
      expect(a.record.setupProblems.join("\n")).toMatch(/claude-opus-5-5/);
      expect(a.record.budgetRefused).toBe(false);
      expect(b.record.requests).toHaveLength(0);
    } finally {
      await a.stop();
      await b.stop();
    }
  });

  it("refuses a request whose worst case would pass the limit, before it is sent", async () => {
    const body = message("plain question");
    const bound = requestBound(MODEL, Buffer.byteLength(JSON.stringify(body)), 1000);
    // Room for the first request's worst case, and for its metered cost plus the second's worst case less one pico-USD.
    const first = meteredCostPico(MODEL, { inputTokens: 50, cacheReadInputTokens: 20, cacheWrite5mInputTokens: 10, cacheWrite1hInputTokens: 20, outputTokens: 7 });
    const limitUsd = picoToUsd(bound.costPico + first - 1n);
    const a = await gateway.openAttempt({ credential: REAL, limitUsd });
    try {
      const before = api.requests.length;
      expect((await post(a.socketPath, { token: a.placeholder, body })).status).toBe(200);
      const second = await post(a.socketPath, { token: a.placeholder, body });
      expect(second.status).toBe(400);
      expect(JSON.parse(second.text).error.type).toBe("invalid_request_error");
      expect(api.requests.length).toBe(before + 1);
      expect(a.record.budgetRefused).toBe(true);
      expect(a.record.meteredCostUsd).toBeLessThanOrEqual(limitUsd);
      expect(a.record.setupProblems).toEqual([]);
    } finally {
      await a.stop();
    }
  });

  it("counts a request whose reply broke off after it was sent at its worst case", async () => {
    const a = await gateway.openAttempt({ credential: REAL, limitUsd: 1 });
    try {
      expect((await post(a.socketPath, { token: a.placeholder, body: message("reset-me") })).status).toBe(502);
      const r = a.record.requests[0]!;
      expect(r.refused?.kind).toBe("upstream-unreachable");
      expect(r.costUsd).toBe(r.boundUsd);
      expect(a.record.meteredCostUsd).toBe(r.boundUsd);
    } finally {
      await a.stop();
    }
  });

  it("counts a whole error answer of the API at nothing, so the CLI's retry of a 400 is forwarded under a limit that holds one bound", async () => {
    const body = message("bad-request");
    const bound = requestBound(MODEL, Buffer.byteLength(JSON.stringify(body)), 1000);
    const a = await gateway.openAttempt({ credential: REAL, limitUsd: picoToUsd(bound.costPico + bound.costPico / 2n) });
    try {
      const before = api.requests.length;
      expect((await post(a.socketPath, { token: a.placeholder, body })).status).toBe(400);
      expect((await post(a.socketPath, { token: a.placeholder, body })).status).toBe(400);
      expect(api.requests.length).toBe(before + 2);
      expect(a.record.requests.map((r) => [r.status, r.costUsd, r.refused])).toEqual([
        [400, 0, null],
        [400, 0, null],
      ]);
      expect(a.record.budgetRefused).toBe(false);
      expect(a.record.meteredCostUsd).toBe(0);
    } finally {
      await a.stop();
    }
  });

  it("flags a reply that claims more prompt tokens than its request has bytes", async () => {
    const a = await gateway.openAttempt({ credential: REAL, limitUsd: 1 });
    try {
      expect((await post(a.socketPath, { token: a.placeholder, body: message("liar") })).status).toBe(200);
      expect(a.record.setupProblems.join("\n")).toMatch(/claims 5000000 prompt tokens for a request of \d+ bytes/);
    } finally {
      await a.stop();
    }
  });

  it("verifies the upstream's certificate: without the test CA nothing is sent", async () => {
    const untrusting = new Gateway({ model: MODEL, upstream: { url: api.url!.replace("http:", "https:") } });
    const a = await untrusting.openAttempt({ credential: REAL, limitUsd: 1 });
    try {
      const before = api.requests.length;
      const res = await post(a.socketPath, { token: a.placeholder, body: message("plain") });
      expect(res.status).toBe(502);
      expect(a.record.requests[0]!.refused?.kind).toBe("upstream-unreachable");
      expect(api.requests.length).toBe(before);
    } finally {
      await a.stop();
      untrusting.close();
    }
  });

  it("never follows a redirect", async () => {
    let hits = 0;
    const redirector = createTlsServer({ key: ca.key, cert: ca.cert }, (req, res) => {
      hits++;
      req.resume();
      res.writeHead(307, { location: "https://example.invalid/v1/messages" });
      res.end();
    });
    await new Promise<void>((r) => redirector.listen(0, "127.0.0.1", r));
    const port = (redirector.address() as { port: number }).port;
    const g = new Gateway({ model: MODEL, upstream: { url: `https://127.0.0.1:${port}`, ca: ca.ca } });
    const a = await g.openAttempt({ credential: REAL, limitUsd: 1 });
    try {
      const res = await post(a.socketPath, { token: a.placeholder, body: message("plain") });
      expect(res.status).toBe(502);
      expect(hits).toBe(1);
      expect(a.record.requests[0]!.refused?.kind).toBe("upstream-redirect");
      expect(a.record.setupProblems.join("\n")).toMatch(/redirect/);
    } finally {
      await a.stop();
      g.close();
      redirector.close();
    }
  });
});
