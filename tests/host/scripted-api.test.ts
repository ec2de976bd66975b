import { createHash } from "node:crypto";
import { request } from "node:http";
import { spawnSync } from "node:child_process";
import { lstatSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { newestToolResults, startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { parseScripts, type ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import { scriptedTotals } from "../support/scripted-totals.ts";

// The scripted Messages API on loopback TCP and on a unix socket, driven by hand-made requests
// shaped like the ones Claude Code 2.1.296 sends (docs/claude-cli-observations.md).

const TOKEN = "test-access-token-not-real";

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

function send(target: { url?: string; socketPath?: string }, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Reply> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const where = target.url ? { host: "127.0.0.1", port: Number(new URL(target.url).port) } : { socketPath: target.socketPath };
  return new Promise((resolve, reject) => {
    const req = request({ ...where, method, path, headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}`, ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(payload);
  });
}

interface SseEvent {
  event: string;
  data: Record<string, any>;
}

function parseSse(text: string): SseEvent[] {
  return text
    .split("\n\n")
    .filter((chunk) => chunk.trim() !== "")
    .map((chunk) => {
      const event = /^event: (.*)$/m.exec(chunk)?.[1];
      const data = /^data: (.*)$/m.exec(chunk)?.[1];
      if (event === undefined || data === undefined) throw new Error(`bad SSE chunk ${JSON.stringify(chunk)}`);
      return { event, data: JSON.parse(data) as Record<string, any> };
    });
}

/** Rebuilds the assistant message from the stream the way a client does. */
function assemble(events: SseEvent[]): { id: string; model: string; content: any[]; stopReason: string; startUsage: any; outputTokens: number } {
  const start = events[0]!;
  expect(start.event).toBe("message_start");
  const content: any[] = [];
  const partial: string[] = [];
  let stopReason = "";
  let outputTokens = -1;
  for (const { event, data } of events) {
    expect(data.type).toBe(event);
    if (event === "content_block_start") {
      content[data.index] = { ...data.content_block };
      partial[data.index] = "";
    } else if (event === "content_block_delta") {
      if (data.delta.type === "text_delta") content[data.index].text += data.delta.text;
      else if (data.delta.type === "input_json_delta") partial[data.index] += data.delta.partial_json;
      else throw new Error(`unknown delta ${data.delta.type}`);
    } else if (event === "content_block_stop") {
      if (content[data.index].type === "tool_use") content[data.index].input = JSON.parse(partial[data.index]!);
    } else if (event === "message_delta") {
      stopReason = data.delta.stop_reason;
      outputTokens = data.usage.output_tokens;
    }
  }
  expect(events.at(-1)!.event).toBe("message_stop");
  return { id: start.data.message.id, model: start.data.message.model, content, stopReason, startUsage: start.data.message.usage, outputTokens };
}

const ENVIRONMENT = { role: "system", content: "# Environment\nUSD budget: $0/$0.1; $0.1 remaining" };

function firstRequest(prompt: string, model = "claude-haiku-5-5") {
  return {
    model,
    max_tokens: 128000,
    stream: true,
    tools: [{ name: "Glob" }, { name: "Grep" }, { name: "Read" }],
    messages: [{ role: "user", content: prompt }, ENVIRONMENT],
  };
}

/** The request after tool turn(s): the CLI's shape, trailing system entries included. */
function laterRequest(prompt: string, turns: Array<{ toolUseId: string; result: string; isError?: boolean }>, model = "claude-haiku-5-5") {
  const messages: unknown[] = [{ role: "user", content: prompt }, ENVIRONMENT];
  for (const t of turns) {
    messages.push({ role: "assistant", content: [{ type: "tool_use", id: t.toolUseId, name: "Read", input: {} }] });
    messages.push({ role: "user", content: [{ type: "tool_result", tool_use_id: t.toolUseId, content: t.result, ...(t.isError ? { is_error: true } : {}) }] });
    messages.push({ role: "system", content: [{ type: "text", text: "USD budget: $0.0003/$0.1; $0.0997 remaining" }] });
  }
  return { ...firstRequest(prompt, model), messages };
}

const TWO_TURNS: ScriptInput = {
  name: "two-turns",
  turns: [
    {
      text: "Let me look.",
      toolCalls: [
        { name: "Read", input: { file_path: "/workspace/README.md" } },
        { name: "Grep", input: { pattern: "answer", path: "/workspace" } },
      ],
      usage: {
        input_tokens: 2000,
        output_tokens: 40,
        cache_creation_input_tokens: 500,
        cache_creation: { ephemeral_5m_input_tokens: 200, ephemeral_1h_input_tokens: 300 },
      },
    },
    { answer: "The answer is 42.", usage: { input_tokens: 3000, output_tokens: 25, cache_read_input_tokens: 700 } },
  ],
};

let api: ScriptedApi | undefined;
let dir: string | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

describe("scripted Messages API: streaming answers", () => {
  it("streams a tool turn then the answer, with the request's model and the scripted usage", async () => {
    api = await startScriptedApi({ port: 0, script: TWO_TURNS });
    expect(api.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);

    const first = await send(api, "POST", "/v1/messages?beta=true", firstRequest("What is the answer?", "claude-sonnet-5"));
    expect(first.status).toBe(200);
    expect(first.headers["content-type"]).toBe("text/event-stream");
    const turn1 = assemble(parseSse(first.body));
    expect(turn1.model).toBe("claude-sonnet-5");
    expect(turn1.stopReason).toBe("tool_use");
    expect(turn1.content.map((b) => b.type)).toEqual(["text", "tool_use", "tool_use"]);
    expect(turn1.content[0].text).toBe("Let me look.");
    expect(turn1.content.slice(1).map((b) => [b.name, b.input])).toEqual([
      ["Read", { file_path: "/workspace/README.md" }],
      ["Grep", { pattern: "answer", path: "/workspace" }],
    ]);
    const ids = turn1.content.slice(1).map((b) => b.id as string);
    expect(new Set(ids).size).toBe(2);
    for (const id of ids) expect(id).toMatch(/^toolu_/);
    expect(turn1.startUsage).toEqual({
      input_tokens: 2000,
      cache_creation_input_tokens: 500,
      cache_read_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 200, ephemeral_1h_input_tokens: 300 },
      output_tokens: 1,
    });
    expect(turn1.outputTokens).toBe(40);

    const second = await send(api, "POST", "/v1/messages?beta=true", laterRequest("What is the answer?", [{ toolUseId: ids[0]!, result: "1\tthe answer is 42" }], "claude-sonnet-5"));
    const turn2 = assemble(parseSse(second.body));
    expect(turn2.stopReason).toBe("end_turn");
    expect(turn2.content).toEqual([{ type: "text", text: "The answer is 42." }]);
    expect(turn2.outputTokens).toBe(25);
    expect(turn2.startUsage).toMatchObject({ input_tokens: 3000, cache_read_input_tokens: 700, cache_creation_input_tokens: 0 });
    // No split scripted: none sent (the CLI then prices the write at the 5-minute rate).
    expect(turn2.startUsage).not.toHaveProperty("cache_creation");
    expect(turn2.id).not.toBe(turn1.id);
  });

  it("answers a non-streaming request with one JSON message carrying the real output count", async () => {
    api = await startScriptedApi({ port: 0, script: TWO_TURNS });
    const reply = await send(api, "POST", "/v1/messages", { ...firstRequest("q"), stream: false });
    expect(reply.headers["content-type"]).toBe("application/json");
    const message = JSON.parse(reply.body);
    expect(message).toMatchObject({ type: "message", role: "assistant", model: "claude-haiku-5-5", stop_reason: "tool_use" });
    expect(message.usage).toMatchObject({ input_tokens: 2000, output_tokens: 40 });
    expect(message.content.map((b: { type: string }) => b.type)).toEqual(["text", "tool_use", "tool_use"]);
  });
});

describe("scripted Messages API: turn selection", () => {
  it("picks the turn by the assistant messages already in the request, so a retry gets the same turn", async () => {
    api = await startScriptedApi({ port: 0, script: TWO_TURNS });
    const a = assemble(parseSse((await send(api, "POST", "/v1/messages?beta=true", firstRequest("q"))).body));
    const retried = assemble(parseSse((await send(api, "POST", "/v1/messages?beta=true", firstRequest("q"))).body));
    expect(a.stopReason).toBe("tool_use");
    expect(retried.stopReason).toBe("tool_use");
    const later = laterRequest("q", [{ toolUseId: "toolu_x", result: "r" }]);
    expect(assemble(parseSse((await send(api, "POST", "/v1/messages?beta=true", later)).body)).stopReason).toBe("end_turn");
    expect(api.requests.map((r) => (r.answer.kind === "tool-calls" || r.answer.kind === "answer" ? r.answer.turn : -1))).toEqual([0, 0, 1]);
  });

  it("refuses (400, not retried by the CLI) a conversation longer than its script", async () => {
    api = await startScriptedApi({ port: 0, script: TWO_TURNS });
    const tooLong = laterRequest("q", [
      { toolUseId: "toolu_a", result: "r" },
      { toolUseId: "toolu_b", result: "r" },
    ]);
    const reply = await send(api, "POST", "/v1/messages?beta=true", tooLong);
    expect(reply.status).toBe(400);
    expect(JSON.parse(reply.body)).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    expect(api.requests[0]!.answer).toMatchObject({ kind: "error", status: 400, script: "two-turns" });
  });

  it("never ends a neverEnd script: every further request gets the tool call again", async () => {
    api = await startScriptedApi({
      port: 0,
      script: { name: "loop", neverEnd: true, turns: [{ toolCalls: [{ name: "Glob", input: { pattern: "*" } }], usage: { input_tokens: 10, output_tokens: 1 } }] },
    });
    const deep = laterRequest(
      "q",
      Array.from({ length: 7 }, (_, i) => ({ toolUseId: `toolu_${i}`, result: "r" })),
    );
    const turn = assemble(parseSse((await send(api, "POST", "/v1/messages?beta=true", deep)).body));
    expect(turn.stopReason).toBe("tool_use");
    expect(turn.content[0]).toMatchObject({ type: "tool_use", name: "Glob", input: { pattern: "*" } });
  });

  it("serves an error turn the given number of times, then goes on at the same assistant turn", async () => {
    api = await startScriptedApi({
      port: 0,
      script: {
        name: "flaky",
        turns: [
          { error: { status: 529, type: "overloaded_error", message: "Overloaded" }, times: 2 },
          { answer: "fine", usage: { input_tokens: 5, output_tokens: 2 } },
          { error: { status: 400, type: "invalid_request_error", message: "never reached" } },
        ],
      },
    });
    for (let i = 0; i < 2; i++) {
      const reply = await send(api, "POST", "/v1/messages?beta=true", firstRequest("q"));
      expect(reply.status).toBe(529);
      expect(JSON.parse(reply.body)).toEqual({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } });
      expect(reply.headers["request-id"]).toMatch(/^req_/);
    }
    const third = await send(api, "POST", "/v1/messages?beta=true", firstRequest("q"));
    expect(third.status).toBe(200);
    expect(assemble(parseSse(third.body)).content).toEqual([{ type: "text", text: "fine" }]);
  });

  it("an error turn without `times` fails every request that reaches it", async () => {
    api = await startScriptedApi({ port: 0, script: { name: "down", turns: [{ error: { status: 500, type: "api_error", message: "down" } }] } });
    for (let i = 0; i < 3; i++) expect((await send(api, "POST", "/v1/messages?beta=true", firstRequest("q"))).status).toBe(500);
  });
});

describe("scripted Messages API: script selection", () => {
  const answer = (text: string): ScriptInput["turns"][number] => ({ answer: text, usage: { input_tokens: 1, output_tokens: 1 } });

  it("selects by marker in the first user message, and hands queued scripts to new sessions in order", async () => {
    api = await startScriptedApi({
      port: 0,
      script: [
        { name: "queued-1", turns: [answer("one")] },
        { name: "marked", marker: "[task-b]", turns: [answer("marked")] },
        { name: "queued-2", turns: [answer("two")] },
      ],
    });
    const ask = async (prompt: string, session: string) =>
      assemble(parseSse((await send(api!, "POST", "/v1/messages?beta=true", firstRequest(prompt), { "x-claude-code-session-id": session })).body)).content[0].text as string;
    expect(await ask("question for [task-b]", "s-1")).toBe("marked");
    expect(await ask("same question", "s-2")).toBe("one");
    // The same session keeps its script (a retry, a later turn).
    expect(await ask("same question", "s-2")).toBe("one");
    // A new session with the very same prompt (a repetition) takes the next script.
    expect(await ask("same question", "s-3")).toBe("two");
    const fourth = await send(api, "POST", "/v1/messages?beta=true", firstRequest("same question"), { "x-claude-code-session-id": "s-4" });
    expect(fourth.status).toBe(400);
    expect(api.requests.at(-1)!.answer).toMatchObject({ kind: "error", reason: "no script matches this conversation" });
    expect(Object.fromEntries(api.claims)).toEqual({ "session:s-2": "queued-1", "session:s-3": "queued-2" });
  });

  it("falls back to metadata.user_id's session, then to the first message, to tell conversations apart", async () => {
    api = await startScriptedApi({
      port: 0,
      script: [
        { name: "q1", turns: [answer("one")] },
        { name: "q2", turns: [answer("two")] },
      ],
    });
    const withMetadata = { ...firstRequest("p"), metadata: { user_id: JSON.stringify({ device_id: "d", session_id: "meta-1" }) } };
    await send(api, "POST", "/v1/messages?beta=true", withMetadata);
    await send(api, "POST", "/v1/messages?beta=true", firstRequest("plain prompt"));
    await send(api, "POST", "/v1/messages?beta=true", firstRequest("plain prompt"));
    expect(api.requests.map((r) => r.conversation)).toEqual([
      "session:meta-1",
      `first-message:${createHash("sha256").update("plain prompt").digest("hex")}`,
      `first-message:${createHash("sha256").update("plain prompt").digest("hex")}`,
    ]);
    expect([...api.claims.values()]).toEqual(["q1", "q2"]);
  });
});

describe("scripted Messages API: records", () => {
  it("records each request without the token, with the newest tool results found past trailing system entries", async () => {
    api = await startScriptedApi({ port: 0, script: TWO_TURNS });
    await send(api, "HEAD", "/api/hello");
    await send(api, "POST", "/v1/messages?beta=true", firstRequest("What is the answer?"), { "x-api-key": "not-a-key-either" });
    await send(api, "POST", "/v1/messages?beta=true", laterRequest("What is the answer?", [{ toolUseId: "toolu_r", result: "No such tool available: Bash", isError: true }]), {
      "x-claude-code-session-id": "sess-1",
    });
    const [hello, one, two] = api.requests;
    expect(hello).toMatchObject({ seq: 0, method: "HEAD", path: "/api/hello", answer: { kind: "hello" } });
    expect(one).toMatchObject({
      seq: 1,
      method: "POST",
      path: "/v1/messages?beta=true",
      auth: { bearer: true, apiKey: true, bearerSha256Prefix: createHash("sha256").update(TOKEN).digest("hex").slice(0, 12) },
      body: {
        model: "claude-haiku-5-5",
        stream: true,
        maxTokens: 128000,
        messageCount: 2,
        roles: ["user", "system"],
        toolNames: ["Glob", "Grep", "Read"],
        newestToolResults: [],
        firstUserText: "What is the answer?",
      },
      answer: { kind: "tool-calls", script: "two-turns", turn: 0 },
    });
    expect(one!.headers.authorization).toBe("[redacted]");
    expect(one!.headers["x-api-key"]).toBe("[redacted]");
    expect(two!.body!.roles).toEqual(["user", "system", "assistant", "user", "system"]);
    expect(two!.body!.newestToolResults).toEqual([{ toolUseId: "toolu_r", isError: true, content: "No such tool available: Bash" }]);
    expect(two!.headers["x-claude-code-session-id"]).toBe("sess-1");
    const everything = JSON.stringify(api.requests);
    expect(everything).not.toContain(TOKEN);
    expect(everything).not.toContain("not-a-key-either");
    expect(one!.rawBody).toBeUndefined();
  });

  it("keeps raw bodies only when asked, answers count_tokens and unknown routes, and rejects non-JSON", async () => {
    api = await startScriptedApi({ port: 0, script: TWO_TURNS, recordBodies: true });
    await send(api, "POST", "/v1/messages?beta=true", firstRequest("q"));
    expect(api.requests[0]!.rawBody).toMatchObject({ model: "claude-haiku-5-5", max_tokens: 128000 });
    const count = await send(api, "POST", "/v1/messages/count_tokens?beta=true", firstRequest("q"));
    expect(count.status).toBe(200);
    expect(JSON.parse(count.body).input_tokens).toBeGreaterThan(0);
    const unknown = await send(api, "GET", "/v1/models");
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.body)).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    const bad = await new Promise<number>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port: Number(new URL(api!.url!).port), method: "POST", path: "/v1/messages" }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on("error", reject);
      req.end("{not json");
    });
    expect(bad).toBe(400);
    expect(api.requests.at(-1)!.bodyProblem).toMatch(/not a JSON object/);
  });
});

describe("scripted Messages API: listening", () => {
  it("listens on a unix socket that uid 1000 can use, replacing a dead run's socket but no other file", async () => {
    dir = await mkdtemp(join(tmpdir(), "scripted-api-"));
    const socketPath = join(dir, "api.sock");
    // A process killed while listening leaves its socket file behind.
    const killed = spawnSync(process.execPath, ["-e", `require("net").createServer().listen(${JSON.stringify(socketPath)}, () => process.kill(process.pid, "SIGKILL"))`]);
    expect(killed.signal).toBe("SIGKILL");
    expect(lstatSync(socketPath).isSocket()).toBe(true);
    api = await startScriptedApi({ socketPath, script: TWO_TURNS });
    expect(api.url).toBeUndefined();
    expect(api.socketPath).toBe(socketPath);
    expect(lstatSync(socketPath).mode & 0o777).toBe(0o666);
    const reply = await send({ socketPath }, "POST", "/v1/messages?beta=true", firstRequest("q"));
    expect(assemble(parseSse(reply.body)).stopReason).toBe("tool_use");
    expect((await send({ socketPath }, "HEAD", "/api/hello")).status).toBe(200);

    const regular = join(dir, "not-a-socket");
    await writeFile(regular, "keep me");
    await expect(startScriptedApi({ socketPath: regular, script: TWO_TURNS })).rejects.toThrow(/not a socket/);
    expect(await readFile(regular, "utf8")).toBe("keep me");
  });

  it("needs exactly one of socketPath and port, and never listens beyond loopback", async () => {
    await expect(startScriptedApi({ script: TWO_TURNS })).rejects.toThrow(/exactly one/);
    await expect(startScriptedApi({ port: 0, socketPath: "/tmp/x.sock", script: TWO_TURNS })).rejects.toThrow(/exactly one/);
    api = await startScriptedApi({ port: 0, script: TWO_TURNS });
    expect(new URL(api.url!).hostname).toBe("127.0.0.1");
  });
});

describe("scripts", () => {
  it("rejects scripts that cannot be served as written", () => {
    const usage = { input_tokens: 1, output_tokens: 1 };
    expect(() =>
      parseScripts({
        name: "split",
        turns: [{ answer: "a", usage: { ...usage, cache_creation_input_tokens: 10, cache_creation: { ephemeral_5m_input_tokens: 3, ephemeral_1h_input_tokens: 3 } } }],
      }),
    ).toThrow(/sum to cache_creation_input_tokens/);
    expect(() => parseScripts({ name: "n", neverEnd: true, turns: [{ answer: "a", usage }] })).toThrow(/neverEnd/);
    expect(() =>
      parseScripts([
        { name: "same", turns: [{ answer: "a", usage }] },
        { name: "same", turns: [{ answer: "b", usage }] },
      ]),
    ).toThrow(/twice/);
    expect(() => parseScripts({ name: "neg", turns: [{ answer: "a", usage: { input_tokens: -1, output_tokens: 1 } }] })).toThrow();
    expect(() => parseScripts({ name: "none", turns: [] })).toThrow();
    expect(() => parseScripts({ name: "extra", turns: [{ answer: "a", usage, stop: "x" } as never] })).toThrow();
  });

  it("sums what a full run of a script should report, error turns excluded", () => {
    const [script] = parseScripts({
      ...TWO_TURNS,
      turns: [{ error: { status: 529, type: "overloaded_error", message: "o" }, times: 1 }, ...TWO_TURNS.turns],
    });
    expect(scriptedTotals(script!)).toEqual({
      input_tokens: 5000,
      output_tokens: 65,
      cache_read_input_tokens: 700,
      cache_creation_input_tokens: 500,
      cache_creation: { ephemeral_5m_input_tokens: 200, ephemeral_1h_input_tokens: 300 },
    });
  });

  it("finds the newest tool results only when no assistant message follows them", () => {
    const result = {
      role: "user",
      content: [
        {
          type: "tool_result",
          tool_use_id: "t1",
          content: [
            { type: "text", text: "a" },
            { type: "text", text: "b" },
          ],
        },
      ],
    };
    expect(newestToolResults([result, { role: "system", content: "x" }, { role: "system", content: "y" }])).toEqual([{ toolUseId: "t1", isError: false, content: "a\nb" }]);
    expect(newestToolResults([result, { role: "assistant", content: "z" }, { role: "system", content: "y" }])).toEqual([]);
    expect(newestToolResults([])).toEqual([]);
  });
});
