/**
 * Hostile stream-json (issue 10): more than 10,000 generated transcripts, mutations of valid ones
 * and random ones, through the runner's own reader, cost check and classifier. Whatever the
 * input: no throw, a status of seed 000, never `completed` when an independent check of the
 * seed's rules finds one broken, and bounded time. tests/unit/transcript-property.test.ts keeps
 * the oracle of exact statuses for line-level corruptions; this file is about volume and hostility.
 */
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { DOC_TOOLS, MODEL, REAL_SAMPLE_LINES, REPO_TOOLS, baseEvents, evaluate, toText, type Arm, type Event } from "./transcript-fixtures.ts";

const STATUSES = ["completed", "failed", "timed-out", "budget-exceeded", "invalid-setup", "invalid-cost"];
const READ_TOOLS = new Set(["Read", "Grep", "Glob"]);
const expectedTools = (arm: Arm): readonly string[] => (arm === "mcp" ? [...REPO_TOOLS, ...DOC_TOOLS] : [...REPO_TOOLS]);

interface Run {
  exitCode: number | null;
  timedOut: boolean;
  truncated: boolean;
}
const CLEAN: Run = { exitCode: 0, timedOut: false, truncated: false };

const isObject = (v: unknown): v is Record<string, any> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * The first rule of seed 000 that `text` visibly breaks, or null. Written from the seed, not from
 * the reader: necessary conditions of `completed` only (a transcript passing them may still fail
 * a rule not restated here, e.g. the cost cross-check).
 */
function brokenRule(text: string, arm: Arm, run: Run = CLEAN): string | null {
  if (run.exitCode !== 0) return "non-zero exit";
  if (run.timedOut) return "timeout";
  if (run.truncated) return "output cut";
  const events: Record<string, any>[] = [];
  for (const line of text.split("\n")) {
    if (line === "") continue;
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch {
      return "a line that is not JSON";
    }
    if (!isObject(v) || typeof v.type !== "string") return "a line that is not an event object";
    events.push(v);
  }
  const inits = events.filter((e) => e.type === "system" && e.subtype === "init");
  const results = events.filter((e) => e.type === "result");
  if (inits.length !== 1) return `${inits.length} init events`;
  if (results.length !== 1) return `${results.length} result events`;
  if (events.at(-1) !== results[0]) return "result not last";

  const init = inits[0]!;
  if (init.model !== MODEL) return "init model";
  if (init.apiKeySource !== undefined && init.apiKeySource !== "none") return "apiKeySource";
  const expected = expectedTools(arm);
  if (!Array.isArray(init.tools) || init.tools.length !== expected.length || !expected.every((t) => init.tools.includes(t))) return "init tools";
  const servers = init.mcp_servers;
  if (!Array.isArray(servers)) return "mcp_servers";
  if (arm === "repository" && servers.length !== 0) return "a server in the repository arm";
  if (arm === "mcp" && !(servers.length === 1 && isObject(servers[0]) && servers[0].name === "doc-bridge" && servers[0].status === "connected")) return "doc-bridge not connected";

  for (const e of events) {
    if (e.type !== "assistant" || !isObject(e.message) || !Array.isArray(e.message.content)) continue;
    for (const block of e.message.content) {
      if (!isObject(block) || typeof block.type !== "string" || typeof block.name !== "string") continue;
      if ((block.type === "tool_use" || block.type.endsWith("_tool_use")) && !expected.includes(block.name)) return "tool outside the set";
    }
  }

  const r = results[0]!;
  if (r.subtype !== "success") return "subtype";
  if (r.is_error !== false) return "is_error";
  if (typeof r.result !== "string") return "no answer";
  if (typeof r.total_cost_usd !== "number" || !Number.isFinite(r.total_cost_usd)) return "no reported cost";
  if (!isObject(r.modelUsage) || Object.keys(r.modelUsage).length === 0 || Object.keys(r.modelUsage).some((m) => m !== MODEL)) return "modelUsage";
  if (!Array.isArray(r.permission_denials)) return "permission_denials";
  for (const d of r.permission_denials) if (isObject(d) && typeof d.tool_name === "string" && !READ_TOOLS.has(d.tool_name)) return "denied non-read tool";
  return null;
}

let generated = 0;
let slowestMs = 0;
/** How many transcripts broke a rule, and how many were completed: both must be common. */
let brokenCount = 0;
let completedCount = 0;

/** The property every transcript must have, whatever it is. */
function judge(text: string, arm: Arm, run: Run = CLEAN): void {
  generated++;
  const t0 = performance.now();
  const ev = evaluate(text, arm, run);
  slowestMs = Math.max(slowestMs, performance.now() - t0);
  expect(STATUSES).toContain(ev.classification.status);
  const broken = brokenRule(text, arm, run);
  if (broken !== null) brokenCount++;
  if (ev.classification.status === "completed") completedCount++;
  if (broken !== null) expect(ev.classification.status, `rule broken: ${broken}`).not.toBe("completed");
  // Problems and reasons describe; they never carry the private answer (a short one may occur by chance).
  if (ev.facts.answer && ev.facts.answer.length >= 16) {
    for (const p of [...ev.facts.setupProblems, ev.classification.reason]) expect(p).not.toContain(ev.facts.answer);
  }
}

const arm = fc.constantFrom<Arm>("repository", "mcp");
const runArb: fc.Arbitrary<Run> = fc.oneof(
  { weight: 8, arbitrary: fc.constant(CLEAN) },
  { weight: 1, arbitrary: fc.record({ exitCode: fc.constantFrom(0, 1, 137, null), timedOut: fc.boolean(), truncated: fc.boolean() }) },
);

// --- mutations of valid transcripts ------------------------------------------------------

type Mutation =
  | { kind: "set"; line: number; path: number[]; value: unknown }
  | { kind: "delete"; line: number; path: number[] }
  | { kind: "drop" | "dup"; line: number }
  | { kind: "swap"; line: number; with: number }
  | { kind: "insert"; line: number; text: string };

type TextEdit = { kind: "bytes"; line: number; pos: number; del: number; ins: string } | { kind: "cut"; at: number } | { kind: "crlf" };

const hostileString = fc.oneof(fc.string({ maxLength: 20, unit: "binary" }), fc.constantFrom("\u0000", "\ud800", "\u2028", "__proto__", "constructor", "}{", '"', "\\", "\r"));
const jsonish = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  hostileString,
  fc.constantFrom(MODEL, "success", "connected", "none", "Read", "Bash", "mcp__doc-bridge__doc_search", -1, 1e308, Number.MAX_SAFE_INTEGER + 2, 0.1 + 0.2),
);
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant("set" as const), line: fc.nat(20), path: fc.array(fc.nat(40), { minLength: 1, maxLength: 5 }), value: jsonish }),
  fc.record({ kind: fc.constant("delete" as const), line: fc.nat(20), path: fc.array(fc.nat(40), { minLength: 1, maxLength: 5 }) }),
  fc.record({ kind: fc.constantFrom("drop" as const, "dup" as const), line: fc.nat(20) }),
  fc.record({ kind: fc.constant("swap" as const), line: fc.nat(20), with: fc.nat(20) }),
  fc.record({
    kind: fc.constant("insert" as const),
    line: fc.nat(20),
    text: fc.oneof(fc.json({ maxDepth: 2 }), hostileString, fc.constantFrom('{"type":"result"}', '{"type":"system","subtype":"init"}', "{}", "null", "[]", "   ")),
  }),
);
const textEdit: fc.Arbitrary<TextEdit> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("bytes" as const), line: fc.nat(20), pos: fc.nat(5000), del: fc.nat(4), ins: fc.string({ maxLength: 4, unit: "binary" }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("cut" as const), at: fc.nat(20_000) }) },
  { weight: 1, arbitrary: fc.constant({ kind: "crlf" as const }) },
);

/** Walks `path` (indexes into the keys met on the way) and returns the container and key it ends at. */
function locate(root: Event, path: readonly number[]): { node: Record<string, any>; key: string } | undefined {
  let node: any = root;
  for (let d = 0; d < path.length; d++) {
    if (typeof node !== "object" || node === null) return undefined;
    const keys = Object.keys(node);
    if (keys.length === 0) return undefined;
    const key = keys[path[d]! % keys.length]!;
    if (d === path.length - 1) return { node, key };
    node = node[key];
  }
  return undefined;
}

function mutate(events: Array<Event | string>, m: Mutation): void {
  if (events.length === 0 && m.kind !== "insert") return;
  const i = events.length === 0 ? 0 : m.line % events.length;
  switch (m.kind) {
    case "set":
    case "delete": {
      const target = events[i];
      if (typeof target !== "object") return;
      const at = locate(target, m.path);
      if (!at) return;
      if (m.kind === "set") at.node[at.key] = m.value;
      else if (Array.isArray(at.node)) at.node.splice(Number(at.key), 1);
      else delete at.node[at.key];
      return;
    }
    case "drop":
      events.splice(i, 1);
      return;
    case "dup":
      events.splice(i, 0, structuredClone(events[i]!));
      return;
    case "swap": {
      const j = m.with % events.length;
      [events[i], events[j]] = [events[j]!, events[i]!];
      return;
    }
    case "insert":
      events.splice(events.length === 0 ? 0 : m.line % (events.length + 1), 0, m.text);
  }
}

function applyTextEdit(text: string, e: TextEdit): string {
  if (e.kind === "cut") return text.slice(0, e.at % (text.length + 1));
  if (e.kind === "crlf") return text.replace(/\n/g, "\r\n");
  const lines = text.split("\n");
  const i = e.line % lines.length;
  const l = lines[i]!;
  const p = e.pos % (l.length + 1);
  lines[i] = l.slice(0, p) + e.ins + l.slice(p + e.del);
  return lines.join("\n");
}

const realSample = (): Array<Event | string> => REAL_SAMPLE_LINES.map((l) => JSON.parse(l) as Event);

describe("mutations of valid transcripts", () => {
  it("6,000 structural mutations (fields set or deleted, lines dropped, duplicated, swapped, inserted): no throw, never completed against a broken rule", () => {
    fc.assert(
      fc.property(arm, fc.boolean(), fc.array(mutation, { minLength: 1, maxLength: 6 }), runArb, (a, fromSample, ms, run) => {
        const events: Array<Event | string> = fromSample && a === "repository" ? realSample() : baseEvents(a);
        for (const m of ms) mutate(events, m);
        judge(toText(events), a, run);
      }),
      { numRuns: 6000 },
    );
  });

  it("2,000 mutations then byte edits, cuts and CRLF line ends: no throw, never completed against a broken rule", () => {
    fc.assert(
      fc.property(arm, fc.array(mutation, { maxLength: 3 }), fc.array(textEdit, { minLength: 1, maxLength: 4 }), (a, ms, edits) => {
        const events: Array<Event | string> = baseEvents(a);
        for (const m of ms) mutate(events, m);
        let text = toText(events);
        for (const e of edits) text = applyTextEdit(text, e);
        judge(text, a);
      }),
      { numRuns: 2000 },
    );
  });

  it("the untouched bases are completed, so the mutations above start from a transcript that passes", () => {
    for (const a of ["repository", "mcp"] as const) {
      const text = toText(baseEvents(a));
      expect(brokenRule(text, a)).toBeNull();
      expect(evaluate(text, a).classification.status).toBe("completed");
    }
  });
});

// --- random transcripts ------------------------------------------------------------------

const toolName = fc.constantFrom(...REPO_TOOLS, ...DOC_TOOLS, "Bash", "Write", "WebFetch", "mcp__other__x", "");
const initEvent = fc.record(
  {
    type: fc.constant("system"),
    subtype: fc.constantFrom("init", "init", "init", "status"),
    model: fc.constantFrom(MODEL, MODEL, MODEL, "claude-sonnet-5", ""),
    tools: fc.oneof({ weight: 3, arbitrary: fc.constantFrom([...REPO_TOOLS], [...REPO_TOOLS, ...DOC_TOOLS]) }, { weight: 1, arbitrary: fc.array(toolName, { maxLength: 8 }) }),
    mcp_servers: fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom([], [{ name: "doc-bridge", status: "connected" }]) },
      { weight: 1, arbitrary: fc.array(fc.record({ name: fc.constantFrom("doc-bridge", "other"), status: fc.constantFrom("connected", "failed", "pending") }), { maxLength: 3 }) },
    ),
    apiKeySource: fc.constantFrom("none", "none", "ANTHROPIC_API_KEY", "/login managed key"),
    claude_code_version: fc.constantFrom("2.1.296", "2.1.288"),
  },
  { requiredKeys: ["type", "subtype", "model", "tools", "mcp_servers"] },
);
const usage = fc.record({ input_tokens: fc.nat(5000), output_tokens: fc.nat(100), cache_creation_input_tokens: fc.nat(500), cache_read_input_tokens: fc.nat(500) });
const block = fc.oneof(
  fc.record({ type: fc.constant("text"), text: fc.string({ maxLength: 20 }) }),
  fc.record({ type: fc.constantFrom("tool_use", "server_tool_use", "mcp_tool_use"), id: fc.constantFrom("toolu_01", "toolu_02", "toolu_03"), name: toolName, input: fc.jsonValue({ maxDepth: 2 }) }),
);
const assistantEvent = fc.record({
  type: fc.constant("assistant"),
  message: fc.record(
    {
      id: fc.constantFrom("msg_01", "msg_02", "msg_03"),
      type: fc.constant("message"),
      role: fc.constant("assistant"),
      model: fc.constant(MODEL),
      content: fc.array(block, { minLength: 1, maxLength: 2 }),
      usage,
    },
    { requiredKeys: ["id", "content"] },
  ),
});
const userEvent = fc.record({
  type: fc.constant("user"),
  message: fc.record({
    role: fc.constant("user"),
    content: fc.array(
      fc.record({ type: fc.constant("tool_result"), tool_use_id: fc.constantFrom("toolu_01", "toolu_02", "toolu_09"), content: fc.string({ maxLength: 10 }), is_error: fc.boolean() }),
      { maxLength: 2 },
    ),
  }),
});
const modelUsage = fc.oneof(
  { weight: 4, arbitrary: fc.constant(undefined) },
  {
    weight: 1,
    arbitrary: fc
      .record({ inputTokens: fc.nat(5000), outputTokens: fc.nat(100), cacheReadInputTokens: fc.nat(700), cacheCreationInputTokens: fc.nat(500), costBasis: fc.constantFrom("list", "unknown") })
      .map((u) => ({ [MODEL]: u })),
  },
  { weight: 1, arbitrary: fc.constantFrom({}, { "claude-haiku-4-5": { inputTokens: 1, outputTokens: 1, cacheReadInputTokens: 0, cacheCreationInputTokens: 0 } }) },
);
/** Mostly `undefined` (keep the measured value), sometimes a change drawn from `arb`. */
const keepOr = <T>(arb: fc.Arbitrary<T>) => fc.oneof({ weight: 6, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: arb });
/** Changes to the measured init event. */
const initChanges = fc.record({
  subtype: keepOr(fc.constantFrom("status", "init ")),
  model: keepOr(fc.constantFrom("claude-sonnet-5", "", null)),
  tools: keepOr(fc.oneof(fc.constantFrom([...REPO_TOOLS], [...REPO_TOOLS, ...DOC_TOOLS], [...REPO_TOOLS, "Read"]), fc.array(toolName, { maxLength: 8 }))),
  mcp_servers: keepOr(
    fc.oneof(
      fc.constantFrom([], [{ name: "doc-bridge", status: "connected" }], [{ name: "doc-bridge", status: "failed" }]),
      fc.array(fc.record({ name: fc.constantFrom("doc-bridge", "other"), status: fc.constantFrom("connected", "pending") }), { maxLength: 3 }),
    ),
  ),
  apiKeySource: keepOr(fc.constantFrom("ANTHROPIC_API_KEY", "/login managed key", 0)),
});
/** Changes to the measured result event. */
const resultChanges = fc.record({
  subtype: keepOr(fc.constantFrom("error_max_budget_usd", "error_during_execution", "Success")),
  is_error: keepOr(fc.constantFrom(true, "false", null)),
  result: keepOr(fc.constantFrom(null, 42, "")),
  total_cost_usd: keepOr(fc.oneof(fc.double({ min: 0, max: 0.01, noNaN: true }), fc.constantFrom(0, -1, null, "0.000602"))),
  modelUsage: keepOr(modelUsage.filter((m) => m !== undefined)),
  permission_denials: keepOr(fc.array(fc.record({ tool_name: toolName, tool_use_id: fc.constant("toolu_01"), tool_input: fc.constant({}) }), { maxLength: 2 })),
});
const noise = fc.oneof(
  fc.constant({ type: "rate_limit_event", rate_limit_info: { status: "allowed" } }),
  userEvent,
  assistantEvent.map((e) => ({ ...e, message: { ...e.message, id: "msg_noise", usage: undefined } })),
  fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
);
const anyEvent = fc.oneof(initEvent, assistantEvent, userEvent, noise, fc.constant({ type: "result", subtype: "success", is_error: false }));

describe("random transcripts", () => {
  it("2,000 transcripts in the CLI's shape (the measured events with random fields changed and random events between them): never completed against a broken rule", () => {
    let completed = 0;
    fc.assert(
      fc.property(arm, initChanges, fc.array(fc.tuple(fc.nat(8), noise), { maxLength: 4 }), resultChanges, (a, initChanged, inserts, changes) => {
        const base = baseEvents(a);
        const init = { ...base[0]! };
        for (const [k, v] of Object.entries(initChanged)) if (v !== undefined) init[k] = v;
        const middle: Event[] = base.slice(1, 8);
        for (const [at, e] of inserts) middle.splice(at % (middle.length + 1), 0, e);
        const result = { ...base[8]! };
        for (const [k, v] of Object.entries(changes)) if (v !== undefined) result[k] = v;
        const text = toText([init, ...middle, result]);
        judge(text, a);
        if (evaluate(text, a).classification.status === "completed") completed++;
      }),
      { numRuns: 2000 },
    );
    // The generator reaches the accepting path too, so the property above is not vacuous.
    expect(completed).toBeGreaterThan(50);
  });

  it("1,000 sequences of random events, random byte strings and random JSON lines: no throw, never completed against a broken rule", () => {
    fc.assert(
      fc.property(
        arm,
        fc.oneof(
          fc.array(anyEvent, { maxLength: 12 }).map(toText),
          fc.string({ maxLength: 2000, unit: "binary" }),
          fc.array(fc.json({ maxDepth: 4 }), { maxLength: 20 }).map((ls) => ls.join("\n")),
          fc.uint8Array({ maxLength: 2000 }).map((b) => Buffer.from(b).toString("utf8")),
        ),
        (a, text) => judge(text, a),
      ),
      { numRuns: 1000 },
    );
  });
});

describe("pathological transcripts", () => {
  const time = (f: () => void) => {
    const t0 = performance.now();
    f();
    return performance.now() - t0;
  };
  const cases: Array<[string, () => string]> = [
    ["one 4 MiB line", () => `{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"${"x".repeat(4 * 1024 * 1024)}"}]}}\n`],
    ["a million nested arrays inside an event", () => `{"type":"assistant","x":${"[".repeat(1_000_000)}${"]".repeat(1_000_000)}}\n`],
    [
      "a million nested arrays as a tool input, after a valid init",
      () =>
        toText([baseEvents("repository")[0]]) +
        `{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"t","name":"Read","input":${"[".repeat(1_000_000)}${"]".repeat(1_000_000)}}]}}\n`,
    ],
    ["100,000 lines of unknown events", () => '{"type":"rate_limit_event"}\n'.repeat(100_000)],
    [
      "50,000 distinct tool calls outside the set",
      () =>
        toText([
          baseEvents("repository")[0],
          ...Array.from({ length: 50_000 }, (_, i) => ({ type: "assistant", message: { id: `m${i}`, content: [{ type: "tool_use", id: `t${i}`, name: `Tool${i}`, input: {} }] } })),
        ]),
    ],
    ["100,000 result events", () => toText(Array.from({ length: 100_000 }, () => baseEvents("repository")[8]))],
    ["200,000 lines that are not JSON", () => "{\n".repeat(200_000)],
  ];
  it("a 4 MiB line, a million nested arrays, 100,000 unknown events, 50,000 tool calls, 100,000 results, 200,000 broken lines: no throw, not completed, each under 10 s", () => {
    for (const [name, make] of cases) {
      const text = make();
      let status = "";
      const ms = time(() => {
        status = evaluate(text, "repository").classification.status;
      });
      generated++;
      expect(STATUSES, name).toContain(status);
      expect(status, name).not.toBe("completed");
      expect(ms, name).toBeLessThan(10_000);
    }
  }, 120_000);
});

afterAll(() => {
  // Issue 10: at least 10,000 generated transcripts, each judged in bounded time.
  expect(generated).toBeGreaterThanOrEqual(10_000);
  expect(slowestMs).toBeLessThan(2_000);
  // Neither side of the property is vacuous.
  expect(brokenCount).toBeGreaterThan(2_000);
  expect(completedCount).toBeGreaterThan(500);
});
