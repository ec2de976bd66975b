import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { hashExport, planExport } from "../../src/export/export.ts";
import { LedgerSchema, type Ledger } from "../../src/ledger/schema.ts";
import { SYSTEM_PROMPT } from "../../src/transport/http/tool-loop.ts";
import { buildPrompt } from "../../src/claude/args.ts";
import { bodies, DOC_SEARCH, MODEL, pilotScripts, prepareCorpus, PRICES, runHttp, TEST_KEY, usage, type Corpus } from "../support/http-fixture.ts";
import type { ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import { requestTokenBound } from "../../src/cost/usage.ts";
import { callCeiling, usageCostUsd } from "../../src/transport/http/pricing.ts";

// runHttpStudy against the scripted Messages API on loopback, over the demo corpus at its pins
// (real git) with the reference doc-bridge server: the protocol's outcomes and the money.

let c: Corpus;
beforeAll(async () => {
  c = await prepareCorpus("run");
}, 120_000);
afterAll(() => c?.cleanup());

const REPO_TOOLS = ["list_files", "read_file", "search_files"];
const DOC_TOOLS = ["mcp__doc-bridge__doc_get", DOC_SEARCH, "mcp__doc-bridge__handoff_resolve"];
/** The first attempt of the pilot (repository arm) with these turns; the second never runs. */
const firstAttempt = (turns: ScriptInput["turns"], extra: Partial<ScriptInput> = {}): ScriptInput[] => [
  { name: "repository", turns, ...extra },
  { name: "doc-bridge", tool: DOC_SEARCH, turns: [{ answer: "unused", usage: usage() }] },
];
const summaryOf = (stdout: string) => JSON.parse(stdout) as Record<string, any>;

describe("runHttpStudy: completed attempts", () => {
  it("runs the pilot in both arms with the script's tool calls, real tool results, and the ledger's arithmetic", async () => {
    const r = await runHttp(c, pilotScripts());
    expect(r.code, r.stderr).toBe(0);
    const summary = summaryOf(r.stdout);
    expect(summary).toMatchObject({
      status: "awaiting-adjudication",
      statusReason: null,
      transport: "http",
      model: MODEL,
      attempts: { planned: 2, run: 2, byStatus: { completed: 2 } },
      usage: { inputTokens: 12300, outputTokens: 245, cacheCreationInputTokens: 0, cacheReadInputTokens: 0, toolCalls: 5 },
      usageComplete: true,
      cumulativeCapExceeded: false,
    });
    // Measured usage at the upper prices (1 and 5 USD per million): 0.00665 + 0.006875.
    expect(summary.spentUsd).toBeCloseTo(0.013525, 12);
    expect(summary.extrapolatedFullRunUsd).toBe(Number((summary.spentUsd * 18).toFixed(6)));

    const l = r.ledger;
    expect(l).toMatchObject({ transport: "http", image: null, cliVersion: null, expectedCliVersion: null, isolation: "client-side-tools", status: "awaiting-adjudication" });
    expect(l.prices).toEqual({ [MODEL]: { upper: { input: 1, output: 5 } } });
    expect(l.budget).toMatchObject({ attemptBudgetUsd: null, reservedUsd: 0, cumulativeCapExceeded: false });
    expect(l.docBridge?.denyList).toEqual(["mcp__doc-bridge__gate_status", "mcp__doc-bridge__memory_promoteDraft"]);

    const [repo, mcp] = l.observations;
    const plan = await planExport({ repoDir: c.roots.get("ledgerlite")!, pin: repo!.pin, answerKeys: c.loaded.manifest.answerKeys?.ledgerlite ?? [] });
    expect(repo).toMatchObject({
      transport: "http",
      arm: "repository",
      status: "completed",
      phase: "settled",
      attemptBudgetUsd: null,
      tools: REPO_TOOLS,
      mcpServers: [],
      toolCallsByName: { search_files: 1, read_file: 1, list_files: 1 },
      toolCalls: 3,
      numTurns: 3,
      inputTokens: 6000,
      outputTokens: 130,
      usageComplete: true,
      cliSubtype: null,
      isError: null,
      cliReportedCostUsd: null,
      containerId: null,
      answer: "Half to even, in roundMinor (src/money.js).",
      exportHash: await hashExport(c.roots.get("ledgerlite")!, plan.files),
      // The demo corpus commits both; the http transport's tools show them too.
      instructionFiles: ["AGENTS.md", "CLAUDE.md"],
    });
    expect(mcp!.instructionFiles).toEqual(["AGENTS.md", "CLAUDE.md"]);
    expect(repo!.chargedUsd).toBeCloseTo(0.00665, 12);
    expect(repo!.computedCostUsd).toBe(repo!.chargedUsd);
    expect(repo!.calls!.map((k) => [k.turn, k.outcome, k.inputTokens, k.outputTokens])).toEqual([
      [1, "message", 1500, 40],
      [2, "message", 1900, 60],
      [3, "message", 2600, 30],
    ]);
    for (const k of repo!.calls!) {
      expect(k.inputCeilingTokens).toBe(requestTokenBound(k.requestBytes, 1024).promptTokens);
      expect(k.reservationUsd).toBeGreaterThan(k.chargedUsd!);
    }
    expect(mcp).toMatchObject({
      arm: "mcp",
      status: "completed",
      tools: [...DOC_TOOLS, ...REPO_TOOLS].sort(),
      mcpServers: [{ name: "doc-bridge", status: "connected" }],
      toolCallsByName: { [DOC_SEARCH]: 1, "mcp__doc-bridge__doc_get": 1 },
      toolErrorsByName: {},
    });
    // Called under their API names, answered under their exact MCP names.
    expect((mcp!.mcp as { toolCalls: Array<{ name: string; isError: boolean }> }).toolCalls.map((t) => [t.name, t.isError])).toEqual([
      ["doc.search", false],
      ["doc.get", false],
    ]);

    // What the model was sent: the protocol's request, the same prompt and system in both arms,
    // and the tools' real results from the pinned blobs and the doc-bridge server.
    const sent = bodies(r.api);
    expect(sent).toHaveLength(6);
    for (const b of sent) {
      expect(b).toMatchObject({ model: MODEL, max_tokens: 1024, temperature: 0, system: SYSTEM_PROMPT });
      expect(b.messages[0]).toEqual({ role: "user", content: buildPrompt(c.loaded.manifest.tasks[0]!) });
      expect(b).not.toHaveProperty("stream");
    }
    expect(sent.slice(0, 3).every((b) => b.tools.every((t: { name: string }) => REPO_TOOLS.includes(t.name)))).toBe(true);
    expect(sent[3]!.tools.map((t: { name: string }) => t.name).sort()).toEqual([...DOC_TOOLS, ...REPO_TOOLS].sort());
    // The server's own input schema and description, minus the `$schema` dialect marker.
    const docSearch = sent[3]!.tools.find((t: { name: string }) => t.name === DOC_SEARCH);
    expect(docSearch).toMatchObject({ description: "Search the project's documentation index (built at HEAD).", input_schema: { type: "object", required: ["query"] } });
    expect(docSearch.input_schema).not.toHaveProperty("$schema");
    const results = r.api.requests.map((q) => q.body!.newestToolResults.map((t) => t.content).join("\n"));
    expect(results[1]).toContain("src/money.js:4: export function roundMinor(value) {");
    expect(results[2]).toContain("     4\texport function roundMinor(value) {");
    expect(results[2]).toContain("2 files under docs/\ndocs/periods.md\ndocs/rounding.md");
    expect(results[4]).toContain(`"pin":"${mcp!.pin}"`);
    expect(results[5]).toContain("banker's rounding");
    expect(r.api.requests.every((q) => q.auth.apiKey && q.headers["x-api-key"] === "[redacted]")).toBe(true);

    // Nothing private on the outputs; the key nowhere.
    for (const text of [r.stdout, r.stderr]) {
      expect(text).not.toContain("Half to even");
      expect(text).not.toContain(TEST_KEY);
    }
    expect(await readFile(r.output, "utf8")).not.toContain(TEST_KEY);
  }, 60_000);
});

describe("runHttpStudy: the protocol's other outcomes", () => {
  it("a lost reply (connection reset) keeps its reservation charged, marks usage incomplete and stops the run without retry", async () => {
    const r = await runHttp(c, firstAttempt([{ toolCalls: [{ name: "list_files", input: {} }], usage: usage(1500, 40) }, { fault: "connection-reset" }, { answer: "x", usage: usage() }]));
    expect(r.code).toBe(1);
    expect(r.api.requests).toHaveLength(2);
    const l = r.ledger;
    expect(l.status).toBe("blocked");
    expect(l.observations).toHaveLength(1);
    const o = l.observations[0]!;
    expect(o).toMatchObject({ status: "failed", usageComplete: false, inputTokens: 1500, outputTokens: 40, answer: null });
    const lost = o.calls![1]!;
    expect(lost).toMatchObject({ outcome: "lost", usageComplete: false, inputTokens: null, httpStatus: null });
    expect(lost.chargedUsd).toBe(lost.reservationUsd);
    expect(o.chargedUsd).toBeCloseTo(0.0017 + lost.reservationUsd, 12);
    expect(l.budget.spentUsd).toBe(o.chargedUsd);
    expect(l.statusReason).toMatch(/ended failed: turn 2: the request got no complete reply: fetch failed \(.+\); the request's reservation stays charged and it is not retried/);
    expect(summaryOf(r.stdout)).toMatchObject({ status: "blocked", usageComplete: false, attempts: { run: 1, byStatus: { failed: 1 } } });
  }, 60_000);

  it("usage above the call's ceiling is budget-exceeded, charged at least the measured cost; passing the cap is recorded", async () => {
    const over = await runHttp(
      c,
      firstAttempt([
        { toolCalls: [{ name: "list_files", input: {} }], usage: usage(40_000, 40) },
        { answer: "x", usage: usage() },
      ]),
    );
    expect(over.code).toBe(1);
    const o = over.ledger.observations[0]!;
    expect(o).toMatchObject({ status: "budget-exceeded", usageComplete: true, inputTokens: 40_000 });
    expect(o.calls![0]!.inputTokens).toBeGreaterThan(o.calls![0]!.inputCeilingTokens);
    // 40,000 x 1 + 40 x 5 micro-USD, above the reservation.
    expect(o.chargedUsd).toBeCloseTo(0.0402, 12);
    expect(o.chargedUsd!).toBeGreaterThan(o.calls![0]!.reservationUsd);
    expect(over.api.requests).toHaveLength(1);
    expect(over.ledger.budget.cumulativeCapExceeded).toBe(false);

    const cap = await runHttp(c, firstAttempt([{ answer: "x", usage: usage(2_000_000, 10) }]));
    expect(cap.code).toBe(1);
    expect(cap.ledger.observations[0]!.status).toBe("budget-exceeded");
    expect(cap.ledger.budget.cumulativeCapExceeded).toBe(true);
    expect(cap.ledger.budget.spentUsd).toBeGreaterThan(1);
    expect(summaryOf(cap.stdout)).toMatchObject({ cumulativeCapExceeded: true, status: "blocked" });
  }, 60_000);

  // contract: R30
  it("cache tokens a reply reports are priced, not refused; cache writes that take the cost past the reservation are budget-exceeded", async () => {
    const read = { input_tokens: 1500, output_tokens: 40, cache_read_input_tokens: 300, cache_creation_input_tokens: 200 };
    const r = await runHttp(
      c,
      firstAttempt([
        { toolCalls: [{ name: "list_files", input: {} }], usage: read },
        { answer: "x", usage: usage(2000, 30) },
      ]),
    );
    expect(r.code, r.stderr).toBe(0);
    const o = r.ledger.observations[0]!;
    expect(o).toMatchObject({ status: "completed", usageComplete: true, inputTokens: 1500 + 2000, cacheReadInputTokens: 300, cacheCreationInputTokens: 200 });
    const [first, second] = o.calls!;
    expect(first).toMatchObject({ outcome: "message", inputTokens: 1500, cacheReadInputTokens: 300, cacheCreationInputTokens: 200 });
    const firstUsage = { inputTokens: 1500, outputTokens: 40, cacheReadInputTokens: 300, cacheWrite5mInputTokens: 200, cacheWrite1hInputTokens: 0 };
    expect(first!.chargedUsd).toBe(usageCostUsd(firstUsage, PRICES));
    expect(first!.chargedUsd).toBeGreaterThan(usageCostUsd({ ...firstUsage, cacheReadInputTokens: 0, cacheWrite5mInputTokens: 0 }, PRICES));
    expect(o.chargedUsd).toBeCloseTo(first!.chargedUsd! + second!.chargedUsd!, 12);
    expect(o.computedCostUsd).toBe(o.chargedUsd);

    // Cache writes within the prompt ceiling whose cost (twice the input price) passes the reservation.
    const writes = 10_000;
    const over = await runHttp(c, firstAttempt([{ answer: "x", usage: { input_tokens: 0, output_tokens: 10, cache_creation_input_tokens: writes } }]));
    expect(over.code).toBe(1);
    const ob = over.ledger.observations[0]!;
    const call = ob.calls![0]!;
    expect(writes).toBeLessThanOrEqual(call.inputCeilingTokens);
    expect(call.reservationUsd).toBe(callCeiling(call.requestBytes, PRICES).reservationUsd);
    expect(call.chargedUsd).toBe(usageCostUsd({ inputTokens: 0, outputTokens: 10, cacheReadInputTokens: 0, cacheWrite5mInputTokens: writes, cacheWrite1hInputTokens: 0 }, PRICES));
    expect(call.chargedUsd!).toBeGreaterThan(call.reservationUsd);
    expect(ob).toMatchObject({ status: "budget-exceeded", cacheCreationInputTokens: writes });
    expect(over.ledger.statusReason).toMatch(/passed the call's reservation/);
  }, 60_000);

  it("a reply without a usage field is invalid-cost; the call's reservation stays charged", async () => {
    const r = await runHttp(c, firstAttempt([{ toolCalls: [{ name: "list_files", input: {} }], usage: usage(1500, 40) }, { fault: "missing-usage" }, { answer: "x", usage: usage() }]));
    expect(r.code).toBe(1);
    const o = r.ledger.observations[0]!;
    expect(o).toMatchObject({ status: "invalid-cost", usageComplete: false, inputTokens: 1500, answer: null });
    expect(o.costProblem).toBe("turn 2: the reply has no usage field; the call's reservation stays charged");
    expect(o.calls![1]).toMatchObject({ outcome: "invalid-usage", httpStatus: 200, problem: "the reply has no usage field" });
    expect(o.calls![1]!.chargedUsd).toBe(o.calls![1]!.reservationUsd);
    expect(r.api.requests).toHaveLength(2);
  }, 60_000);

  it("more than 20 tool calls in a turn fail the attempt without running one", async () => {
    const calls = Array.from({ length: 21 }, (_, i) => ({ name: "read_file", input: { path: `f${i}` } }));
    const r = await runHttp(
      c,
      firstAttempt([
        { toolCalls: calls, usage: usage() },
        { answer: "x", usage: usage() },
      ]),
    );
    expect(r.code).toBe(1);
    const o = r.ledger.observations[0]!;
    expect(o).toMatchObject({ status: "failed", toolCalls: 21, toolCallsByName: { read_file: 21 }, toolErrorsByName: {}, usageComplete: true });
    expect(r.ledger.statusReason).toMatch(/21 tool calls, more than the limit of 20 per turn; none was run/);
    expect(r.api.requests).toHaveLength(1);
  }, 60_000);

  it("a model that still wants tools after eight turns fails: no ninth call is made", async () => {
    const r = await runHttp(c, firstAttempt([{ toolCalls: [{ name: "list_files", input: {} }], usage: usage() }], { neverEnd: true }));
    expect(r.code).toBe(1);
    expect(r.api.requests).toHaveLength(8);
    const o = r.ledger.observations[0]!;
    expect(o).toMatchObject({ status: "failed", numTurns: 8, toolCalls: 8, usageComplete: true });
    expect(o.calls).toHaveLength(8);
    expect(r.ledger.statusReason).toMatch(/turn 8: the model asked for tools again, but a 9th turn would pass the limit of 8 turns/);
  }, 60_000);

  it("the deadline is checked between turns: once passed the attempt is timed-out and nothing more is sent", async () => {
    let t = 0;
    // Each reading of the clock is 70 s later: the deadline passes after the second turn.
    const r = await runHttp(c, firstAttempt([{ toolCalls: [{ name: "list_files", input: {} }], usage: usage() }], { neverEnd: true }), { now: () => (t += 70_000) });
    expect(r.code).toBe(1);
    const o = r.ledger.observations[0]!;
    expect(o.status).toBe("timed-out");
    // Readings at 70 (start), 140 (turn 1), 210 (its tool), 280 (turn 2), 350 (its tool), 420 s: turn 3 never
    // starts; the wall time is read once more (490 - 70 s).
    expect(r.api.requests).toHaveLength(2);
    expect(o).toMatchObject({ usageComplete: true, numTurns: 2, wallTimeMs: 420_000 });
    expect(r.ledger.statusReason).toMatch(/ended timed-out: the 300-second deadline passed before turn 3$/);
  }, 60_000);

  it("a request outlasting the deadline is abandoned: timed-out, its reservation charged and on disk before the request left", async () => {
    let during: Ledger | undefined;
    const r = await runHttp(c, firstAttempt([{ fault: "hang" }, { answer: "x", usage: usage() }]), {
      deadlineMs: 1500,
      onStart: ({ api, output }) => {
        const poll = setInterval(async () => {
          if (api.requests.length === 1 && !during) {
            during = LedgerSchema.parse(JSON.parse(await readFile(output, "utf8")));
            clearInterval(poll);
          }
        }, 20);
      },
    });
    expect(r.code).toBe(1);
    // While the request hung, the ledger already held its reservation as spent.
    const open = during!.observations[0]!;
    expect(open.phase).toBe("running");
    expect(open.calls).toHaveLength(1);
    expect(open.calls![0]!.chargedUsd).toBeNull();
    expect(during!.budget.spentUsd).toBe(open.calls![0]!.reservationUsd);
    expect(during!.budget.reservedUsd).toBe(open.calls![0]!.reservationUsd);

    const o = r.ledger.observations[0]!;
    expect(o).toMatchObject({ status: "timed-out", usageComplete: false, inputTokens: null, outputTokens: null });
    expect(o.chargedUsd).toBe(o.calls![0]!.reservationUsd);
    expect(r.ledger.statusReason).toMatch(/deadline passed during turn 1; the request was abandoned and its reservation stays charged/);
  }, 60_000);

  it("refuses a call whose reservation would pass the cap: nothing is sent", async () => {
    const r = await runHttp(c, firstAttempt([{ answer: "x", usage: usage() }]), { capUsd: 0.01 });
    expect(r.code).toBe(1);
    expect(r.api.requests).toHaveLength(0);
    const o = r.ledger.observations[0]!;
    expect(o).toMatchObject({ status: "budget-exceeded", chargedUsd: 0, calls: [] });
    expect(r.ledger.statusReason).toMatch(/call 1 was not made: its reservation of 0\.0\d+ USD .* does not fit under the remaining budget of 0\.01 USD/);
    expect(r.ledger.budget.spentUsd).toBe(0);
  }, 60_000);

  it("an API error that echoes the key ends the attempt failed; the key is in no file and no output", async () => {
    const r = await runHttp(
      c,
      firstAttempt([
        { error: { status: 401, type: "authentication_error", message: `invalid x-api-key ${TEST_KEY}` }, echoApiKey: true },
        { answer: "x", usage: usage() },
      ]),
    );
    expect(r.code).toBe(1);
    const o = r.ledger.observations[0]!;
    expect(o.status).toBe("failed");
    expect(o.calls![0]).toMatchObject({ outcome: "api-error", httpStatus: 401, problem: "HTTP 401 authentication_error: invalid x-api-key [redacted] (x-api-key: [redacted])" });
    expect(r.ledger.statusReason).toContain("invalid x-api-key [redacted]");
    for (const text of [await readFile(r.output, "utf8"), r.stdout, r.stderr]) expect(text).not.toContain(TEST_KEY);
    expect(summaryOf(r.stdout).statusReason).toContain("[redacted]");
  }, 60_000);

  it("the doc-bridge arm whose every doc-bridge call errored is invalid-setup; partial errors are counted", async () => {
    const r = await runHttp(c, [
      { name: "repository", turns: [{ answer: "plain", usage: usage() }] },
      {
        name: "doc-bridge",
        tool: DOC_SEARCH,
        turns: [
          {
            toolCalls: [
              { name: "mcp__doc-bridge__doc_get", input: { path: "docs/none.md" } },
              { name: "read_file", input: { path: "nope.md" } },
            ],
            usage: usage(),
          },
          { answer: "no docs", usage: usage() },
        ],
      },
    ]);
    expect(r.code).toBe(1);
    const o = r.ledger.observations[1]!;
    expect(o).toMatchObject({ status: "invalid-setup", toolErrorsByName: { "mcp__doc-bridge__doc_get": 1, read_file: 1 } });
    expect(o.setupProblems).toEqual(["every doc-bridge tool call (1) returned an error: the treatment was lost"]);
    expect((o.mcp as { toolCalls: Array<{ name: string; isError: boolean }> }).toolCalls).toEqual([expect.objectContaining({ name: "doc.get", isError: true })]);
  }, 60_000);

  it("a signal during a request ends the run blocked with the request's reservation charged", async () => {
    const controller = new AbortController();
    const r = await runHttp(c, firstAttempt([{ fault: "hang" }, { answer: "x", usage: usage() }]), {
      signal: controller.signal,
      onStart: ({ api }) => {
        const poll = setInterval(() => {
          if (api.requests.length === 1) {
            clearInterval(poll);
            controller.abort("SIGTERM");
          }
        }, 20);
      },
    });
    expect(r.code).toBe(143);
    const o = r.ledger.observations[0]!;
    expect(o.status).toBe("failed");
    expect(o.chargedUsd).toBe(o.calls![0]!.reservationUsd);
    expect(r.ledger.statusReason).toMatch(/interrupted by SIGTERM during turn 1/);
  }, 60_000);

  it("a doc-bridge server that does not start for its attempt is invalid-setup; nothing is spent on it", async () => {
    // Serves the run's preflight, then fails: the attempt's fresh server is a new process. The
    // engine runs as an unprivileged uid, so its script and marker live in a folder it may use.
    const dir = await mkdtemp(join(tmpdir(), "sr-flaky-"));
    onTestFinished(() => rm(dir, { recursive: true, force: true }));
    await chmod(dir, 0o777);
    const marker = join(dir, "started-once");
    const script = join(dir, "server.sh");
    const q = (x: string) => `'${x}'`;
    await writeFile(script, `#!/bin/sh\nif [ -e ${q(marker)} ]; then echo "engine refused to start" >&2; exit 1; fi\n: > ${q(marker)}\nexec ${referenceEngineCommand().map(q).join(" ")}\n`);
    await chmod(script, 0o755);
    const r = await runHttp(c, pilotScripts(), { docBridgeCommand: [script] });
    expect(r.code).toBe(1);
    const o = r.ledger.observations[1]!;
    expect(o).toMatchObject({ arm: "mcp", status: "invalid-setup", chargedUsd: 0, calls: [], mcpServers: [{ name: "doc-bridge", status: "failed" }], usageComplete: true, inputTokens: 0 });
    expect(o.setupProblems[0]).toMatch(/the doc-bridge server in .* did not start: .*engine refused to start/);
    // Only the repository arm's three calls reached the API.
    expect(r.api.requests).toHaveLength(3);
  }, 60_000);
});
