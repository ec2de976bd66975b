/**
 * The gateway admits only the request shapes measured on the pinned CLI
 * (src/gateway/cli-requests.generated.ts): a URL parser reads the target, the body is parsed
 * strictly and held to the measured body shape, header names and `anthropic-beta` values to the
 * measured ones; each attempt's connections and buffered bytes are bounded. Requests are written
 * as raw bytes on the attempt's socket, so the target, the headers and duplicate keys are exactly
 * what a process in the container could send. The upstream is a TLS server on loopback (test CA)
 * that counts what reached it.
 */
import { connect } from "node:net";
import { createServer as createTlsServer, type Server } from "node:https";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Gateway, MAX_ATTEMPT_CONNECTIONS, type AttemptGateway } from "../../src/gateway/gateway.ts";
import { BETAS, cliBody, MODEL, raw, REAL } from "../support/gateway-raw.ts";
import { makeTestCa, type TestCa } from "../support/test-ca.ts";

describe("the gateway admits only the measured request shapes", () => {
  let ca: TestCa;
  let upstream: Server;
  let gateway: Gateway;
  /** What reached the upstream: method and target of each request. */
  const reached: string[] = [];
  /** The usage the upstream's next reply reports. */
  let usage: Record<string, unknown> = { input_tokens: 10, output_tokens: 2 };

  beforeAll(async () => {
    ca = makeTestCa();
    upstream = createTlsServer({ key: ca.key, cert: ca.cert }, (req, res) => {
      reached.push(`${req.method} ${req.url}`);
      req.resume();
      req.on("end", () => {
        const body = JSON.stringify({ id: `msg_${reached.length}`, type: "message", role: "assistant", model: MODEL, content: [{ type: "text", text: "ok" }], stop_reason: "end_turn", usage });
        res.writeHead(200, { "content-type": "application/json" });
        res.end(body);
      });
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    gateway = new Gateway({ model: MODEL, upstream: { url: `https://127.0.0.1:${(upstream.address() as { port: number }).port}`, ca: ca.ca } });
  }, 60_000);
  afterAll(async () => {
    gateway?.close();
    await new Promise((r) => upstream?.close(r));
  });

  /** One attempt: runs `f`, then returns its record with what reached the upstream meanwhile. */
  async function attempt(f: (a: AttemptGateway) => Promise<void>, o: { limitUsd?: number; g?: Gateway } = {}) {
    const a = await (o.g ?? gateway).openAttempt({ credential: REAL, limitUsd: o.limitUsd ?? 5 });
    const before = reached.length;
    try {
      await f(a);
    } finally {
      await a.stop();
    }
    return { record: a.record, forwarded: reached.slice(before) };
  }

  it("forwards a request of the measured shape (the control for every refusal below)", async () => {
    const { record, forwarded } = await attempt(async (a) => {
      expect((await raw(a.socketPath, { token: a.placeholder, body: JSON.stringify(cliBody()) })).status).toBe(200);
    });
    expect(forwarded).toEqual(["POST /v1/messages?beta=true"]);
    expect(record.setupProblems).toEqual([]);
    expect(record.requests[0]!.refused).toBeNull();
  });

  // contract: R133
  it("refuses ?beta=true?&foo=bar, another query, a target that is not origin-form and a dot segment, with nothing forwarded", async () => {
    const targets = [
      "/v1/messages?beta=true?&foo=bar",
      "/v1/messages?beta=true&foo=bar",
      "/v1/messages",
      "/v1/messages?beta=false",
      "//evil.example/v1/messages?beta=true",
      "http://evil.example/v1/messages?beta=true",
      "/v1/x/../messages?beta=true",
    ];
    const { record, forwarded } = await attempt(async (a) => {
      for (const target of targets) expect((await raw(a.socketPath, { target, token: a.placeholder, body: JSON.stringify(cliBody()) })).status, target).toBe(404);
    });
    expect(forwarded).toEqual([]);
    expect(record.requests.map((r) => r.refused?.kind)).toEqual(targets.map(() => "path"));
    expect(record.setupProblems.join("\n")).toContain("beta=true?&foo=bar");
  });

  // contract: R134
  it("refuses a body naming a key twice, at the top (model and max_tokens) or deeper, with nothing forwarded", async () => {
    const whole = JSON.stringify(cliBody()).slice(1);
    const bodies = [
      // The raw bytes lead with a dearer model and a huge max_tokens; JSON.parse would keep the last.
      `{"model":"claude-opus-5-5","max_tokens":100000000,${whole}`,
      JSON.stringify(cliBody()).replace('"role":"user","content":"where is rounding?"', '"role":"user","content":"where is rounding?","role":"user"'),
      JSON.stringify(cliBody()).replace('"file_path":"/workspace/a.md"', '"file_path":"/workspace/a.md","\\u0066ile_path":"/etc/passwd"'),
    ];
    const { record, forwarded } = await attempt(async (a) => {
      for (const body of bodies) expect((await raw(a.socketPath, { token: a.placeholder, body })).status).toBe(400);
    });
    expect(forwarded).toEqual([]);
    expect(record.requests.map((r) => r.refused?.kind)).toEqual(["body", "body", "body"]);
    expect(record.setupProblems.join("\n")).toMatch(/"model" appears twice/);
    expect(record.setupProblems.join("\n")).toMatch(/"role" appears twice in the object at messages\[0\]/);
    expect(record.setupProblems.join("\n")).toMatch(/"file_path" appears twice in the object at messages\[1\]\.content\[0\]\.input/);
  });

  // contract: R135
  it("refuses server tools (web_fetch, web_search, code_execution) and an mcp_servers connector, with nothing forwarded", async () => {
    const bodies = [
      cliBody({ tools: [{ type: "web_fetch_20250910", name: "web_fetch", max_uses: 5 }] }),
      cliBody({ tools: [{ type: "web_search_20250305", name: "web_search" }] }),
      cliBody({ tools: [{ type: "code_execution_20250825", name: "code_execution" }] }),
      cliBody({ mcp_servers: [{ type: "url", url: "https://mcp.example/sse", name: "x" }] }),
    ];
    const { record, forwarded } = await attempt(async (a) => {
      for (const body of bodies) expect((await raw(a.socketPath, { token: a.placeholder, body: JSON.stringify(body) })).status).toBe(400);
    });
    expect(forwarded).toEqual([]);
    expect(record.requests.map((r) => r.refused?.kind)).toEqual(["body", "body", "body", "body"]);
    const text = record.setupProblems.join("\n");
    expect(text).toMatch(/tools\[0\]\.type is "web_fetch_20250910"/);
    expect(text).toMatch(/"mcp_servers"/);
  });

  // contract: R135
  it("refuses URL and file sources of documents and images, also inside a tool result, with nothing forwarded", async () => {
    const user = (content: unknown) => cliBody({ messages: [{ role: "user", content }] });
    const bodies = [
      user([{ type: "document", source: { type: "url", url: "https://example.invalid/huge.pdf" } }]),
      user([{ type: "image", source: { type: "url", url: "https://example.invalid/a.png" } }]),
      user([{ type: "document", source: { type: "file", file_id: "file_011" } }]),
      user([{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "image", source: { type: "url", url: "https://example.invalid/a.png" } }] }]),
    ];
    const { record, forwarded } = await attempt(async (a) => {
      for (const body of bodies) expect((await raw(a.socketPath, { token: a.placeholder, body: JSON.stringify(body) })).status).toBe(400);
    });
    expect(forwarded).toEqual([]);
    expect(record.requests.map((r) => r.refused?.kind)).toEqual(["body", "body", "body", "body"]);
    expect(record.setupProblems.join("\n")).toMatch(/messages\[0\]\.content\[0\]\.type is "document"/);
  });

  // contract: R136
  it("refuses an anthropic-beta value or a header the pinned CLI never sends, with nothing forwarded", async () => {
    const cases: Array<Record<string, string>> = [{ "anthropic-beta": `${BETAS},web-fetch-2025-09-10` }, { "anthropic-beta": "code-execution-2025-08-25" }, { "x-forwarded-host": "evil.example" }];
    const { record, forwarded } = await attempt(async (a) => {
      for (const headers of cases) expect((await raw(a.socketPath, { token: a.placeholder, body: JSON.stringify(cliBody()), headers })).status).toBe(400);
    });
    expect(forwarded).toEqual([]);
    expect(record.requests.map((r) => r.refused?.kind)).toEqual(["header", "header", "header"]);
    expect(record.setupProblems.join("\n")).toMatch(/web-fetch-2025-09-10/);
    expect(record.setupProblems.join("\n")).toMatch(/x-forwarded-host/);
  });

  // contract: R137
  it("makes a reply that reports server-tool usage a setup problem", async () => {
    usage = { input_tokens: 10, output_tokens: 2, server_tool_use: { web_search_requests: 3 } };
    try {
      const { record } = await attempt(async (a) => {
        expect((await raw(a.socketPath, { token: a.placeholder, body: JSON.stringify(cliBody()) })).status).toBe(200);
      });
      expect(record.setupProblems.join("\n")).toMatch(/server-tool use \(web_search_requests=3\)/);
    } finally {
      usage = { input_tokens: 10, output_tokens: 2 };
    }
  });

  // contract: R138
  it("closes an attempt's connections beyond its bound and refuses a body that would pass its buffered bytes", async () => {
    const small = new Gateway({ model: MODEL, upstream: { url: `https://127.0.0.1:${(upstream.address() as { port: number }).port}`, ca: ca.ca }, maxRequestBytes: 64 * 1024 });
    try {
      const { record, forwarded } = await attempt(
        async (a) => {
          // Stalled uploads: each declares 40 KiB, sends 30 KiB and waits (the attempt may buffer 64 KiB).
          const open = (n: number, declared = 40 * 1024, sent = 30 * 1024) =>
            Array.from({ length: n }, () => {
              const s = connect(a.socketPath);
              const closed = new Promise<string>((resolve) => {
                let text = "";
                s.on("data", (d) => (text += String(d)));
                s.on("error", () => {});
                s.on("close", () => resolve(text));
              });
              s.write(`POST /v1/messages?beta=true HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\nauthorization: Bearer ${a.placeholder}\r\ncontent-length: ${declared}\r\n\r\n`);
              if (sent > 0) s.write(`{"model":"${MODEL}","max_tokens":1,"messages":[{"role":"user","content":"${"x".repeat(sent)}`);
              return { s, closed };
            });
          const first = open(1);
          await new Promise((r) => setTimeout(r, 300));
          // 30 KiB of the first are held: a second body declaring 40 KiB would pass the attempt's 64 KiB.
          const second = open(1);
          expect(await second[0]!.closed).toMatch(/^HTTP\/1\.1 413/);
          // Beyond the connection bound, connections are closed as they are accepted, unanswered
          // (these declare a small body and send none of it, so they stay open while admitted).
          const more = open(MAX_ATTEMPT_CONNECTIONS + 4, 100, 0);
          const answers = await Promise.all(more.map((m) => Promise.race([m.closed, new Promise<string>((r) => setTimeout(() => r("still open"), 1000))])));
          expect(answers.filter((t) => t === "").length).toBeGreaterThanOrEqual(4);
          for (const m of [...first, ...more]) m.s.destroy();
        },
        { g: small },
      );
      expect(forwarded).toEqual([]);
      expect(record.requests.some((r) => r.refused?.kind === "size" && /already holds \d+ bytes of request bodies, and this one's 40960 would pass its 65536/.test(r.refused.reason))).toBe(true);
      expect(record.setupProblems.join("\n")).toMatch(new RegExp(`more than ${MAX_ATTEMPT_CONNECTIONS} connections to the gateway at once; \\d+ were closed unanswered`));
    } finally {
      small.close();
    }
  });
});
