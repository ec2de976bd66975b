import { afterEach, describe, expect, it } from "vitest";
import { createServer, type Server } from "node:http";
import { sendMessages, type CallOutcome } from "../../src/transport/http/client.ts";
import { jsonReplyFacts } from "../../src/gateway/meter.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import type { ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";

// One Messages API call over built-in fetch against the scripted API on loopback (and two small
// hand-made servers for a redirect and an oversized reply).

const KEY = "test-key-CLIENTTEST-not-real-91c2";
const MODEL = "claude-haiku-5-5";
const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (closers.length) await closers.pop()!();
});

async function api(script: ScriptInput | ScriptInput[]): Promise<ScriptedApi> {
  const a = await startScriptedApi({ port: 0, script, recordBodies: true });
  closers.push(() => a.close());
  return a;
}

function body(tools: string[] = []): string {
  return JSON.stringify({
    model: MODEL,
    max_tokens: 1024,
    temperature: 0,
    messages: [{ role: "user", content: "Question: how?" }],
    tools: tools.map((name) => ({ name, description: name, input_schema: { type: "object" } })),
  });
}

const send = (baseUrl: string, o: { timeoutMs?: number; signal?: AbortSignal; b?: string; maxResponseBytes?: number } = {}): Promise<CallOutcome> =>
  sendMessages({ baseUrl, apiKey: KEY, body: o.b ?? body(), timeoutMs: o.timeoutMs ?? 10_000, signal: o.signal, maxResponseBytes: o.maxResponseBytes });

async function rawServer(handler: Parameters<typeof createServer>[1]): Promise<{ url: string; server: Server }> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closers.push(
    () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(r);
      }),
  );
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, server };
}

describe("sendMessages", () => {
  it("sends a non-streaming request with the key header and the API version, and parses the message and usage", async () => {
    const a = await api({ name: "s", turns: [{ toolCalls: [{ name: "read_file", input: { path: "a.md" } }], text: "Looking.", usage: { input_tokens: 321, output_tokens: 12 } }] });
    const out = await send(a.url!);
    expect(out).toMatchObject({
      kind: "message",
      httpStatus: 200,
      usage: { inputTokens: 321, outputTokens: 12, cacheReadInputTokens: 0, cacheWrite5mInputTokens: 0, cacheWrite1hInputTokens: 0, cacheReported: { read: true, write: true } },
      message: {
        model: MODEL,
        stopReason: "tool_use",
        content: [
          { type: "text", text: "Looking." },
          { type: "tool_use", name: "read_file", input: { path: "a.md" } },
        ],
      },
    });
    const [req] = a.requests;
    expect(req!.path).toBe("/v1/messages");
    expect(req!.auth).toEqual({ bearer: false, apiKey: true });
    expect(req!.headers["anthropic-version"]).toBe("2023-06-01");
    expect(req!.headers["anthropic-beta"]).toBeUndefined();
    expect(req!.body).toMatchObject({ model: MODEL, stream: undefined, maxTokens: 1024 });
  });

  it("an HTTP error is an api-error whose text never holds the key, even when the API echoes it", async () => {
    const a = await api({
      name: "s",
      turns: [
        { error: { status: 401, type: "authentication_error", message: "invalid x-api-key" }, echoApiKey: true },
        { answer: "x", usage: { input_tokens: 1, output_tokens: 1 } },
      ],
    });
    const out = await send(a.url!);
    expect(out).toEqual({ kind: "api-error", httpStatus: 401, errorType: "authentication_error", problem: "HTTP 401 authentication_error: invalid x-api-key (x-api-key: [redacted])" });
    expect(JSON.stringify(out)).not.toContain(KEY);
  });

  it("a connection reset is a lost reply", async () => {
    const a = await api({ name: "s", turns: [{ fault: "connection-reset" }, { answer: "x", usage: { input_tokens: 1, output_tokens: 1 } }] });
    const out = await send(a.url!);
    expect(out).toMatchObject({ kind: "lost", aborted: null });
    expect((out as { problem: string }).problem).toMatch(/^the request got no complete reply: fetch failed \((ECONNRESET|UND_ERR_SOCKET)\)$/);
    expect(a.requests.map((r) => r.answer.kind)).toEqual(["fault"]);
  });

  it("a reply that never comes is lost at the timeout, and a signal aborts it", async () => {
    const a = await api({ name: "s", turns: [{ fault: "hang" }, { answer: "x", usage: { input_tokens: 1, output_tokens: 1 } }] });
    const t0 = Date.now();
    expect(await send(a.url!, { timeoutMs: 300 })).toEqual({ kind: "lost", aborted: "deadline", problem: "the request got no complete reply: no complete reply within 300 ms" });
    expect(Date.now() - t0).toBeLessThan(5000);
    const c = new AbortController();
    setTimeout(() => c.abort("SIGINT"), 100);
    expect(await send(a.url!, { timeoutMs: 10_000, signal: c.signal })).toMatchObject({ kind: "lost", aborted: "signal" });
  });

  it("a reply without usage or with bad usage is invalid-usage; one that reports cache tokens is read with them", async () => {
    const a = await api({ name: "s", turns: [{ fault: "missing-usage" }, { answer: "x", usage: { input_tokens: 1, output_tokens: 1 } }] });
    expect(await send(a.url!)).toEqual({ kind: "invalid-usage", httpStatus: 200, problem: "the reply has no usage field" });
    const cached = await api({ name: "c", turns: [{ answer: "x", usage: { input_tokens: 1, output_tokens: 1, cache_read_input_tokens: 5 } }] });
    // The request asks for no caching; cache tokens a reply reports anyway are counted, not refused.
    expect(await send(cached.url!)).toMatchObject({ kind: "message", usage: { inputTokens: 1, outputTokens: 1, cacheReadInputTokens: 5, cacheWrite5mInputTokens: 0, cacheWrite1hInputTokens: 0 } });
    const { url } = await rawServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ type: "message", role: "assistant", model: MODEL, content: [], stop_reason: "end_turn", usage: { input_tokens: -3, output_tokens: 1.5 } }));
    });
    expect(await send(url)).toEqual({ kind: "invalid-usage", httpStatus: 200, problem: "the reply's usage is invalid (input_tokens, output_tokens)" });
  });

  // contract: R30
  it("reads a reply's usage as the gateway's meter does: what the meter rejects is invalid-usage, what it accepts is the same usage, cache tokens included", async () => {
    const usages: unknown[] = [
      { input_tokens: 10, output_tokens: 2 },
      { input_tokens: 10, output_tokens: 2, cache_read_input_tokens: 5, cache_creation_input_tokens: null },
      { input_tokens: 10, output_tokens: 2, cache_read_input_tokens: 0, cache_creation_input_tokens: 30, cache_creation: { ephemeral_5m_input_tokens: 10, ephemeral_1h_input_tokens: 20 } },
      { input_tokens: 10, output_tokens: 2, cache_creation_input_tokens: 7 },
      { input_tokens: 10 },
      { input_tokens: 10, output_tokens: 2, cache_read_input_tokens: "5" },
      { input_tokens: 10, output_tokens: 2, cache_creation_input_tokens: 5, cache_creation: { ephemeral_1h_input_tokens: 9 } },
      { input_tokens: -1, output_tokens: 2 },
      { output_tokens: 2 },
      "ten",
      null,
    ];
    let next = 0;
    const bodies = usages.map((usage) => JSON.stringify({ id: "msg_u", type: "message", role: "assistant", model: MODEL, content: [{ type: "text", text: "x" }], stop_reason: "end_turn", usage }));
    const { url } = await rawServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(bodies[next++]);
    });
    let accepted = 0;
    for (const b of bodies) {
      const metered = jsonReplyFacts(Buffer.from(b)).usage;
      const out = await send(url);
      if (metered === null) {
        expect(out, b).toMatchObject({ kind: "invalid-usage" });
      } else {
        accepted++;
        expect(out, b).toMatchObject({ kind: "message", usage: metered });
      }
    }
    // Both sides of the comparison are exercised: four replies carry usable usage, the rest do not.
    expect(accepted).toBe(4);
  });

  it("never follows a redirect: the key does not travel on", async () => {
    let reachedTarget = false;
    const target = await rawServer((_req, res) => {
      reachedTarget = true;
      res.end("{}");
    });
    const { url } = await rawServer((_req, res) => {
      res.writeHead(307, { location: `${target.url}/v1/messages` });
      res.end();
    });
    const out = await send(url);
    expect(out.kind).toBe("lost");
    expect(reachedTarget).toBe(false);
  });

  it("a reply over the size bound is lost; a reply with usage but no usable message is a bad-message", async () => {
    const { url } = await rawServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ pad: "x".repeat(5000), usage: { input_tokens: 1, output_tokens: 1 } }));
    });
    expect(await send(url, { maxResponseBytes: 1000 })).toEqual({ kind: "lost", aborted: null, problem: "the reply is larger than 1000 bytes" });
    expect(await send(url)).toMatchObject({
      kind: "bad-message",
      usage: { inputTokens: 1, outputTokens: 1, cacheReported: { read: false, write: false } },
      problem: expect.stringMatching(/not an assistant message/),
    });
  });
});

describe("scripted API selection by offered tool", () => {
  it("serves the script whose tool the request offers, and queued scripts to the others", async () => {
    const a = await api([
      { name: "plain", turns: [{ answer: "plain answer", usage: { input_tokens: 1, output_tokens: 1 } }] },
      { name: "with-doc", tool: "mcp__doc-bridge__doc_search", turns: [{ answer: "doc answer", usage: { input_tokens: 2, output_tokens: 2 } }] },
    ]);
    const text = (o: CallOutcome) => (o.kind === "message" && o.message.content[0]?.type === "text" ? o.message.content[0].text : undefined);
    expect(text(await send(a.url!, { b: body(["read_file", "mcp__doc-bridge__doc_search"]) }))).toBe("doc answer");
    expect(text(await send(a.url!, { b: body(["read_file"]) }))).toBe("plain answer");
    expect(a.requests.map((r) => r.answer.kind === "answer" && r.answer.script)).toEqual(["with-doc", "plain"]);
  });
});
