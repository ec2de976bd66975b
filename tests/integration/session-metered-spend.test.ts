/**
 * Contract R112 on the real Docker engine: a session call's spend as the gateway metered it must
 * equal the call's part of the CLI's cumulative total_cost_usd. The fake claude image sends no
 * model request, so the runner does not compare for it (nothing was metered); here its script
 * runs in an image that is not labelled fake (the runner treats it as the real CLI: the gateway's
 * per-call limit, the usage comparison, the R112 check) and sends one real request through the
 * gateway to a scripted Messages API, reporting a total_cost_usd that agrees, or does not.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage, isFakeClaudeImage } from "../../src/image/build.ts";
import { IMAGE_LABELS } from "../../src/image/specs.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { startSessions } from "../../src/session/run.ts";
import { FIXED_INVOICE, makeSessionDemo, type SessionDemo } from "../../src/demo/sessions.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { gatewayLimitProblem } from "../../src/gateway/run.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { makeTestCa, type TestCa } from "../support/test-ca.ts";
import { sessionTestConfig } from "../support/session-config.ts";
import { activeProfile } from "../../src/profile/load.ts";

const GENERATED_PRICE_TABLE = activeProfile().prices;

const MODEL = "claude-haiku-5-5";
/** What the scripted API says each request used: the gateway meters it at the model's list prices. */
const USAGE = { input_tokens: 1200, output_tokens: 40, cache_read_input_tokens: 300, cache_creation_input_tokens: 500 };
const runtime = new DockerRuntime();
let image = "";
let work = "";
let demo: SessionDemo;
let loginDir = "";
let api: ScriptedApi;
let ca: TestCa;
let n = 0;

/** The demo's first task alone (the invoice), without scripted answers. */
async function manifest(): Promise<string> {
  const m = JSON.parse(await readFile(demo.manifestPath, "utf8"));
  m.tasks = m.tasks.slice(0, 1).map((t: Record<string, unknown>) => ({ ...t, answers: undefined }));
  m.repositories = Object.fromEntries(Object.entries(m.repositories).filter(([k]) => k === m.tasks[0].repository));
  const path = join(work, `manifest-${n++}.json`);
  await writeFile(path, JSON.stringify(m));
  return path;
}

/** One session call through the gateway: the fake's script asks the API once and reports `reportedCostFactor` times its cost. */
async function oneCall(reportedCostFactor: number) {
  const behaviourFile = join(work, `behaviour-${n++}.json`);
  const session = { questions: 0, viaApi: true, reportedCostFactor, edits: [{ path: "src/invoice.js", content: FIXED_INVOICE }] };
  await writeFile(behaviourFile, JSON.stringify({ prices: GENERATED_PRICE_TABLE.models, attempts: { "0": { kind: "ok", session } } }), { mode: 0o644 });
  const output = join(work, `ledger-${n++}.json`);
  const config = sessionTestConfig(
    { manifestPath: await manifest(), roots: demo.roots, output, model: MODEL, image, loginDir },
    // A call budget that holds one request's bound at the gateway (the runner holds the real CLI to it).
    { capUsd: 10, callBudgetUsd: 2, credentials: "gateway", gatewayUpstream: { url: api.url!, ca: ca.ca }, fake: { behaviourFile } },
  );
  const before = api.requests.length;
  const { exitCode, ledger } = await startSessions(config, { runtime });
  return { exitCode, ledger, call: ledger.sessions[0]!.calls[0]!, requests: api.requests.length - before };
}

beforeAll(async () => {
  // The fake's script in an image the runner takes for the real CLI: only the kind label differs.
  const spec = await fakeClaudeImageSpec();
  spec.tag = "study-runner/fake-claude-unlabelled:2.1.296";
  spec.labels[IMAGE_LABELS.kind] = "claude";
  image = (await buildImage(runtime, spec)).id;
  work = await mkdtemp(join(tmpdir(), "sr-metered-"));
  demo = await makeSessionDemo(join(work, "demo"));
  loginDir = join(work, "login");
  await writeTestLogin(loginDir);
  ca = makeTestCa();
  const scripts = [0, 1, 2, 3].map((i) => ({ name: `call-${i}`, turns: [{ answer: "done", usage: USAGE }] }));
  api = await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, script: scripts });
}, 300_000);

afterAll(async () => {
  await api?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

describe("a session call's metered spend against its cumulative difference (through the gateway)", () => {
  it("the stand-in is taken for the real CLI, and the call budget holds one request", async () => {
    expect(await isFakeClaudeImage(runtime, image)).toBe(false);
    expect(gatewayLimitProblem(MODEL, 2, "--call-budget-usd")).toBeNull();
  });

  it("agrees when total_cost_usd grew by what the gateway metered: the call completes", async () => {
    const { call, requests } = await oneCall(1);
    expect(requests).toBe(1);
    expect(call.gateway).toMatchObject({ forwarded: 1, refused: 0 });
    expect(call.meteredCostUsd!).toBeGreaterThan(0);
    expect(Math.abs(call.meteredCostUsd! - call.callCostUsd!)).toBeLessThanOrEqual(1e-9);
    expect(call.status).toBe("completed");
    expect(call.resultStatus).toBe("done");
    expect(call.setupProblems).toEqual([]);
  }, 300_000);

  // contract: R112
  it("refuses a call whose total_cost_usd grew by other than the gateway metered: invalid-setup, naming both figures", async () => {
    const { exitCode, ledger, call, requests } = await oneCall(1.5);
    expect(requests).toBe(1);
    expect(call.gateway).toMatchObject({ forwarded: 1, refused: 0 });
    expect(call.callCostUsd!).toBeCloseTo(1.5 * call.meteredCostUsd!, 9);
    const reason = `the gateway metered ${call.meteredCostUsd} USD for this call but total_cost_usd grew by ${call.callCostUsd} USD`;
    expect(call.status).toBe("invalid-setup");
    expect(call.statusReason).toBe(reason);
    expect(call.setupProblems).toContain(reason);
    // A call that does not complete ends its session; the ledger's result event says so.
    expect(ledger.sessions[0]!.state).toBe("failed");
    expect(ledger.events.filter((e) => e.type === "harness.result")).toEqual([expect.objectContaining({ status: "invalid-setup" })]);
    expect(exitCode).not.toBe(0);
  }, 300_000);
});
