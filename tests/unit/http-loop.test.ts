import { describe, expect, it } from "vitest";
import { runAgentLoop, PROTOCOL_LIMITS, SYSTEM_PROMPT, type CallAccount, type LoopOptions } from "../../src/transport/http/tool-loop.ts";
import type { CallOutcome, ContentBlock, MeasuredUsage } from "../../src/transport/http/client.ts";
import type { ToolSet } from "../../src/transport/http/tools.ts";

const MODEL = "claude-haiku-5-5";
const usage = (input = 100, output = 10): MeasuredUsage => ({
  inputTokens: input,
  outputTokens: output,
  cacheReadInputTokens: 0,
  cacheWrite5mInputTokens: 0,
  cacheWrite1hInputTokens: 0,
  cacheReported: { read: true, write: true },
});
const toolUse = (id: string, name = "read_file", input: Record<string, unknown> = { path: "a.md" }): ContentBlock => ({ type: "tool_use", id, name, input });
const reply = (content: ContentBlock[], stopReason: string | null, u = usage(), model = MODEL): CallOutcome => ({
  kind: "message",
  httpStatus: 200,
  usage: u,
  message: { model, content, stopReason },
});
const answer = (text = "the answer", u = usage()) => reply([{ type: "text", text }], "end_turn", u);
const tools = (n: number) =>
  reply(
    Array.from({ length: n }, (_, i) => toolUse(`t${Math.random().toString(36).slice(2)}${i}`)),
    "tool_use",
  );

interface Harness {
  options: LoopOptions;
  sent: Array<Record<string, any>>;
  opened: number[];
  closed: CallOutcome[];
  executed: string[];
}

function harness(
  replies: CallOutcome[],
  o: { refuseAt?: number; overReservationAt?: number; toolSet?: ToolSet; now?: () => number; limits?: LoopOptions["limits"]; docBridge?: string[]; signal?: AbortSignal } = {},
): Harness {
  const h: Harness = { sent: [], opened: [], closed: [], executed: [], options: undefined as unknown as LoopOptions };
  const account: CallAccount = {
    async open(turn, bytes) {
      if (turn === o.refuseAt) return { ok: false, reason: "no room under the cap" };
      h.opened.push(bytes);
      return { ok: true, inputCeilingTokens: bytes + 8192, outputCeilingTokens: 1024 };
    },
    async close(outcome) {
      h.closed.push(outcome);
      return { capExceeded: false, overReservation: o.overReservationAt === h.closed.length };
    },
  };
  const toolSet: ToolSet = o.toolSet ?? {
    definitions: [
      { name: "read_file", description: "read", input_schema: { type: "object" } },
      { name: "mcp__doc-bridge__doc_search", description: "search", input_schema: { type: "object" } },
    ],
    async call(name, input) {
      h.executed.push(name);
      if (name === "mcp__doc-bridge__doc_search") return { content: "index unavailable", isError: true };
      return { content: `content of ${String(input.path)}`, isError: input.path === "missing.md" };
    },
    async close() {},
  };
  h.options = {
    model: MODEL,
    prompt: "Question: how?",
    tools: toolSet,
    account,
    now: o.now ?? (() => performance.now()),
    limits: o.limits,
    signal: o.signal,
    docBridgeToolNames: o.docBridge ?? ["mcp__doc-bridge__doc_search"],
    async send(body) {
      h.sent.push(JSON.parse(body));
      const next = replies.shift();
      if (!next) throw new Error("the test ran out of replies");
      return next;
    },
  };
  return h;
}

describe("the agent loop", () => {
  it("sends the protocol's request shape, runs the tools between turns and returns the answer", async () => {
    const h = harness([
      reply([{ type: "text", text: "Let me look." }, toolUse("a", "read_file", { path: "a.md" }), toolUse("b", "read_file", { path: "missing.md" })], "tool_use", usage(100, 20)),
      answer("It rounds half to even.", usage(300, 30)),
    ]);
    const r = await runAgentLoop(h.options);
    expect(r).toMatchObject({
      status: "completed",
      answer: "It rounds half to even.",
      model: MODEL,
      numTurns: 2,
      toolCalls: 2,
      toolCallsByName: { read_file: 2 },
      toolErrorsByName: { read_file: 1 },
      inputTokens: 400,
      outputTokens: 50,
      cacheCreationInputTokens: 0,
      cacheReadInputTokens: 0,
      usageComplete: true,
      setupProblems: [],
      costProblem: null,
    });
    expect(h.sent).toHaveLength(2);
    for (const body of h.sent) {
      expect(Object.keys(body).sort()).toEqual(["max_tokens", "messages", "model", "system", "temperature", "tools"]);
      expect(body).toMatchObject({ model: MODEL, max_tokens: 1024, temperature: 0, system: SYSTEM_PROMPT });
      expect(body.tools.map((t: { name: string }) => t.name)).toEqual(["read_file", "mcp__doc-bridge__doc_search"]);
      expect(JSON.stringify(body)).not.toMatch(/cache_control|thinking|"stream"|tool_choice/);
    }
    expect(h.sent[1]!.messages).toEqual([
      { role: "user", content: "Question: how?" },
      {
        role: "assistant",
        content: [
          { type: "text", text: "Let me look." },
          { type: "tool_use", id: "a", name: "read_file", input: { path: "a.md" } },
          { type: "tool_use", id: "b", name: "read_file", input: { path: "missing.md" } },
        ],
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "a", content: "content of a.md" },
          { type: "tool_result", tool_use_id: "b", content: "content of missing.md", is_error: true },
        ],
      },
    ]);
  });

  it("reserves for exactly the bytes it then sends, before every call", async () => {
    const h = harness([tools(1), answer()]);
    await runAgentLoop(h.options);
    expect(h.opened).toEqual(h.sent.map((b) => Buffer.byteLength(JSON.stringify(b), "utf8")));
    expect(h.closed).toHaveLength(2);
  });

  it("does not make a call the budget refuses", async () => {
    const h = harness([tools(1), answer()], { refuseAt: 2 });
    const r = await runAgentLoop(h.options);
    expect(r.status).toBe("budget-exceeded");
    expect(r.reason).toBe("no room under the cap");
    expect(h.sent).toHaveLength(1);
  });

  it("fails a turn with more than 20 tool calls without running any of them; all are counted", async () => {
    const h = harness([tools(21), answer()]);
    const r = await runAgentLoop(h.options);
    expect(r.status).toBe("failed");
    expect(r.reason).toMatch(/21 tool calls, more than the limit of 20/);
    expect(r.toolCalls).toBe(21);
    expect(h.executed).toEqual([]);
    expect(h.sent).toHaveLength(1);
    const ok = harness([tools(20), answer()]);
    expect((await runAgentLoop(ok.options)).status).toBe("completed");
    expect(ok.executed).toHaveLength(20);
  });

  it("never makes a ninth call: tools asked for on turn 8 fail the attempt", async () => {
    const h = harness([...Array.from({ length: 8 }, () => tools(1)), answer()]);
    const r = await runAgentLoop(h.options);
    expect(PROTOCOL_LIMITS.maxTurns).toBe(8);
    expect(r.status).toBe("failed");
    expect(r.reason).toMatch(/limit of 8 turns/);
    expect(h.sent).toHaveLength(8);
    expect(h.executed).toHaveLength(7);
    const eight = harness([...Array.from({ length: 7 }, () => tools(1)), answer()]);
    expect((await runAgentLoop(eight.options)).status).toBe("completed");
  });

  it("checks the deadline between turns and between tools", async () => {
    // A clock that only the tools move: each tool call takes 160 s of it.
    let t = 0;
    const clocked = (ms: number): ToolSet => ({
      definitions: [{ name: "read_file", description: "", input_schema: { type: "object" } }],
      async call() {
        t += ms;
        return { content: "ok", isError: false };
      },
      close: async () => {},
    });
    const h = harness([tools(3), answer()], { toolSet: clocked(160_000), now: () => t });
    const r = await runAgentLoop(h.options);
    expect(r.status).toBe("timed-out");
    expect(r.reason).toBe("the 300-second deadline passed before a tool call of turn 1");
    expect(h.sent).toHaveLength(1);
    expect(r.wallTimeMs).toBe(320_000);
    t = 0;
    const between = harness([tools(1), answer()], { toolSet: clocked(400_000), now: () => t });
    const r2 = await runAgentLoop(between.options);
    expect(r2).toMatchObject({ status: "timed-out", reason: "the 300-second deadline passed before turn 2", usageComplete: true, inputTokens: 100 });
    expect(between.sent).toHaveLength(1);
    t = 0;
    const inTime = harness([tools(1), answer()], { toolSet: clocked(299_999), now: () => t });
    expect((await runAgentLoop(inTime.options)).status).toBe("completed");
  });

  it("bounds each local tool call and tells the model it was stopped", async () => {
    const slow: ToolSet = {
      definitions: [{ name: "read_file", description: "", input_schema: { type: "object" } }],
      call: (_n, _i, signal) => new Promise((resolve) => signal.addEventListener("abort", () => setTimeout(() => resolve({ content: "late", isError: false }), 10))),
      close: async () => {},
    };
    const h = harness([tools(1), answer()], { toolSet: slow, limits: { toolTimeoutMs: 50 } });
    const r = await runAgentLoop(h.options);
    expect(r.status).toBe("completed");
    expect(r.toolErrorsByName).toEqual({ read_file: 1 });
    expect(h.sent[1]!.messages[2].content[0]).toMatchObject({ is_error: true, content: expect.stringMatching(/did not finish within 0.05 s/) });
    expect(PROTOCOL_LIMITS.toolTimeoutMs).toBe(30_000);
  });

  it("stops without retry when a reply is lost; only earlier turns' tokens are known", async () => {
    const h = harness([tools(1), { kind: "lost", problem: "the request got no complete reply: fetch failed (ECONNRESET)", aborted: null }, answer()]);
    const r = await runAgentLoop(h.options);
    expect(r).toMatchObject({ status: "failed", usageComplete: false, inputTokens: 100, outputTokens: 10 });
    expect(r.reason).toMatch(/ECONNRESET.*not retried/);
    expect(h.sent).toHaveLength(2);
    const first = harness([{ kind: "api-error", httpStatus: 529, errorType: "overloaded_error", problem: "HTTP 529 overloaded_error: busy" }]);
    const r1 = await runAgentLoop(first.options);
    expect(r1).toMatchObject({ status: "failed", usageComplete: false, inputTokens: null, outputTokens: null, cacheReadInputTokens: null });
  });

  it("an abandoned request at the deadline is timed-out; invalid usage is invalid-cost", async () => {
    const h = harness([{ kind: "lost", problem: "x", aborted: "deadline" }]);
    expect((await runAgentLoop(h.options)).status).toBe("timed-out");
    const u = harness([tools(1), { kind: "invalid-usage", httpStatus: 200, problem: "the reply has no usage field" }]);
    const r = await runAgentLoop(u.options);
    expect(r).toMatchObject({ status: "invalid-cost", usageComplete: false, inputTokens: 100 });
    expect(r.costProblem).toMatch(/turn 2: the reply has no usage field; the call's reservation stays charged/);
  });

  it("usage above the call's ceiling is budget-exceeded and stops the loop", async () => {
    const h = harness([reply([toolUse("x")], "tool_use", usage(10_000_000, 5)), answer()]);
    const r = await runAgentLoop(h.options);
    expect(r.status).toBe("budget-exceeded");
    expect(r.reason).toMatch(/passed the call's ceiling/);
    expect(r.inputTokens).toBe(10_000_000);
    expect(h.executed).toEqual([]);
    const out = harness([reply([{ type: "text", text: "a" }], "end_turn", usage(10, 1025))]);
    expect((await runAgentLoop(out.options)).status).toBe("budget-exceeded");
  });

  // contract: R29
  it("counts cache tokens against the call's prompt ceiling, and stops when their cost passed the reservation", async () => {
    // Input alone fits the ceiling; input plus the cache read the reply reports does not.
    const probe = harness([answer()]);
    await runAgentLoop(probe.options);
    const ceiling = probe.opened[0]! + 8192;
    const cached = { ...usage(ceiling - 10, 5), cacheReadInputTokens: 11 };
    const h = harness([reply([toolUse("x")], "tool_use", cached), answer()]);
    const r = await runAgentLoop(h.options);
    expect(h.opened[0]).toBe(probe.opened[0]);
    expect(r).toMatchObject({ status: "budget-exceeded", inputTokens: ceiling - 10, cacheReadInputTokens: 11 });
    expect(r.reason).toMatch(new RegExp(`${ceiling + 1} prompt, 5 output tokens\\) passed the call's ceiling \\(${ceiling} prompt`));
    expect(h.executed).toEqual([]);
    // Within the ceiling, but the account found the cost above the reservation (cache writes are dearer than input).
    const writes = harness([reply([toolUse("y")], "tool_use", { ...usage(10, 5), cacheWrite1hInputTokens: 100 }), answer()], { overReservationAt: 1 });
    const w = await runAgentLoop(writes.options);
    expect(w).toMatchObject({ status: "budget-exceeded", cacheCreationInputTokens: 100 });
    expect(w.reason).toMatch(/110 prompt tokens, 100 of them cache writes\) passed the call's reservation/);
    expect(writes.sent).toHaveLength(1);
  });

  it("treats what the request did not ask for as invalid-setup: another model, a thinking block, a tool not offered", async () => {
    const other = harness([reply([{ type: "text", text: "a" }], "end_turn", usage(), "claude-opus-9")]);
    const r = await runAgentLoop(other.options);
    expect(r.status).toBe("invalid-setup");
    expect(r.setupProblems[0]).toMatch(/model is claude-opus-9/);
    const dated = harness([reply([{ type: "text", text: "a" }], "end_turn", usage(), `${MODEL}-20261001`)]);
    expect((await runAgentLoop(dated.options)).status).toBe("completed");
    const thinking = harness([
      reply(
        [
          { type: "other", blockType: "thinking" },
          { type: "text", text: "a" },
        ],
        "end_turn",
      ),
    ]);
    expect((await runAgentLoop(thinking.options)).setupProblems[0]).toMatch(/thinking block/);
    const unknown = harness([reply([toolUse("z", "Bash", { command: "ls" })], "tool_use"), answer()]);
    const u = await runAgentLoop(unknown.options);
    expect(u).toMatchObject({ status: "invalid-setup", toolCalls: 1, toolCallsByName: { Bash: 1 } });
    expect(unknown.executed).toEqual([]);
  });

  // contract: R35
  it("counts a tool the model named like what every object inherits as that name, once per call", async () => {
    const odd = harness([reply([toolUse("a", "constructor", {}), toolUse("b", "__proto__", {}), toolUse("c", "constructor", {})], "tool_use"), answer()]);
    const r = await runAgentLoop(odd.options);
    expect(r.status).toBe("invalid-setup");
    expect(r.toolCalls).toBe(3);
    expect(Object.entries(r.toolCallsByName).sort()).toEqual([
      ["__proto__", 1],
      ["constructor", 2],
    ]);
    expect(r.setupProblems.filter((p) => /was not offered/.test(p))).toHaveLength(3);
  });

  it("is invalid-setup when every doc-bridge call returned an error, and records partial errors otherwise", async () => {
    const all = harness([reply([toolUse("d1", "mcp__doc-bridge__doc_search", { query: "x" })], "tool_use"), answer()]);
    const r = await runAgentLoop(all.options);
    expect(r.status).toBe("invalid-setup");
    expect(r.setupProblems).toEqual(["every doc-bridge tool call (1) returned an error: the treatment was lost"]);
    const none = harness([answer()]);
    expect((await runAgentLoop(none.options)).status).toBe("completed");
  });

  it("fails a reply that stops for any reason but an answer or tool use", async () => {
    const cut = harness([reply([{ type: "text", text: "partial" }], "max_tokens")]);
    const r = await runAgentLoop(cut.options);
    expect(r.status).toBe("failed");
    expect(r.reason).toMatch(/max_tokens \(the 1024-token output limit\)/);
    expect(r.answer).toBeNull();
    const empty = harness([reply([{ type: "text", text: "  " }], "end_turn")]);
    expect((await runAgentLoop(empty.options)).reason).toMatch(/without answer text/);
  });

  it("unknown cache figures stay unknown; a signal before a turn stops the loop", async () => {
    const h = harness([reply([{ type: "text", text: "a" }], "end_turn", { ...usage(5, 1), cacheReported: { read: true, write: false } })]);
    const r = await runAgentLoop(h.options);
    expect(r).toMatchObject({ status: "completed", inputTokens: 5, cacheCreationInputTokens: null, cacheReadInputTokens: null });
    const c = new AbortController();
    c.abort("SIGINT");
    const s = harness([answer()], { signal: c.signal });
    const rs = await runAgentLoop(s.options);
    expect(rs).toMatchObject({ status: "failed", reason: "interrupted by SIGINT" });
    expect(s.sent).toHaveLength(0);
  });
});
