/**
 * Acceptance: both arms of the demo pilot complete through the REAL Claude Code 2.1.296, run by
 * the shipped `study-runner` command with its default credentials (the model gateway). The model
 * is the scripted Messages API on a loopback TLS port, the gateway's upstream (hidden test flags,
 * a test CA); the containers have no network, the CLI reaches the runner's gateway through the
 * relay on 127.0.0.1 inside with a placeholder login, and the gateway swaps in the test login's
 * token on the host (no API key anywhere). Every reply is metered and held to the transcript.
 */
import { createHash } from "node:crypto";
import { mkdtemp, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, type CliResult } from "../support/cli.ts";
import { readLedger } from "../../src/ledger/store.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import {
  assertLedgerMeteredEqualsTranscript,
  messageRequests,
  MODEL,
  prepareCorpus,
  realImage,
  runtime,
  scanContainers,
  startStudyApi,
  TEST_TOKEN,
  type ContainerScan,
  type Corpus,
  type StudyApi,
} from "./support.ts";
import { expectedTokens, expectedToolCalls, MCP_SCRIPT, pilotScripts, REPOSITORY_SCRIPT } from "./scripts.ts";

let corpus: Corpus;
let api: Extract<StudyApi, { route: "gateway" }>;
let run: CliResult;
let ledger: Ledger;
/** Each attempt container, scanned while the scripted API held its request (so while it ran). */
const scans = new Map<string, ContainerScan>();

beforeAll(async () => {
  const image = await realImage();
  corpus = await prepareCorpus("pilot");
  let runnerPid: number | undefined;
  const started = await startStudyApi(pilotScripts(), { onRequest: () => (runnerPid === undefined ? undefined : scanContainers(scans, { [LABELS.pid]: String(runnerPid) })) });
  if (started.route !== "gateway") throw new Error("the pilot runs through the gateway");
  api = started;
  const caFile = join(corpus.work, "test-ca.pem");
  await writeFile(caFile, api.gateway.ca, { mode: 0o600 });
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
      // The default of --transport cli, said out loud: the test is about this mode.
      "--credentials",
      "gateway",
      "--test-gateway-upstream",
      api.gateway.url,
      "--test-gateway-ca",
      caFile,
      "--quiet",
    ],
    { env: { STUDY_MODEL: MODEL, STUDY_BUDGET_USD: "1" }, timeoutMs: 240_000, onSpawn: (pid) => (runnerPid = pid) },
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
    expect(ledger.credentials).toBe("gateway");
    expect(ledger.cliVersion).toBe("2.1.296");
  });

  it("metered every reply on the host, and each attempt's metered usage equals its transcript's", () => {
    for (const o of ledger.observations) {
      const g = o.gateway!;
      expect(g.setupProblems).toEqual([]);
      expect(g.refused).toBe(0);
      expect(g.forwarded).toBe(3);
      expect(g.requests.map((r) => [r.method, r.path, r.status, r.requestModel, r.model, r.complete])).toEqual(Array(3).fill(["POST", "/v1/messages?beta=true", 200, MODEL, MODEL, true]));
      // The metered spend is what the CLI itself priced the attempt at (both tier each request).
      expect(Math.abs(g.meteredCostUsd - o.cliReportedCostUsd!)).toBeLessThanOrEqual(1e-9);
    }
    assertLedgerMeteredEqualsTranscript(ledger);
  });

  it("ran every attempt container with network none, only the loopback interface, and only a placeholder login", () => {
    expect(scans.size).toBe(2);
    for (const s of scans.values()) {
      expect(s.networkMode).toBe("none");
      expect(s.interfaces).toEqual(["lo"]);
      expect(s.envHasRealToken).toBe(false);
      expect(s.envNames).not.toContain("ANTHROPIC_API_KEY");
      expect(s.mountFilesWithRealToken).toEqual([]);
      expect(s.placeholderFiles).toBeGreaterThan(0);
    }
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

  it("the upstream saw only the test login's token, swapped in by the gateway: a bearer token, never an API key", () => {
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
