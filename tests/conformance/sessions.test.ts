/**
 * Session tasks with the REAL Claude Code 2.1.296 and the scripted Messages API (no network, no
 * cost), reached through the runner's model gateway (the scripted API is its TLS upstream on
 * loopback, with a test CA made here; the containers hold a placeholder login): the demo's two sessions each read, ask through StructuredOutput, get their scripted
 * answer, resume in a fresh container with --resume, write the fix and say done; the tests pass
 * in their own container. Measured here (docs/claude-cli-observations.md, "Sessions"): the prompt
 * on stdin, the init tool set with --json-schema, and that the resumed request carries the first
 * call's messages.
 */
import { createHash } from "node:crypto";
import { mkdtemp, readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSessions } from "../../src/session/run.ts";
import type { SessionLedger } from "../../src/session/schema.ts";
import { SESSION_INIT_TOOLS } from "../../src/session/args.ts";
import { checkAnyLedger } from "../../src/session/check.ts";
import { FIXED_DISCOUNT, FIXED_INVOICE, makeSessionDemo, ROUNDING_QUESTION, sessionDemoScripts, TIER_QUESTION } from "../../src/demo/sessions.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { makeTestCa } from "../support/test-ca.ts";
import { MODEL, prepareCorpus, realImage, runtime, TEST_TOKEN, type Corpus } from "./support.ts";

let corpus: Corpus;
let api: ScriptedApi;
let ledger: SessionLedger;
let ledgerPath = "";
let exitCode = -1;

beforeAll(async () => {
  const image = (await realImage()).id;
  corpus = await prepareCorpus("sessions");
  const demo = await makeSessionDemo(join(corpus.work, "sessions"));
  const ca = makeTestCa();
  api = await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, script: sessionDemoScripts(), recordBodies: true });
  const out = await mkdtemp(join(corpus.work, "ledger-"));
  const started = await startSessions(
    {
      manifestPath: demo.manifestPath,
      roots: new Map(Object.entries(demo.roots)),
      output: join(out, "sessions.json"),
      model: MODEL,
      image,
      expectedCliVersion: "2.1.296",
      capUsd: 1,
      callBudgetUsd: 0.2,
      sessionBudgetUsd: 0.5,
      isolation: "offline",
      claudeConfigDir: corpus.loginDir,
      credentials: "gateway",
      gatewayUpstream: { url: api.url!, ca: ca.ca },
      timeoutMs: 120_000,
    },
    { runtime },
  );
  ({ ledger, ledgerPath, exitCode } = started);
}, 600_000);

afterAll(async () => {
  await api?.close();
  await corpus?.cleanup();
});

const bodiesOf = (marker: string) => api.requests.filter((r) => r.body?.firstUserText.includes(marker));

describe("a session with the real CLI", () => {
  it("asks, is answered, resumes in a new container with the same session id, and finishes with passing tests", async () => {
    expect(exitCode, JSON.stringify(ledger.sessions.map((s) => [s.state, s.stateReason]))).toBe(0);
    expect(ledger.status).toBe("finished");
    for (const [s, question] of [
      [ledger.sessions[0]!, ROUNDING_QUESTION],
      [ledger.sessions[1]!, TIER_QUESTION],
    ] as const) {
      expect(s.state).toBe("done");
      expect(s.questions.map((q) => q.question.text)).toEqual([question]);
      expect(s.calls.map((c) => [c.mode, c.status, c.resultStatus, c.sessionIdReported])).toEqual([
        ["start", "completed", "question", s.id],
        ["resume", "completed", "done", s.id],
      ]);
      expect(s.calls[0]!.containerId).not.toBe(s.calls[1]!.containerId);
      // Measured: --json-schema adds StructuredOutput to the session's tools.
      expect(s.calls[0]!.tools!.slice().sort()).toEqual(SESSION_INIT_TOOLS);
      expect(s.test).toMatchObject({ exitCode: 0, timedOut: false });
    }
    expect(checkAnyLedger(ledgerPath, await readFile(ledgerPath)).valid).toBe(true);
  });

  it("the resumed call's request carries the first call's messages (the CLI really continued the session)", () => {
    const requests = bodiesOf("session-demo: invoice rounding");
    // Read, question (first container); write, done (second container). Measured: the resumed
    // history holds the CLI's own "No response requested." assistant message after the question.
    expect(requests.map((r) => r.body!.assistantTurns)).toEqual([0, 1, 3, 4]);
    const resumed = requests[2]!.rawBody as { messages: Array<{ role: string; content: unknown }> };
    const text = JSON.stringify(resumed.messages);
    expect(resumed.messages.filter((m) => m.role === "assistant").map((m) => JSON.stringify(m.content))).toEqual([
      expect.stringContaining('"name":"Read"'),
      expect.stringContaining('"name":"StructuredOutput"'),
      expect.stringContaining("No response requested."),
    ]);
    // The first call's question (its StructuredOutput call) and the answer prompt are both in the history.
    expect(text).toContain(ROUNDING_QUESTION.slice(0, 20));
    expect(text).toContain("2 decimal places");
    // One conversation for both containers: the CLI's session header is the runner's id.
    const s = ledger.sessions[0]!;
    expect(new Set(requests.map((r) => r.conversation))).toEqual(new Set([`session:${s.id}`]));
  });

  // contract: R112
  it("call_cost_usd is the difference of the cumulative total_cost_usd and the gateway's metered spend of the call, and the session is charged the calls, not the cumulative", () => {
    for (const s of ledger.sessions) {
      const [one, two] = s.calls;
      expect(two!.cliReportedCostUsd!).toBeGreaterThan(one!.cliReportedCostUsd!);
      expect(one!.callCostUsd).toBeCloseTo(one!.cliReportedCostUsd!, 12);
      expect(two!.callCostUsd!).toBeCloseTo(two!.cliReportedCostUsd! - one!.cliReportedCostUsd!, 12);
      // The computed cost of the resumed call agrees: the session's earlier messages are added to its stream's.
      expect(two!.costProblem).toBeNull();
      expect(two!.callComputedCostUsd!).toBeCloseTo(two!.callCostUsd!, 9);
      // The gateway metered each call on its own: its spend is the call's cost, not the session's.
      for (const c of [one!, two!]) {
        expect(c.meteredCostUsd!).toBeGreaterThan(0);
        expect(Math.abs(c.meteredCostUsd! - c.callCostUsd!)).toBeLessThanOrEqual(1e-9);
      }
      expect(Math.abs(two!.meteredCostUsd! - (two!.cliReportedCostUsd! - one!.cliReportedCostUsd!))).toBeLessThanOrEqual(1e-9);
      const results = ledger.events.filter((e) => e.type === "harness.result" && e.session === s.id);
      expect(results.map((e) => (e as { call_cost_usd: number }).call_cost_usd)).toEqual([one!.callCostUsd, two!.callCostUsd]);
    }
  });

  it("the upstream saw only the runner's credential; the containers only a placeholder", () => {
    const messages = api.requests.filter((r) => r.path.startsWith("/v1/messages"));
    expect(messages.length).toBe(8);
    const sha12 = createHash("sha256").update(TEST_TOKEN).digest("hex").slice(0, 12);
    expect(new Set(messages.map((r) => r.auth.bearerSha256Prefix))).toEqual(new Set([sha12]));
  });

  it("the worktree's edits are the agent's and were tested before the worktree was removed", async () => {
    // The fixes the scripted turns wrote are what made the tests pass; the worktree is gone afterwards.
    expect(ledger.sessions.map((s) => s.worktree)).toEqual([null, null]);
    expect(
      bodiesOf("session-demo: discount tiers")
        .at(-1)!
        .body!.newestToolResults.map((r) => r.isError),
    ).toEqual([false]);
    expect(FIXED_INVOICE).toContain("Math.round");
    expect(FIXED_DISCOUNT).toContain("gold: 10");
    const text = await readFile(ledgerPath, "utf8");
    expect(JSON.parse(text).events.filter((e: { type: string }) => e.type === "harness.test")).toHaveLength(2);
  });
});
