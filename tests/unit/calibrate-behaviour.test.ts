/**
 * The readers of a version's behaviour (src/calibrate/behaviour.ts): what a probe's first request
 * body, stream and requests say about its `@` imports and retries, and what the adjudicator's and
 * the sessions' transcripts say about structured output and resume. The real binary's readings
 * are in the bundled profile and re-measured by tests/conformance/behaviour.test.ts.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { importRulesOf, resumeOf, retriesOf, retryProblems, structuredOutputOf, writeImportProbe, type SessionCallLines } from "../../src/calibrate/behaviour.ts";
import { activeProfile } from "../../src/profile/load.ts";
import type { ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import type { RecordedRequest } from "../../src/stand-ins/scripted-api/server.ts";

const line = (e: Record<string, unknown>) => JSON.stringify(e);
const init = (tools: string[]) => line({ type: "system", subtype: "init", tools, session_id: "s" });

describe("the import probe (contract R263)", () => {
  // contract: R263
  it("reads each form and the chain's unbroken depth from the markers the first request body holds", async () => {
    const dir = await mkdtemp(join(tmpdir(), "sr-import-probe-"));
    try {
      await writeImportProbe(join(dir, "ws"), join(dir, "home"));
      const marker = async (path: string) => /Marker (\S+)\./.exec(await readFile(join(dir, path), "utf8"))![1]!;
      const claude = await readFile(join(dir, "ws", "CLAUDE.md"), "utf8");
      expect(claude).toContain("@imports/relative.md\n@/workspace/imports/absolute.md\n@/home/agent/outside-abs.md\n@~/outside-tilde.md\n@imports/chain/level1.md\n");
      const body = [
        await marker("ws/CLAUDE.md"),
        await marker("ws/imports/relative.md"),
        await marker("home/outside-tilde.md"),
        ...(await Promise.all([1, 2, 3, 5].map((l) => marker(`ws/imports/chain/level${l}.md`)))),
      ].join(" ");
      // Level 4 missing: the chain stops at 3 although level 5's marker is there.
      expect(importRulesOf(body)).toEqual({ claudeMd: true, relative: true, absoluteInWorkspace: false, absoluteOutside: false, tilde: true, maxHops: 3 });
      expect(importRulesOf("")).toEqual({ claudeMd: false, relative: false, absoluteInWorkspace: false, absoluteOutside: false, tilde: false, maxHops: 0 });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

const retryEvent = (status: number, attempt: number, delay: number) =>
  line({ type: "system", subtype: "api_retry", attempt, max_retries: 10, retry_delay_ms: delay, error_status: status, error: "rate_limit", session_id: "s", uuid: "u" });
const messages = (n: number) => Array.from({ length: n }, (_, seq) => ({ seq, path: "/v1/messages?beta=true" }) as RecordedRequest);

describe("the retry probe (contract R263, R264)", () => {
  // contract: R263
  it("records each event between the init and the first message, the requests made, how the delay compares with retry-after, and the result", () => {
    const lines = [init(["Read"]), retryEvent(429, 1, 1000), retryEvent(529, 2, 612), line({ type: "assistant", message: { id: "m" } }), line({ type: "result", subtype: "success", is_error: false })];
    const r = retriesOf(lines, [...messages(3), { seq: 3, path: "/v1/messages/count_tokens" } as RecordedRequest]);
    expect(r).toEqual({
      served: [429, 529],
      requests: 3,
      events: [429, 529].map((status, i) => ({
        type: "system",
        subtype: "api_retry",
        errorStatus: status,
        attempt: i + 1,
        maxRetries: 10,
        fields: ["attempt", "error", "error_status", "max_retries", "retry_delay_ms", "session_id", "subtype", "type", "uuid"],
      })),
      retryAfter: "exact",
      result: { subtype: "success", isError: false },
    });
    expect(retryProblems(lines, r)).toEqual([]);
    expect(retriesOf([init([]), retryEvent(429, 1, 1157)], messages(2)).retryAfter).toBe("longer");
    expect(retriesOf([init([]), retryEvent(429, 1, 600)], messages(2)).retryAfter).toBe("shorter");
    expect(retriesOf([init([]), retryEvent(529, 1, 600)], messages(2)).retryAfter).toBe("none");
  });

  // contract: R264
  it("is a problem when the statuses are not where the runner's backoff reads them, or the run did not end in a success", () => {
    const renamed = [init([]), retryEvent(429, 1, 1000).replace('"error_status"', '"status"'), retryEvent(529, 2, 700), line({ type: "result", subtype: "success", is_error: true })];
    expect(retryProblems(renamed, retriesOf(renamed, messages(3)))).toEqual([
      "retry: the stream announced the statuses [529] where the runner reads them (system/api_retry error_status), not [429,529]: its backoff would not see a rate limit",
      "retry: after a 429 and a 529 the run ended success (is_error true), not a success",
    ]);
  });
});

const verdict = { outcome: "correct", propositions: [] };
const graderRun = (o: { tools?: string[]; output?: unknown; text?: string; call?: unknown }) => [
  init(o.tools ?? ["Glob", "Grep", "Read", "StructuredOutput"]),
  line({ type: "assistant", message: { id: "m1", content: [{ type: "tool_use", name: "StructuredOutput", input: o.call ?? verdict }] } }),
  line({
    type: "result",
    subtype: "success",
    result: o.text ?? JSON.stringify(verdict),
    ...(o.output === undefined ? { structured_output: verdict } : o.output === null ? {} : { structured_output: o.output }),
  }),
];

describe("structured output, read off the adjudicator's runs (contract R263)", () => {
  // contract: R263
  it("holds a property only when every grader run shows it", () => {
    expect(structuredOutputOf([graderRun({}), graderRun({})])).toEqual({ initTool: true, resultField: true, equalsToolInput: true, resultTextIsJson: true });
    expect(structuredOutputOf([graderRun({}), graderRun({ output: null, text: "a verdict in prose" })])).toEqual({
      initTool: true,
      resultField: false,
      equalsToolInput: false,
      resultTextIsJson: false,
    });
    expect(structuredOutputOf([graderRun({ tools: ["Read"], call: { other: 1 } })])).toEqual({ initTool: false, resultField: true, equalsToolInput: false, resultTextIsJson: true });
    expect(structuredOutputOf([])).toEqual({ initTool: false, resultField: false, equalsToolInput: false, resultTextIsJson: false });
  });
});

describe("resume, read off the sessions (contract R263)", () => {
  const scripts: ScriptInput[] = [
    {
      name: "s1",
      turns: [
        { answer: "question", usage: { input_tokens: 1000, output_tokens: 10 } },
        { answer: "done", usage: { input_tokens: 2000, output_tokens: 20, cache_read_input_tokens: 500 } },
      ],
    },
  ];
  const row = activeProfile().prices.models["claude-haiku-5-5"]!;
  const t = row.tier1;
  const own = (2000 * t.input + 20 * t.output + 500 * t.cacheRead) / 1e6;
  const first = (1000 * t.input + 10 * t.output) / 1e6;
  const requests = [
    { seq: 0, path: "/v1/messages", body: { assistantTurns: 0 }, answer: { kind: "answer", script: "s1", turn: 0, messageId: "m-start" } },
    { seq: 1, path: "/v1/messages", body: { assistantTurns: 1 }, answer: { kind: "answer", script: "s1", turn: 1, messageId: "m-resume" } },
  ] as unknown as RecordedRequest[];
  const calls = (resumeTotal: number, sessionId = "sid"): SessionCallLines[] => [
    { sessionId: "sid", mode: "start", status: "completed", lines: [line({ type: "assistant", message: { id: "m-start" } }), line({ type: "result", total_cost_usd: first, session_id: "sid" })] },
    {
      sessionId: "sid",
      mode: "resume",
      status: "completed",
      lines: [line({ type: "assistant", message: { id: "m-resume" } }), line({ type: "result", total_cost_usd: resumeTotal, session_id: sessionId })],
    },
  ];

  // contract: R263
  it("tells a cumulative total_cost_usd from a per-call one by the resume's own scripted usage priced, and checks the id and the history sent", () => {
    expect(resumeOf(calls(first + own), requests, scripts, row)).toEqual({ completed: true, sessionIdKept: true, historySent: true, cost: "cumulative" });
    expect(resumeOf(calls(own), requests, scripts, row).cost).toBe("per-call");
    expect(resumeOf(calls(own * 3), requests, scripts, row).cost).toBe("other");
    expect(resumeOf(calls(first + own, "another"), requests, scripts, row).sessionIdKept).toBe(false);
    const noHistory = requests.map((r) => ({ ...r, body: { assistantTurns: 0 } })) as unknown as RecordedRequest[];
    expect(resumeOf(calls(first + own), noHistory, scripts, row).historySent).toBe(false);
    expect(resumeOf(calls(first + own), requests, scripts, undefined).cost).toBe("other");
  });
});
