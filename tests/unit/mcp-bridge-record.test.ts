import { describe, expect, it } from "vitest";
import { JsonRpcRecorder, MAX_LOGGED_MESSAGES, MAX_PARSED_LINE_BYTES, ToolCallGate, compareMcpRecord, containerMcpConfig } from "../../src/mcp/bridge.ts";
import { cliToolName } from "../../src/terms/tool-names.ts";
import { enginePrivileges } from "../../src/mcp/engine-sandbox.ts";

const line = (o: unknown) => Buffer.from(JSON.stringify(o) + "\n");
const call = (id: number | string, name: string) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: { query: "x" } } });
const ok = (id: number | string, isError = false) => ({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "r" }], isError } });

describe("JsonRpcRecorder", () => {
  it("records tools/call answered by the server, with the tool name and isError", () => {
    const r = new JsonRpcRecorder(() => 0);
    r.push("to-server", line({ jsonrpc: "2.0", id: 0, method: "initialize", params: {} }));
    r.push("to-client", line({ jsonrpc: "2.0", id: 0, result: {} }));
    r.push("to-server", line({ jsonrpc: "2.0", method: "notifications/initialized" }));
    r.push("to-server", line(call(1, "doc.search")));
    r.push("to-server", line(call(2, "doc.get")));
    r.push("to-client", line(ok(2, true)));
    r.push("to-client", line(ok(1)));
    r.finish();
    expect(r.record.toolCalls.map(({ name, id, isError }) => ({ name, id, isError }))).toEqual([
      { name: "doc.get", id: 2, isError: true },
      { name: "doc.search", id: 1, isError: false },
    ]);
    expect(r.record.messages).toBe(7);
    expect(r.record.messageLog.map((m) => m.kind)).toEqual(["request", "response", "notification", "request", "request", "response", "response"]);
    expect(r.record.messageLog[3]).toMatchObject({ direction: "to-server", method: "tools/call", id: 1, tool: "doc.search" });
    expect(r.record.unansweredToolCalls).toEqual([]);
  });

  it("counts a JSON-RPC error answer as an error, and an unanswered call as unanswered", () => {
    const r = new JsonRpcRecorder(() => 0);
    r.push("to-server", line(call("a", "doc.search")));
    r.push("to-client", line({ jsonrpc: "2.0", id: "a", error: { code: -32602, message: "bad" } }));
    r.push("to-server", line(call("b", "handoff.resolve")));
    r.finish();
    expect(r.record.toolCalls).toMatchObject([{ name: "doc.search", id: "a", isError: true }]);
    expect(r.record.unansweredToolCalls).toEqual([{ name: "handoff.resolve", id: "b" }]);
  });

  it("does not take a response to a server-initiated request with the same id for a tool answer", () => {
    const r = new JsonRpcRecorder(() => 0);
    r.push("to-server", line(call(1, "doc.search")));
    // The client answers the server's own request id 1 (e.g. ping): not the tool's answer.
    r.push("to-server", line({ jsonrpc: "2.0", id: 1, result: {} }));
    expect(r.record.toolCalls).toEqual([]);
    r.push("to-client", line(ok(1)));
    expect(r.record.toolCalls).toHaveLength(1);
  });

  it("reassembles messages split across chunks and several messages in one chunk", () => {
    const r = new JsonRpcRecorder(() => 0);
    const bytes = Buffer.concat([line(call(1, "doc.search")), line(call(2, "doc.get"))]);
    for (let i = 0; i < bytes.length; i += 7) r.push("to-server", bytes.subarray(i, i + 7));
    const answers = Buffer.concat([line(ok(1)), line(ok(2))]);
    r.push("to-client", answers);
    expect(r.record.toolCalls.map((c) => c.name)).toEqual(["doc.search", "doc.get"]);
  });

  it("records a line that is not JSON and an oversized line without keeping them, then parses on", () => {
    const r = new JsonRpcRecorder(() => 0);
    r.push("to-client", Buffer.from("not json\n"));
    const big = Buffer.alloc(MAX_PARSED_LINE_BYTES + 10, 0x61);
    r.push("to-client", big.subarray(0, 1000));
    r.push("to-client", big.subarray(1000));
    r.push("to-client", Buffer.from("\n"));
    r.push("to-server", line(call(3, "doc.get")));
    r.push("to-client", line(ok(3)));
    expect(r.record.messageLog.map((m) => m.kind)).toEqual(["unparsed", "oversized", "request", "response"]);
    expect(r.record.messageLog[1]!.bytes).toBe(MAX_PARSED_LINE_BYTES + 10);
    expect(JSON.stringify(r.record)).not.toContain("aaaa");
    expect(r.record.toolCalls).toHaveLength(1);
  });

  it("keeps at most MAX_LOGGED_MESSAGES entries but counts every message", () => {
    const r = new JsonRpcRecorder(() => 0);
    const n = MAX_LOGGED_MESSAGES + 5;
    r.push("to-server", Buffer.concat(Array.from({ length: n }, () => line({ jsonrpc: "2.0", method: "notifications/x" }))));
    expect(r.record.messages).toBe(n);
    expect(r.record.messageLog).toHaveLength(MAX_LOGGED_MESSAGES);
    expect(r.record.messageLogTruncated).toBe(true);
  });
});

describe("compareMcpRecord", () => {
  const record = {
    toolCalls: [
      { name: "doc.search", id: 1, isError: false, ms: 3 },
      { name: "doc.get", id: 2, isError: false, ms: 2 },
    ],
    unansweredToolCalls: [],
    refusedConnections: 0,
  };

  it("finds nothing when the transcript's doc-bridge calls all reached the server", () => {
    expect(compareMcpRecord(record, ["mcp__doc-bridge__doc_search", "mcp__doc-bridge__doc_get", "Read"])).toEqual([]);
    expect(compareMcpRecord(record, { "mcp__doc-bridge__doc_search": 1, "mcp__doc-bridge__doc_get": 1, Grep: 4 })).toEqual([]);
  });

  it("flags a claimed call that never reached the server", () => {
    const problems = compareMcpRecord(record, ["mcp__doc-bridge__doc_search", "mcp__doc-bridge__doc_get", "mcp__doc-bridge__handoff_resolve"]);
    expect(problems).toEqual(["the transcript shows 1 call(s) of mcp__doc-bridge__handoff_resolve but the doc-bridge server answered 0"]);
  });

  it("flags differing counts in either direction", () => {
    expect(compareMcpRecord(record, { "mcp__doc-bridge__doc_search": 2, "mcp__doc-bridge__doc_get": 1 })).toEqual([
      "the transcript shows 2 call(s) of mcp__doc-bridge__doc_search but the doc-bridge server answered 1",
    ]);
    expect(compareMcpRecord(record, ["mcp__doc-bridge__doc_search"])).toEqual(["the doc-bridge server answered 1 call(s) of mcp__doc-bridge__doc_get but the transcript shows 0"]);
  });

  it("flags unanswered calls and refused extra connections", () => {
    const problems = compareMcpRecord({ toolCalls: [], unansweredToolCalls: [{ name: "doc.search", id: 7 }], refusedConnections: 1 }, []);
    expect(problems).toEqual(["the doc-bridge server never answered mcp__doc-bridge__doc_search (request id 7)", "1 extra connection(s) to the doc-bridge socket were refused"]);
  });
});

describe("names and container config", () => {
  it("maps server tool names the way Claude Code 2.1.296 does", () => {
    expect(cliToolName("doc.search")).toBe("mcp__doc-bridge__doc_search");
    expect(cliToolName("memory.promoteDraft")).toBe("mcp__doc-bridge__memory_promoteDraft");
    expect(cliToolName("a.b.c")).toBe("mcp__doc-bridge__a_b_c");
  });

  it("builds the --mcp-config of the relay inside the container", () => {
    expect(JSON.parse(containerMcpConfig())).toEqual({
      mcpServers: {
        "doc-bridge": { type: "stdio", command: "/usr/local/bin/node", args: ["/opt/study-runner/mcp-relay.cjs", "/run/study-runner/mcp.sock"] },
      },
    });
  });

  it("says who the doc-bridge engine runs as: uid 65534 when the runner is root, else the runner's own uid and what that leaves open", () => {
    expect(enginePrivileges(0)).toMatchObject({ uid: 65534, gid: 65534, dropped: true });
    const own = enginePrivileges(1000);
    expect(own).toMatchObject({ uid: 1000, dropped: false });
    expect(own.summary).toMatch(/could still read files of that user \(such as the CLI login\)/);
  });

  it("the bridge's gate passes allowed calls re-serialized, refuses others with an error, and cannot be fooled by duplicate keys, batches or split lines", () => {
    const gate = new ToolCallGate(new Set(["doc.search", "doc.get", "handoff.resolve"]));
    const call = (id: number, name: string) => JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: {} } });
    // A line split across chunks is judged whole.
    const first = gate.push(Buffer.from(call(1, "doc.search").slice(0, 10)));
    expect(first).toEqual({ forward: [], replies: [], refused: [] });
    const rest = gate.push(Buffer.from(call(1, "doc.search").slice(10) + "\n"));
    expect(rest.forward.map(String)).toEqual([call(1, "doc.search") + "\n"]);

    // Duplicate keys: JSON.parse keeps the last, and the server only ever sees the checked form.
    const dup = gate.push(Buffer.from('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"doc.get","name":"gate.status"}}\n'));
    expect(dup.forward).toEqual([]);
    expect(dup.refused).toEqual([{ name: "gate.status", id: 2 }]);
    expect(JSON.parse(String(dup.replies[0]))).toMatchObject({ id: 2, error: { code: -32601 } });

    // A batch keeps its allowed members only.
    const batch = gate.push(Buffer.from(`[${call(3, "doc.get")},${call(4, "memory.promoteDraft")}]\n`));
    expect(JSON.parse(String(batch.forward[0]))).toEqual([JSON.parse(call(3, "doc.get"))]);
    expect(batch.refused).toEqual([{ name: "memory.promoteDraft", id: 4 }]);

    // Notifications and other methods pass; a line that does not parse is dropped and recorded.
    expect(gate.push(Buffer.from('{"jsonrpc":"2.0","method":"notifications/initialized"}\n')).forward).toHaveLength(1);
    expect(gate.push(Buffer.from("not json\n"))).toEqual({ forward: [], replies: [], refused: [{ name: "(unparsed line)", id: null }] });
  });
});
