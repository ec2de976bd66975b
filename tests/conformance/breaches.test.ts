/**
 * Scripted breaches through the REAL Claude Code 2.1.296, run by the runner's orchestrator: each
 * attempt must end with the status seed 000 demands and be charged by its rules. The scripted
 * API plays a model that misbehaves; everything else (export, login copy, container, relay,
 * transcript, cost, settlement, ledger) is the runner's own.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { Ledger } from "../../src/ledger/schema.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import type { ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import { messageRequests, prepareCorpus, realImage, runConformanceStudy, runtime, startStudyApi, TEST_TOKEN, toolResults, type Corpus, type StudyApi, type StudyRun } from "./support.ts";

const RESERVATION_USD = 0.1;
const small = { input_tokens: 1000, output_tokens: 10 };

let image = "";
let corpus: Corpus;
let api: StudyApi | undefined;

beforeAll(async () => {
  // By id: the tag is shared with every other checkout on this engine.
  image = (await realImage()).id;
  corpus = await prepareCorpus("breaches");
}, 300_000);

afterEach(async () => {
  await api?.close();
  api = undefined;
});

afterAll(async () => {
  await corpus?.cleanup();
});

/** One attempt through the gateway (the default of startStudyApi), or directly when `direct` says why. */
async function attempt(script: ScriptInput, arm: "repository" | "mcp" = "repository", timeoutMs?: number, direct?: string): Promise<StudyRun & { obs: Ledger["observations"][number] }> {
  api = await startStudyApi(script, { direct });
  const run = await runConformanceStudy({ corpus, api, image, plan: arm, timeoutMs });
  expect(run.ledger.observations).toHaveLength(1);
  // Whatever happened, the container is gone and the reservation is settled.
  expect(await runtime.listByLabel({ [LABELS.run]: run.ledger.runId })).toEqual([]);
  expect(run.ledger.budget.reservedUsd).toBe(0);
  return { ...run, obs: run.ledger.observations[0]! };
}

function stopsTheRun(run: StudyRun, status: string): void {
  expect(run.code).toBe(1);
  expect(run.ledger.status).toBe("blocked");
  expect(run.ledger.statusReason).toContain(`ended ${status}`);
}

describe("a tool outside the allowed set", () => {
  for (const [name, input] of [
    ["Bash", { command: "cat /home/agent/.claude/.credentials.json" }],
    ["Write", { file_path: "/workspace/NOTES.md", content: "written by the agent" }],
  ] as const) {
    it(`a ${name} call is invalid-setup; the CLI refuses it as an unknown tool, not by a permission denial`, async () => {
      const run = await attempt({
        name: `call-${name}`,
        turns: [
          { toolCalls: [{ name, input }], usage: small },
          { answer: "done", usage: small },
        ],
      });
      expect(run.obs).toMatchObject({ status: "invalid-setup", cliSubtype: "success", isError: false, permissionDenials: [], toolCallsByName: { [name]: 1 }, toolErrorsByName: { [name]: 1 } });
      expect(run.obs.setupProblems).toEqual([`tool call to "${name}", which is outside the allowed set`]);
      // Measured on 2.1.296: the tool is absent, so the call never ran.
      const results = messageRequests(api!)[1]!.body!.newestToolResults;
      expect(results).toEqual([expect.objectContaining({ isError: true, content: expect.stringContaining(`No such tool available: ${name}`) })]);
      expect(run.obs.chargedUsd).toBe(RESERVATION_USD);
      stopsTheRun(run, "invalid-setup");
    });
  }

  it("a doc-bridge tool the runner denied is invalid-setup in the MCP arm", async () => {
    const run = await attempt(
      {
        name: "call-gate-status",
        turns: [
          { toolCalls: [{ name: "mcp__doc-bridge__gate_status", input: {} }], usage: small },
          { answer: "done", usage: small },
        ],
      },
      "mcp",
    );
    expect(run.obs.status).toBe("invalid-setup");
    expect(run.obs.setupProblems).toContain('tool call to "mcp__doc-bridge__gate_status", which is outside the allowed set');
    // The denied tool never reached the doc-bridge server.
    expect((run.obs.mcp as { toolCalls: unknown[] }).toolCalls).toEqual([]);
    stopsTheRun(run, "invalid-setup");
  });
});

describe("the doc-bridge treatment lost", () => {
  it("an MCP arm whose every doc-bridge call failed is invalid-setup", async () => {
    const run = await attempt(
      {
        name: "doc-get-missing",
        turns: [
          { toolCalls: [{ name: "mcp__doc-bridge__doc_get", input: { path: "docs/no-such-page.md" } }], usage: small },
          { answer: "done", usage: small },
        ],
      },
      "mcp",
    );
    expect(run.obs.status).toBe("invalid-setup");
    expect(run.obs.toolErrorsByName).toEqual({ "mcp__doc-bridge__doc_get": 1 });
    expect(run.obs.setupProblems).toEqual(["all 1 doc-bridge tool results were errors; the treatment was lost"]);
    // The server did answer it, with an error, through the runner's bridge.
    expect((run.obs.mcp as { toolCalls: Array<{ name: string; isError: boolean }> }).toolCalls).toEqual([expect.objectContaining({ name: "doc.get", isError: true })]);
  });
});

describe("a denied read outside the workspace", () => {
  it("Read and Grep of the agent's HOME are denied and recorded; the attempt still completes, and the token never reaches the API", async () => {
    const scriptInput: ScriptInput = {
      name: "read-credentials",
      turns: [
        {
          toolCalls: [
            { name: "Read", input: { file_path: "/home/agent/.claude/.credentials.json" } },
            { name: "Grep", input: { pattern: "accessToken", path: "/home/agent" } },
          ],
          usage: small,
        },
        { answer: "I could not read it.", usage: small },
      ],
    };
    // Whole request bodies are kept for this one: the token must appear in none of them.
    api = await startStudyApi(scriptInput, { recordBodies: true });
    const run = await runConformanceStudy({ corpus, api, image, plan: "repository" });
    const obs = run.ledger.observations[0]!;
    expect(run.code).toBe(0);
    expect(obs.status).toBe("completed");
    expect(obs.permissionDenials.map((d) => d.toolName).sort()).toEqual(["Grep", "Read"]);
    expect(obs.toolErrorsByName).toEqual({ Read: 1, Grep: 1 });
    expect(obs.setupProblems).toEqual([]);
    const results = messageRequests(api)[1]!.body!.newestToolResults;
    expect(results).toHaveLength(2);
    for (const r of results) {
      expect(r.isError).toBe(true);
      expect(r.content).toMatch(/denied/);
    }
    const requests = messageRequests(api);
    expect(requests).toHaveLength(2);
    for (const r of requests) expect(JSON.stringify(r.rawBody)).not.toContain(TEST_TOKEN);
    expect(JSON.stringify(requests[1]!.rawBody)).toContain("denied");
  });
});

describe("a denied read of the container's system folders and login copy", () => {
  it("Read, Grep and Glob of /proc, /sys and the staged login folder are denied and recorded; no host path reaches the API", async () => {
    const scriptInput: ScriptInput = {
      name: "read-proc-sys",
      turns: [
        {
          toolCalls: [
            { name: "Read", input: { file_path: "/proc/self/mountinfo" } },
            { name: "Grep", input: { pattern: "study-runner", path: "/proc/self" } },
            { name: "Glob", input: { pattern: "**/*", path: "/sys/fs/cgroup" } },
            { name: "Read", input: { file_path: "/run/study-runner-login/.claude/.credentials.json" } },
          ],
          usage: small,
        },
        { answer: "I could not read them.", usage: small },
      ],
    };
    api = await startStudyApi(scriptInput, { recordBodies: true });
    const run = await runConformanceStudy({ corpus, api, image, plan: "repository" });
    const obs = run.ledger.observations[0]!;
    expect(run.code, run.stderr).toBe(0);
    expect(obs.status).toBe("completed");
    expect(obs.permissionDenials.map((d) => d.toolName).sort()).toEqual(["Glob", "Grep", "Read", "Read"]);
    const results = messageRequests(api)[1]!.body!.newestToolResults;
    expect(results).toHaveLength(4);
    for (const r of results) {
      expect(r.isError).toBe(true);
      expect(r.content).toMatch(/denied/);
    }
    // mountinfo would name the host folders of the export and the login copy.
    for (const r of messageRequests(api)) {
      const body = JSON.stringify(r.rawBody);
      expect(body).not.toContain(TEST_TOKEN);
      expect(body).not.toContain(corpus.work);
      expect(body).not.toMatch(/study-runner-(export|home)-\d+-/);
    }
  });
});

describe("spend above --max-budget-usd", () => {
  it("is budget-exceeded and charged at least the reservation (the CLI's own reported cost here)", async () => {
    const run = await attempt(
      {
        name: "one-million-tokens",
        turns: [
          { toolCalls: [{ name: "Read", input: { file_path: "/workspace/README.md" } }], usage: { input_tokens: 1_000_000, output_tokens: 10 } },
          { answer: "never reached", usage: small },
        ],
      },
      "repository",
      undefined,
      // Direct: this scenario shows what the CLI's own --max-budget-usd does without the host's
      // ceiling, with a turn claiming 1,000,000 input tokens for a request of some tens of KB: the
      // gateway would rightly make that attempt invalid-setup (usage no request could produce).
      "a scripted usage larger than its request, to measure the CLI's after-spend check alone",
    );
    expect(run.obs).toMatchObject({ status: "budget-exceeded", cliSubtype: "error_max_budget_usd", isError: true, exitCode: 1, inputTokens: 1_000_000, outputTokens: 10 });
    // Second tier: 1,000,000 x 0.50 + 10 x 2.50 per million.
    expect(run.obs.cliReportedCostUsd).toBeCloseTo(0.500025, 12);
    expect(run.obs.computedCostUsd).toBe(0.500025);
    expect(run.obs.chargedUsd).toBe(0.500025);
    expect(run.obs.chargedUsd!).toBeGreaterThanOrEqual(RESERVATION_USD);
    // The CLI checks the cap after spend: it stopped before running the scripted Read (the
    // tool_use is in the transcript and counted, but no result and no second request followed).
    expect(messageRequests(api!)).toHaveLength(1);
    expect(run.obs.toolCallsByName).toEqual({ Read: 1 });
    expect(toolResults(run.events(0))).toEqual([]);
    stopsTheRun(run, "budget-exceeded");
  });
});

describe("an API error answer", () => {
  it("a 400 after a tool turn is failed; the earlier turn's usage is kept and the reservation charged", async () => {
    const run = await attempt({
      name: "error-after-tool",
      turns: [
        { toolCalls: [{ name: "Read", input: { file_path: "/workspace/README.md" } }], usage: small },
        { error: { status: 400, type: "invalid_request_error", message: "scripted bad request" } },
      ],
    });
    expect(run.obs).toMatchObject({ status: "failed", cliSubtype: "success", isError: true, exitCode: 1, inputTokens: 1000, outputTokens: 10, costProblem: null });
    expect(run.obs.chargedUsd).toBe(RESERVATION_USD);
    stopsTheRun(run, "failed");
  });

  it("a 400 on the first request is failed too, with usage incomplete", async () => {
    const run = await attempt({ name: "error-first", turns: [{ error: { status: 400, type: "invalid_request_error", message: "scripted bad request" } }] });
    expect(run.obs).toMatchObject({ status: "failed", cliSubtype: "success", isError: true, exitCode: 1, usageComplete: false, cliReportedCostUsd: 0 });
    expect(run.obs.chargedUsd).toBe(RESERVATION_USD);
    // Measured: the CLI retries a 400 once (without one beta), then gives up.
    expect(messageRequests(api!).map((r) => r.answer.kind)).toEqual(["error", "error"]);
    stopsTheRun(run, "failed");
  });
});

describe("a turn loop that never ends", () => {
  it("is timed-out at the runner's limit, the container killed and removed, the reservation charged", async () => {
    const started = Date.now();
    const run = await attempt(
      { name: "never-ends", neverEnd: true, turns: [{ toolCalls: [{ name: "Glob", input: { pattern: "**/*.md" } }], usage: { input_tokens: 100, output_tokens: 5 } }] },
      "repository",
      8_000,
    );
    expect(Date.now() - started).toBeLessThan(60_000);
    expect(run.obs).toMatchObject({ status: "timed-out", timedOut: true, cliSubtype: null, usageComplete: false });
    expect(run.obs.chargedUsd).toBe(RESERVATION_USD);
    // The loop was real: many turns, each a Glob the CLI ran.
    expect(messageRequests(api!).length).toBeGreaterThan(3);
    expect(run.obs.toolCallsByName.Glob).toBeGreaterThan(3);
    stopsTheRun(run, "timed-out");
  });
});
