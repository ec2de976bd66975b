/**
 * Acceptance: both arms of the demo pilot complete through the REAL Claude Code 2.1.296, run by
 * the shipped `study-runner` command. The model is the scripted Messages API on a unix socket;
 * the containers have no network, the CLI reaches the API through the relay on 127.0.0.1 inside,
 * and it authenticates with the test login the runner copied in (no API key anywhere).
 */
import { createHash } from "node:crypto";
import { mkdtemp } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, type CliResult } from "../support/cli.ts";
import { readLedger } from "../../src/ledger/store.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import { LABELS } from "../../src/runtime/reaper.ts";
import { messageRequests, MODEL, prepareCorpus, realImage, runtime, startApi, TEST_TOKEN, type ConformanceApi, type Corpus } from "./support.ts";
import { expectedTokens, expectedToolCalls, MCP_SCRIPT, pilotScripts, REPOSITORY_SCRIPT } from "./scripts.ts";

let corpus: Corpus;
let api: ConformanceApi;
let run: CliResult;
let ledger: Ledger;

beforeAll(async () => {
  const image = await realImage();
  corpus = await prepareCorpus("pilot");
  api = await startApi(pilotScripts());
  const output = join(await mkdtemp(join(corpus.work, "ledger-")), "pilot.json");
  run = await runCli(
    [
      "run",
      "--pilot",
      "--approve-budget",
      "--transport",
      "cli",
      ...[...corpus.roots].flatMap(([name, dir]) => ["--root", `${name}=${dir}`]),
      "--output",
      output,
      "--image",
      image.tag,
      "--claude-config-dir",
      corpus.loginDir,
      "--model-api-socket",
      api.socketPath,
      "--quiet",
    ],
    { env: { STUDY_MODEL: MODEL, STUDY_BUDGET_USD: "1" }, timeoutMs: 240_000 },
  );
  ledger = await readLedger(output);
}, 300_000);

afterAll(async () => {
  await api?.close();
  await corpus?.cleanup();
});

const conversations = () => {
  const byConversation = new Map<string, ReturnType<typeof messageRequests>>();
  for (const r of messageRequests(api)) byConversation.set(r.conversation!, [...(byConversation.get(r.conversation!) ?? []), r]);
  return [...byConversation.values()];
};

describe("the demo pilot through the real CLI", () => {
  it("completes both arms and ends awaiting adjudication", () => {
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ status: "awaiting-adjudication", attempts: { planned: 2, run: 2, byStatus: { completed: 2 } }, usageComplete: true });
    expect(ledger.observations.map((o) => [o.arm, o.status, o.cliSubtype, o.isError, o.exitCode])).toEqual([
      ["repository", "completed", "success", false, 0],
      ["mcp", "completed", "success", false, 0],
    ]);
    // The network of every attempt container was none: the ledger names the offline profile.
    expect(ledger.isolation).toBe("offline");
    expect(ledger.cliVersion).toBe("2.1.296");
  });

  it("records token counts equal to the sums the script reported, and tool counts equal to the calls scripted", () => {
    const [repo, mcp] = ledger.observations;
    expect(repo).toMatchObject({ ...expectedTokens(REPOSITORY_SCRIPT), toolCallsByName: expectedToolCalls(REPOSITORY_SCRIPT), toolCalls: 5, usageComplete: true });
    expect(mcp).toMatchObject({ ...expectedTokens(MCP_SCRIPT), toolCallsByName: expectedToolCalls(MCP_SCRIPT), toolCalls: 2, usageComplete: true });
    // The only tool error is the Read of the answer key, which is not in the export.
    expect(repo!.toolErrorsByName).toEqual({ Read: 1 });
    expect(mcp!.toolErrorsByName).toEqual({});
    for (const o of [repo!, mcp!]) {
      expect(o.costProblem).toBeNull();
      expect(Math.abs(o.computedCostUsd! - o.cliReportedCostUsd!)).toBeLessThanOrEqual(1e-9);
      expect(o.chargedUsd).toBeGreaterThan(0);
    }
  });

  it("the repository arm really read and grepped the read-only export (what the API got back)", () => {
    const [repoConversation] = conversations();
    expect(repoConversation!.map((r) => r.answer.kind)).toEqual(["tool-calls", "tool-calls", "answer"]);
    const afterSearch = repoConversation![1]!.body!.newestToolResults;
    expect(afterSearch.every((t) => !t.isError)).toBe(true);
    const searched = afterSearch.map((t) => t.content).join("\n");
    expect(searched).toContain("docs/rounding.md");
    expect(searched).toContain("src/money.js");
    // The answer key mentions roundMinor too, but it is not exported, so Grep cannot find it.
    expect(searched).not.toContain("answer-key");
    const reads = repoConversation![2]!.body!.newestToolResults;
    expect(reads).toHaveLength(3);
    // Results come back in completion order, not call order (measured).
    const read = reads
      .filter((t) => !t.isError)
      .map((t) => t.content)
      .join("\n");
    expect(read).toContain("export function roundMinor");
    expect(read).toContain("half to even");
    expect(reads.filter((t) => t.isError)).toEqual([expect.objectContaining({ content: expect.stringMatching(/does not exist/i) })]);
  });

  it("the MCP arm called doc.search and doc.get through the relay; the server-side record matches the transcript", () => {
    const mcp = ledger.observations[1]!;
    const record = mcp.mcp as { connections: number; toolCalls: Array<{ name: string; isError: boolean }> };
    expect(record.connections).toBe(1);
    expect(record.toolCalls.map((c) => [c.name, c.isError])).toEqual([
      ["doc.search", false],
      ["doc.get", false],
    ]);
    expect(mcp.setupProblems).toEqual([]);
    const [, mcpConversation] = conversations();
    expect(mcpConversation!.map((r) => r.answer.kind)).toEqual(["tool-calls", "tool-calls", "answer"]);
    expect(mcpConversation![1]!.body!.newestToolResults[0]!.content).toContain('"path":"docs/rounding.md"');
    expect(mcpConversation![2]!.body!.newestToolResults[0]!.content).toContain("half to even");
  });

  it("authenticated with the copied test login only: a bearer token, never an API key", () => {
    const expected = createHash("sha256").update(TEST_TOKEN).digest("hex").slice(0, 12);
    const requests = messageRequests(api);
    expect(requests).toHaveLength(6);
    for (const r of requests) expect(r.auth).toEqual({ bearer: true, bearerSha256Prefix: expected, apiKey: false });
    // With nonessential traffic off the CLI sent nothing but message requests.
    expect(api.requests.every((r) => r.path === "/v1/messages?beta=true")).toBe(true);
    expect(requests.every((r) => r.body?.model === MODEL)).toBe(true);
  });

  it("left no container behind", async () => {
    expect(await runtime.listByLabel({ [LABELS.run]: ledger.runId })).toEqual([]);
  });
});
