import { describe, expect, it } from "vitest";
import { computeCost } from "../../src/cost/compute.ts";
import { readTranscript, TranscriptReader, type SetupProblemCode } from "../../src/transcript/reader.ts";
import { ANSWER, baseEvents, evaluate, expectation, MODEL, REAL_SAMPLE_LINES, resultEvent, toolUse, toText, type Arm, type Evaluation, type Event } from "./transcript-fixtures.ts";

const ARMS: Arm[] = ["repository", "mcp"];

/** The attempt is invalid-setup for exactly one rule, the answer leaks nowhere, and the cost is still read. */
function expectOnly(ev: Evaluation, code: SetupProblemCode): void {
  expect(ev.facts.setupProblemCodes).toEqual([code]);
  expect(ev.classification.status).toBe("invalid-setup");
  expectNoLeak(ev);
}

function expectNoLeak(ev: Evaluation): void {
  const text = [...ev.facts.setupProblems, ...ev.cost.problems, ev.classification.reason].join("\n");
  expect(text).not.toContain("SECRET-ANSWER");
}

function withEvents(arm: Arm, edit: (events: Event[]) => unknown[] | void): string {
  const events = baseEvents(arm);
  const out = edit(events);
  return toText(out ?? events);
}

describe("a valid transcript", () => {
  it.each(ARMS)("%s arm: completed, with the facts the ledger records", (arm) => {
    const ev = evaluate(toText(baseEvents(arm)), arm);
    expect(ev.facts.setupProblems).toEqual([]);
    expect(ev.cost.problems).toEqual([]);
    expect(ev.classification.status).toBe("completed");
    const f = ev.facts;
    expect(f.initModel).toBe(MODEL);
    expect([...f.initTools!].sort()).toEqual([...expectation(arm).expectedTools].sort());
    expect(f.initMcpServers).toEqual(arm === "mcp" ? [{ name: "doc-bridge", status: "connected" }] : []);
    expect(f.apiKeySource).toBe("none");
    expect(f.claudeCodeVersion).toBe("2.1.296");
    expect(f.toolCalls).toBe(2);
    expect(f.toolCallsByName).toEqual(arm === "mcp" ? { "mcp__doc-bridge__doc_search": 1, "mcp__doc-bridge__doc_get": 1 } : { Grep: 1, Read: 1 });
    expect(f.toolErrorsByName).toEqual({});
    expect(f.permissionDenials).toEqual([]);
    expect(f.numTurns).toBe(2);
    expect(f.cliSubtype).toBe("success");
    expect(f.isError).toBe(false);
    expect(f.answer).toBe(ANSWER);
    expect([f.inputTokens, f.outputTokens, f.cacheReadInputTokens, f.cacheCreationInputTokens]).toEqual([5000, 65, 700, 500]);
    expect(f.cacheCreation).toEqual({ ephemeral5mInputTokens: 500, ephemeral1hInputTokens: 0 });
    expect(Object.keys(f.modelUsage!)).toEqual([MODEL]);
    expect(f.reportedCostUsd).toBe(0.000602);
    expect(f.usageComplete).toBe(true);
    // Three events of msg_01 repeat one usage: counted once.
    expect(f.perMessageUsage).toEqual([
      { messageId: "msg_01", inputTokens: 2000, cacheReadInputTokens: 0, cacheCreationInputTokens: 500 },
      { messageId: "msg_02", inputTokens: 3000, cacheReadInputTokens: 700, cacheCreationInputTokens: 0 },
    ]);
    expect(ev.cost.computedCostUsd).toBe(0.000602);
    expect(ev.cost.costBasis?.tierSource).toBe("per-message");
    expect(f.docBridgeCalls).toEqual(
      arm === "mcp"
        ? [
            { id: "toolu_01", name: "mcp__doc-bridge__doc_search", input: { query: "retry limit" }, isError: false },
            { id: "toolu_02", name: "mcp__doc-bridge__doc_get", input: { id: "config/limits" }, isError: false },
          ]
        : [],
    );
  });

  it("fed line by line gives the same facts as the whole text, and a CRLF-free empty tail is no line", () => {
    const text = toText(baseEvents("mcp"));
    const reader = new TranscriptReader(expectation("mcp"));
    for (const line of text.split("\n")) reader.pushLine(line);
    expect(reader.finish()).toEqual(readTranscript(text, expectation("mcp")));
    expect(reader.finish().lines).toBe(9);
  });

  it("unknown event types and system subtypes other than init are not problems", () => {
    const text = withEvents("repository", (e) => {
      e.splice(1, 0, { type: "system", subtype: "hook_response", hook_name: "SessionStart" }, { type: "stream_event", event: {} });
    });
    expect(evaluate(text, "repository").classification.status).toBe("completed");
  });

  // contract: R125
  it("reads the stream the real 2.1.296 wrote outside the runner: its API-key login and the init fields the runner's container sets differ, and its scripted usage fails the per-message sum", () => {
    const ev = evaluate(REAL_SAMPLE_LINES.join("\n") + "\n", "repository");
    // The sample was recorded with ANTHROPIC_API_KEY set, on a host with analytics on and other
    // skills: a study attempt must use the CLI's login in the runner's container, whose init was measured.
    expect(ev.facts.setupProblemCodes).toEqual(["api-key-source", "init-field"]);
    expect(ev.facts.setupProblems.filter((p) => p.startsWith("init field ")).map((p) => /^init field "([^"]+)"/.exec(p)![1])).toEqual([
      "analytics_disabled",
      "plugins",
      "product_feedback_disabled",
      "skills",
      "slash_commands",
    ]);
    expect(ev.facts.apiKeySource).toBe("ANTHROPIC_API_KEY");
    expect(ev.facts.toolCallsByName).toEqual({ Read: 2 });
    expect(ev.facts.answer).toBe("ok");
    expect(ev.facts.reportedCostUsd).toBe(2.5e-6);
    // The scripted server's message_start said 100 input per message, its final usage 10.
    expect(ev.cost.computedCostUsd).toBe(2.5e-6);
    expect(ev.cost.problems).toEqual(["per-message usage does not sum to modelUsage (input 200 vs 10)"]);
    expect(ev.classification.status).toBe("invalid-setup");
  });
});

describe("stream shape (seed 000: one result, last; one init; every line JSON)", () => {
  it("a line that is not JSON is invalid-setup, and the result's cost is still read", () => {
    const ev = evaluate(
      withEvents("repository", (e) => [...e.slice(0, 6), '{"type":"assistant",', ...e.slice(6)]),
      "repository",
    );
    expectOnly(ev, "not-json");
    expect(ev.facts.setupProblems).toEqual(["line 7 is not JSON"]);
    expect(ev.facts.reportedCostUsd).toBe(0.000602);
    expect(ev.cost.computedCostUsd).toBe(0.000602);
  });

  it("a JSON line that is not an object is invalid-setup", () => {
    expectOnly(
      evaluate(
        withEvents("repository", (e) => [e[0], "[1,2]", ...e.slice(1)]),
        "repository",
      ),
      "not-json",
    );
  });

  it("an object without a type is invalid-setup", () => {
    expectOnly(
      evaluate(
        withEvents("repository", (e) => [e[0], { message: {} }, ...e.slice(1)]),
        "repository",
      ),
      "malformed-event",
    );
  });

  it("no result event is invalid-setup", () => {
    const ev = evaluate(
      withEvents("repository", (e) => e.slice(0, -1)),
      "repository",
    );
    expectOnly(ev, "no-result");
    expect(ev.facts.usageComplete).toBe(false);
    expect(ev.facts.reportedCostUsd).toBeNull();
  });

  it("two result events are invalid-setup; the last one is read", () => {
    const ev = evaluate(
      withEvents("repository", (e) => {
        const first = resultEvent();
        first.total_cost_usd = 0.5;
        e.splice(8, 0, first);
      }),
      "repository",
    );
    expectOnly(ev, "several-results");
    expect(ev.facts.reportedCostUsd).toBe(0.000602);
  });

  it("a result that is not the last event is invalid-setup", () => {
    expectOnly(
      evaluate(
        withEvents("repository", (e) => [...e, { type: "rate_limit_event" }]),
        "repository",
      ),
      "result-not-last",
    );
  });

  it("two init events are invalid-setup", () => {
    expectOnly(
      evaluate(
        withEvents("mcp", (e) => [e[0], ...e]),
        "mcp",
      ),
      "several-inits",
    );
  });

  it("no init event is invalid-setup", () => {
    const ev = evaluate(
      withEvents("mcp", (e) => e.slice(1)),
      "mcp",
    );
    expectOnly(ev, "no-init");
    expect(ev.facts.initModel).toBeNull();
  });

  it("a malformed init event is invalid-setup", () => {
    expectOnly(
      evaluate(
        withEvents("repository", (e) => void (e[0]!.tools = "Glob,Grep,Read")),
        "repository",
      ),
      "malformed-init",
    );
  });

  it("a malformed assistant event is invalid-setup", () => {
    expectOnly(
      evaluate(
        withEvents("repository", (e) => void (e[1]!.message.content = "text")),
        "repository",
      ),
      "malformed-event",
    );
  });

  it("a tool_use block without a name is invalid-setup", () => {
    const nameless = { type: "assistant", message: { id: "msg_01", content: [{ type: "tool_use", id: "toolu_03", input: {} }] } };
    expectOnly(
      evaluate(
        withEvents("repository", (e) => void e.splice(4, 0, nameless)),
        "repository",
      ),
      "malformed-event",
    );
  });

  it("malformed per-message usage is invalid-setup", () => {
    expectOnly(
      evaluate(
        withEvents("repository", (e) => void (e[7]!.message.usage.input_tokens = "3000")),
        "repository",
      ),
      "malformed-event",
    );
  });

  it("a malformed result is invalid-setup, and its cost is still read", () => {
    const ev = evaluate(
      withEvents("repository", (e) => void delete e[8]!.permission_denials),
      "repository",
    );
    expectOnly(ev, "malformed-result");
    expect(ev.facts.setupProblems).toEqual(["line 9: result event has malformed or missing permission_denials"]);
    expect(ev.cost.computedCostUsd).toBe(0.000602);
    expect(ev.cost.reportedCostUsd).toBe(0.000602);
  });

  it("a repeated message whose prompt usage differs is invalid-setup", () => {
    expectOnly(
      evaluate(
        withEvents("repository", (e) => void (e[3]!.message.usage = { ...e[3]!.message.usage, input_tokens: 1 })),
        "repository",
      ),
      "inconsistent-usage",
    );
  });

  it("a tool_result for a tool_use that never happened is invalid-setup", () => {
    const ev = evaluate(
      withEvents("repository", (e) => void (e[5]!.message.content[0].tool_use_id = "toolu_99")),
      "repository",
    );
    expectOnly(ev, "unknown-tool-result");
  });
});

describe("init checks (seed 000: model, exact tool set, MCP status)", () => {
  it("an init model other than the requested one is invalid-setup", () => {
    const ev = evaluate(
      withEvents("repository", (e) => void (e[0]!.model = "claude-sonnet-5")),
      "repository",
    );
    expectOnly(ev, "init-model");
    expect(ev.facts.setupProblems).toEqual(['init model "claude-sonnet-5" is not the requested "claude-haiku-5-5"']);
  });

  it.each([
    ["missing", ["Glob", "Read"], 'missing "Grep"'],
    ["extra", ["Glob", "Grep", "Read", "Bash"], 'extra "Bash"'],
    ["duplicated", ["Glob", "Grep", "Read", "Read"], 'duplicated "Read"'],
  ])("a %s init tool is invalid-setup", (_, tools, detail) => {
    const ev = evaluate(
      withEvents("repository", (e) => void (e[0]!.tools = tools)),
      "repository",
    );
    expectOnly(ev, "init-tools");
    expect(ev.facts.setupProblems).toEqual([`init tools are not exactly the expected set: ${detail}`]);
  });

  it("a doc-bridge tool missing from init in the mcp arm is invalid-setup", () => {
    expectOnly(
      evaluate(
        withEvents("mcp", (e) => void e[0]!.tools.pop()),
        "mcp",
      ),
      "init-tools",
    );
  });

  it.each([
    ["failed", [{ name: "doc-bridge", status: "failed" }]],
    ["pending", [{ name: "doc-bridge", status: "pending" }]],
    ["renamed", [{ name: "docs", status: "connected" }]],
    ["absent", []],
    [
      "doubled",
      [
        { name: "doc-bridge", status: "connected" },
        { name: "other", status: "connected" },
      ],
    ],
  ])("mcp arm: a %s doc-bridge server is invalid-setup", (_, servers) => {
    expectOnly(
      evaluate(
        withEvents("mcp", (e) => void (e[0]!.mcp_servers = servers)),
        "mcp",
      ),
      "mcp-servers",
    );
  });

  it("repository arm: any MCP server is invalid-setup", () => {
    expectOnly(
      evaluate(
        withEvents("repository", (e) => void (e[0]!.mcp_servers = [{ name: "doc-bridge", status: "connected" }])),
        "repository",
      ),
      "mcp-servers",
    );
  });

  it("repository arm: an MCP tool in init is invalid-setup", () => {
    const ev = evaluate(
      withEvents("repository", (e) => void e[0]!.tools.push("mcp__doc-bridge__doc_search")),
      "repository",
    );
    expect(ev.facts.setupProblemCodes).toEqual(["init-tools"]);
    expect(ev.facts.setupProblems).toContain('the repository arm must have no MCP tool; init lists "mcp__doc-bridge__doc_search"');
    expect(ev.classification.status).toBe("invalid-setup");
  });

  it("honours another MCP server name", () => {
    const measured = expectation("mcp").init;
    const servers = [{ name: "db2", status: "connected" }];
    const tools = ["Glob", "Grep", "Read", "mcp__db2__q"];
    const exp = { arm: "mcp" as const, model: MODEL, expectedTools: tools, mcpServerName: "db2", init: { ...measured, fields: { ...measured.fields, tools, mcp_servers: servers } } };
    const events = baseEvents("mcp");
    events[0]!.tools = tools;
    events[0]!.mcp_servers = servers;
    events.splice(1, 5);
    const facts = readTranscript(toText(events), exp);
    expect(facts.setupProblems).toEqual([]);
  });

  it("rejects an expectation that is itself wrong (a runner bug, not an outcome)", () => {
    const init = expectation("repository").init;
    expect(() => new TranscriptReader({ arm: "repository", model: MODEL, expectedTools: ["Read", "mcp__doc-bridge__doc_get"], init })).toThrow(/no MCP tool/);
    expect(() => new TranscriptReader({ arm: "mcp", model: MODEL, expectedTools: ["Read"], init })).toThrow(/mcp__doc-bridge__/);
    expect(() => new TranscriptReader({ arm: "repository", model: MODEL, expectedTools: ["Read", "Read"], init })).toThrow(/duplicates/);
  });
});

describe("tool calls, denials and tool errors", () => {
  it("a tool call outside the allowed set is invalid-setup", () => {
    const ev = evaluate(
      withEvents("repository", (e) => void (e[2]!.message.content[0] = toolUse("toolu_01", "Bash", { command: "ls" }))),
      "repository",
    );
    expectOnly(ev, "tool-outside-set");
    expect(ev.facts.toolCallsByName).toEqual({ Bash: 1, Read: 1 });
  });

  it("a doc-bridge call in the repository arm is outside the set", () => {
    expectOnly(
      evaluate(
        withEvents("repository", (e) => void (e[2]!.message.content[0] = toolUse("toolu_01", "mcp__doc-bridge__doc_search", { query: "x" }))),
        "repository",
      ),
      "tool-outside-set",
    );
  });

  it("a server-side tool use block counts as a tool call", () => {
    const ev = evaluate(
      withEvents("repository", (e) => void e.splice(7, 0, { type: "assistant", message: { id: "msg_01", content: [{ type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: {} }] } })),
      "repository",
    );
    expectOnly(ev, "tool-outside-set");
    expect(ev.facts.toolCalls).toBe(3);
  });

  it("an id reused with another tool name cannot smuggle that tool in", () => {
    const ev = evaluate(
      withEvents("repository", (e) => void e.splice(4, 0, { type: "assistant", message: { id: "msg_01", content: [toolUse("toolu_01", "Bash", { command: "id" })] } })),
      "repository",
    );
    expectOnly(ev, "tool-outside-set");
    expect(ev.facts.toolCalls).toBe(2);
  });

  it("counts every tool_use once by id, even when its event repeats", () => {
    const ev = evaluate(
      withEvents("repository", (e) => [...e.slice(0, 3), e[2], e[2], ...e.slice(3)]),
      "repository",
    );
    expect(ev.classification.status).toBe("completed");
    expect(ev.facts.toolCalls).toBe(2);
    expect(ev.facts.toolCallsByName).toEqual({ Grep: 1, Read: 1 });
  });

  it("a denied built-in read is recorded and accepted", () => {
    const ev = evaluate(
      withEvents("repository", (e) => {
        e[8]!.permission_denials = [{ tool_name: "Read", tool_use_id: "toolu_02", tool_input: { file_path: "/etc/passwd" } }];
        e[5]!.message.content[0].is_error = true;
      }),
      "repository",
    );
    expect(ev.classification.status).toBe("completed");
    expect(ev.facts.permissionDenials).toEqual([{ toolName: "Read", toolUseId: "toolu_02", toolInput: { file_path: "/etc/passwd" } }]);
    expect(ev.facts.toolErrorsByName).toEqual({ Read: 1 });
    expect(ev.facts.toolCalls).toBe(2);
  });

  it("a denial of any other tool is invalid-setup", () => {
    const ev = evaluate(
      withEvents("repository", (e) => void (e[8]!.permission_denials = [{ tool_name: "Write", tool_use_id: "toolu_9", tool_input: {} }])),
      "repository",
    );
    expectOnly(ev, "permission-denial");
  });

  it("a refused doc-bridge call is invalid-setup", () => {
    const ev = evaluate(
      withEvents("mcp", (e) => {
        e[8]!.permission_denials = [{ tool_name: "mcp__doc-bridge__doc_get", tool_use_id: "toolu_02", tool_input: { id: "config/limits" } }];
      }),
      "mcp",
    );
    expectOnly(ev, "permission-denial");
    expect(ev.facts.setupProblems).toEqual(['permission denied for "mcp__doc-bridge__doc_get"; only Read, Grep and Glob denials are accepted']);
  });

  it("mcp arm: every doc-bridge call returning is_error is invalid-setup (the treatment was lost)", () => {
    const ev = evaluate(
      withEvents("mcp", (e) => {
        e[4]!.message.content[0].is_error = true;
        e[5]!.message.content[0].is_error = true;
      }),
      "mcp",
    );
    expectOnly(ev, "doc-bridge-all-errors");
    expect(ev.facts.toolErrorsByName).toEqual({ "mcp__doc-bridge__doc_search": 1, "mcp__doc-bridge__doc_get": 1 });
    expect(ev.facts.docBridgeCalls.map((c) => c.isError)).toEqual([true, true]);
  });

  it("mcp arm: one error plus one call that got no result is invalid-setup too (the stricter rule of docs/doc-bridge.md)", () => {
    // e[5] is the doc_get call's result: without it, that call was never answered.
    const ev = evaluate(
      withEvents("mcp", (e) => {
        e[4]!.message.content[0].is_error = true;
        return [...e.slice(0, 5), ...e.slice(6)];
      }),
      "mcp",
    );
    expectOnly(ev, "doc-bridge-all-errors");
    expect(ev.facts.setupProblems).toEqual(["all 1 doc-bridge tool results were errors and 1 more got no result; the treatment was lost"]);
    expect(ev.facts.docBridgeCalls.map((c) => c.isError)).toEqual([true, null]);
  });

  it("mcp arm: a success and a call that got no result is accepted (the treatment reached the agent)", () => {
    const ev = evaluate(
      withEvents("mcp", (e) => [...e.slice(0, 5), ...e.slice(6)]),
      "mcp",
    );
    expect(ev.facts.setupProblems).toEqual([]);
    expect(ev.facts.docBridgeCalls.map((c) => c.isError)).toEqual([false, null]);
  });

  it("mcp arm: partial doc-bridge errors are recorded by full tool name and accepted", () => {
    const ev = evaluate(
      withEvents("mcp", (e) => void (e[4]!.message.content[0].is_error = true)),
      "mcp",
    );
    expect(ev.classification.status).toBe("completed");
    expect(ev.facts.toolErrorsByName).toEqual({ "mcp__doc-bridge__doc_search": 1 });
    expect(ev.facts.docBridgeCalls.map((c) => c.isError)).toEqual([true, false]);
  });

  it("mcp arm: no doc-bridge call at all is not a setup problem", () => {
    const ev = evaluate(
      withEvents("mcp", (e) => [e[0], e[1], ...e.slice(6)]),
      "mcp",
    );
    expect(ev.classification.status).toBe("completed");
    expect(ev.facts.toolCalls).toBe(0);
  });

  it("repository arm: errors of built-in tools are recorded, never a setup problem", () => {
    const ev = evaluate(
      withEvents("repository", (e) => {
        e[4]!.message.content[0].is_error = true;
        e[5]!.message.content[0].is_error = true;
      }),
      "repository",
    );
    expect(ev.classification.status).toBe("completed");
    expect(ev.facts.toolErrorsByName).toEqual({ Grep: 1, Read: 1 });
  });
});

describe("hostile transcripts", () => {
  it("caps stored problems and names, and never repeats line content", () => {
    const events = baseEvents("repository");
    const calls: Event[] = [];
    for (let i = 0; i < 5000; i++) {
      calls.push({ type: "assistant", message: { id: `m${i}`, content: [toolUse(`t${i}`, `Evil${i}${"x".repeat(1000)}`, {})] } });
    }
    const garbage = Array.from({ length: 300 }, () => `not json ${ANSWER}`);
    const ev = evaluate(toText([events[0], ...calls, ...garbage, ...events.slice(1)]), "repository");
    expect(ev.classification.status).toBe("invalid-setup");
    expect(ev.facts.setupProblems.length).toBe(101);
    expect(ev.facts.setupProblems.at(-1)).toMatch(/^… and \d+ more setup problems$/);
    expect(Math.max(...ev.facts.setupProblems.map((p) => p.length))).toBeLessThan(400);
    expect(Object.keys(ev.facts.toolCallsByName).length).toBeLessThanOrEqual(257);
    expect(Object.values(ev.facts.toolCallsByName).reduce((a, b) => a + b, 0)).toBe(5002);
    expect(ev.facts.setupProblemCodes.sort()).toEqual(["not-json", "tool-outside-set"]);
    expectNoLeak(ev);
  });

  it("a cut result line does not leak the answer into the problems", () => {
    const text = withEvents("repository", (e) => {
      const line = JSON.stringify(e[8]);
      return [...e.slice(0, 8), line.slice(0, line.indexOf("SECRET") + 20)];
    });
    const ev = evaluate(text, "repository");
    expect(ev.facts.setupProblemCodes.sort()).toEqual(["last-line-not-json", "no-result"]);
    expectNoLeak(ev);
  });

  it("a model hidden under an own __proto__ key is still a foreign model", () => {
    const text = withEvents("repository", (e) => {
      const line = JSON.stringify(e[8]).replace(
        '"modelUsage":{',
        '"modelUsage":{"__proto__":{"inputTokens":1,"outputTokens":1,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"costBasis":"list"},',
      );
      return [...e.slice(0, 8), line];
    });
    const ev = evaluate(text, "repository");
    expect(ev.cost.problems).toContain('modelUsage has model "__proto__" besides the requested "claude-haiku-5-5"');
    expect(ev.classification.status).toBe("invalid-cost");
  });

  it("pushLine after finish is a bug", () => {
    const reader = new TranscriptReader(expectation("repository"));
    reader.finish();
    expect(() => reader.pushLine("{}")).toThrow(/after finish/);
  });
});

describe("usage completeness", () => {
  it("is false without modelUsage, and the cost is then invalid", () => {
    const ev = evaluate(
      withEvents("repository", (e) => void delete e[8]!.modelUsage),
      "repository",
    );
    expect(ev.facts.usageComplete).toBe(false);
    expect(ev.facts.setupProblems).toEqual([]);
    expect(ev.cost.problems).toEqual(["modelUsage is missing or malformed"]);
    expect(ev.classification.status).toBe("invalid-cost");
  });

  it("is false with malformed usage; missing counts are null, never zero, and the attempt is invalid-cost", () => {
    const ev = evaluate(
      withEvents("repository", (e) => void delete e[8]!.usage.output_tokens),
      "repository",
    );
    expect(ev.facts.usageComplete).toBe(false);
    expect(ev.facts.outputTokens).toBeNull();
    expect(ev.facts.inputTokens).toBeNull();
    // The cost itself still checks out (writes then priced at the 1-hour rate)...
    expect(ev.cost.problems).toEqual([]);
    // ...but the ledger's token counts would be unknown.
    expect(ev.classification).toEqual({ status: "invalid-cost", reason: "the result's usage or modelUsage is missing or malformed" });
  });

  it("computeCost takes the facts as they are", () => {
    const facts = readTranscript(toText(baseEvents("repository")), expectation("repository"));
    expect(computeCost({ ...facts, model: MODEL }).computedCostUsd).toBe(0.000602);
  });
});

describe("the CLI's identity in the init event", () => {
  it.each(ARMS)("%s arm: an apiKeySource other than none is invalid-setup (the study runs on the CLI's own login)", (arm) => {
    const ev = evaluate(
      withEvents(arm, (events) => void ((events[0] as any).apiKeySource = "ANTHROPIC_API_KEY")),
      arm,
    );
    expectOnly(ev, "api-key-source");
  });

  it("a claude_code_version other than the pinned one is invalid-setup when the pin is expected", () => {
    const text = withEvents("repository", (events) => void ((events[0] as any).claude_code_version = "2.1.297"));
    const facts = readTranscript(text, { ...expectation("repository"), cliVersion: "2.1.296" });
    expect(facts.setupProblemCodes).toEqual(["cli-version"]);
    expect(facts.setupProblems[0]).toMatch(/"2\.1\.297" is not the pinned "2\.1\.296"/);
    expect(readTranscript(toText(baseEvents("repository")), { ...expectation("repository"), cliVersion: "2.1.296" }).setupProblemCodes).toEqual([]);
  });
});
