/**
 * Open questions about the REAL Claude Code 2.1.296, answered by measurement on every run
 * (network none, no cost; each container holds a placeholder login and reaches the scripted
 * Messages API through its own socket of the runner's model gateway, which records every request
 * the CLI sends, forwarded or refused, and meters every reply); the answers are lines of
 * docs/claude-cli-observations.md that name this file:
 * - resume: session_id, cumulative cost, what --max-budget-usd caps, what HOME must keep;
 * - 529 and 429: retries, waits, retry-after, what the stream and the result show;
 * - which requests the CLI sends besides POST /v1/messages under the runner's environment.
 */
import { expectedInit } from "../../src/claude/init-expectation.ts";
import { randomUUID } from "node:crypto";
import { chmod, chown, cp, mkdir, mkdtemp, readdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runBounded } from "../../src/sandbox/bounded.ts";
import { dockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import { attemptContainerSpec, CONTAINER } from "../../src/transport/cli/spec.ts";
import { openSessionChannel, SESSION_STREAM_LIMIT_BYTES, sessionChannelPaths } from "../../src/transport/cli/session-channel.ts";
import { collectSessionCall } from "../../src/session/state.ts";
import { cliArguments, expectedInitTools } from "../../src/claude/args.ts";
import { cliPrices } from "../../src/cost/prices.ts";
import type { ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import type { Gateway, GatewayRecord } from "../../src/gateway/gateway.ts";
import { TranscriptReader, type TranscriptFacts } from "../../src/transcript/reader.ts";
import {
  assertMeteredEqualsTranscript,
  MODEL,
  modelUsageTotals,
  openTestAttempt,
  prepareCorpus,
  realImage,
  runtime,
  startStudyApi,
  testGateway,
  type Corpus,
  type StudyApi,
  type TestGatewayAttempt,
} from "./support.ts";

const CLI_PRICES = cliPrices();

const answer = (input_tokens: number) => ({ answer: "scripted", usage: { input_tokens, output_tokens: 10 } });
/** One answer of 60,000 input and 10 output tokens of the pinned model (first tier). */
const CALL_USD = (60_000 * CLI_PRICES[MODEL]!.tier1.input + 10 * CLI_PRICES[MODEL]!.tier1.output) / 1e6;
const overloaded = { status: 529, type: "overloaded_error", message: "scripted overload" };
const limited = { status: 429, type: "rate_limit_error", message: "scripted rate limit" };

const SCRIPTS: ScriptInput[] = [
  // The resumed call re-sends the first call's messages, so the same marker selects this script and
  // the assistant count picks its second turn.
  { name: "resume", marker: "question: resume", turns: [answer(60_000), answer(60_000)] },
  { name: "overload-twice", marker: "question: overload twice", turns: [{ error: overloaded, times: 2 }, answer(1_000)] },
  { name: "rate-limit-retry-after", marker: "question: rate limit", turns: [{ error: limited, times: 1, retryAfterSeconds: 3 }, answer(1_000)] },
  { name: "overload-always", marker: "question: overload always", turns: [{ error: overloaded }, answer(1_000)] },
  { name: "traffic-runner", marker: "question: traffic runner", turns: [answer(1_000)] },
  { name: "traffic-default", marker: "question: traffic default", turns: [answer(1_000)] },
];

interface Run {
  events: Array<Record<string, any>>;
  result: Record<string, any> | undefined;
  exitCode: number | null;
  wallMs: number;
  home: string;
  /** The session files that came back through the session channel (src/session/state.ts). */
  state: string;
  /** What the run's gateway socket saw: every request the CLI sent, and the metered replies. */
  metered: GatewayRecord;
  facts: TranscriptFacts;
}

let image = "";
let corpus: Corpus;
let api: StudyApi;
let gateway: Gateway;
let workspace = "";
const runs = new Map<string, Run>();
const sessionId = randomUUID();

/**
 * A gateway attempt and its staged placeholder login folder with an empty `projects/` that the
 * login wrapper copies into the tmpfs HOME's `.claude/projects` before the CLI starts; after it
 * exits the session files come back through the session channel (see run).
 */
async function freshHome(): Promise<TestGatewayAttempt> {
  const dir = await mkdtemp(join(corpus.work, "home-"));
  const attempt = await openTestAttempt(gateway, join(dir, "home"));
  await mkdir(join(attempt.homeDir, "projects"), { mode: 0o700 });
  await chown(join(attempt.homeDir, "projects"), 1000, 1000);
  return attempt;
}

/** The runner's own arguments, with the session flags of a resume study in place of --no-session-persistence. */
function argv(question: string, opts: { budgetUsd?: number; session?: string[] } = {}): string[] {
  const base = cliArguments({ arm: "repository", model: MODEL, maxBudgetUsd: opts.budgetUsd ?? 1, prompt: `question: ${question}`, deniedMcpTools: [] });
  if (!opts.session) return base;
  const out = base.filter((a) => a !== "--no-session-persistence");
  out.splice(out.indexOf("--"), 0, ...opts.session);
  return out;
}

async function run(name: string, args: string[], opts: { home?: TestGatewayAttempt; env?: Record<string, string> } = {}): Promise<Run> {
  const attempt = opts.home ?? (await freshHome());
  const home = attempt.homeDir;
  const channelPaths = sessionChannelPaths(join(dirname(home), `call-${randomUUID().slice(0, 8)}`));
  await mkdir(dirname(channelPaths.socketDir), { mode: 0o700 });
  const channel = await openSessionChannel(channelPaths.socketDir, channelPaths.streamFile, SESSION_STREAM_LIMIT_BYTES);
  const spec = attemptContainerSpec({
    image,
    argv: args,
    exportDir: workspace,
    homeDir: home,
    network: { mode: "none" },
    labels: { "study-runner.test": "conformance-cli-questions" },
    attemptIndex: 0,
    modelApiSocket: attempt.socketPath,
    extraEnv: opts.env,
    session: { projectsDir: `${CONTAINER.sessionLoginDir}/projects`, channelSocket: channel.socketPath },
  });
  const events: Array<Record<string, any>> = [];
  const reader = new TranscriptReader({
    arm: "repository",
    model: MODEL,
    expectedTools: expectedInitTools("repository"),
    cliVersion: "2.1.296",
    init: expectedInit("attempt-repository", { model: MODEL }),
  });
  const raw = await runBounded(
    dockerSandbox(runtime).containers,
    spec,
    (line) => {
      reader.pushLine(line);
      if (line.startsWith("{")) events.push(JSON.parse(line));
    },
    { timeoutMs: 120_000 },
  );
  const metered = await attempt.finish();
  const state = join(dirname(channelPaths.socketDir), "state");
  await mkdir(state, { mode: 0o700 });
  await collectSessionCall(await channel.finish(), state);
  await channel.close();
  const r = { events, result: events.find((e) => e.type === "result"), exitCode: raw.exitCode, wallMs: raw.wallTimeMs, home, state, metered, facts: reader.finish() };
  runs.set(name, r);
  return r;
}

const retries = (r: Run) => r.events.filter((e) => e.type === "system" && e.subtype === "api_retry");
const requestsOf = (marker: string) => api.requests.filter((q) => q.body?.firstUserText.includes(marker));

beforeAll(async () => {
  image = (await realImage()).tag;
  corpus = await prepareCorpus("questions");
  workspace = await mkdtemp(join(corpus.work, "workspace-"));
  await writeFile(join(workspace, "README.md"), "A file.\n", { mode: 0o444 });
  await chmod(workspace, 0o555);
  api = await startStudyApi(SCRIPTS);
  if (api.route !== "gateway") throw new Error("the questions are measured through the gateway");
  gateway = testGateway(api);
  // Two at a time (two cores): the first call of the resume chain with the retry runs.
  await Promise.all([
    (async () => {
      const first = await run("resume-1", argv("resume", { session: ["--session-id", sessionId] }));
      // A second container: a fresh HOME with the login and nothing but the session file copied over.
      const projects = first.state;
      const second = await freshHome();
      const home = second.homeDir;
      for (const dir of await readdir(projects)) {
        const files = (await readdir(join(projects, dir))).filter((f) => f === `${sessionId}.jsonl`);
        for (const f of files) {
          await mkdir(join(home, "projects", dir), { recursive: true });
          await cp(join(projects, dir, f), join(home, "projects", dir, f));
          // The container user (uid 1000) appends to the session: give it what it wrote.
          for (const p of [join(home, "projects", dir), join(home, "projects", dir, f)]) await chown(p, 1000, 1000);
        }
      }
      // Cap below the session's cumulative cost, above this call's own.
      await run("resume-2", argv("resume", { budgetUsd: 1.5 * CALL_USD, session: ["--resume", sessionId] }), { home: second });
      await run("resume-without-session-file", argv("resume", { session: ["--resume", sessionId] }));
      await run("traffic-runner", argv("traffic runner"));
      await run("traffic-default", argv("traffic default"), { env: { CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "" } });
    })(),
    (async () => {
      await run("overload-twice", argv("overload twice"));
      await run("rate-limit", argv("rate limit"));
      await run("overload-always", argv("overload always"), { env: { CLAUDE_CODE_MAX_RETRIES: "1" } });
    })(),
  ]);
}, 400_000);

afterAll(async () => {
  gateway?.close();
  await api?.close();
  await corpus?.cleanup();
});

describe("resume across two containers", () => {
  it("the result's session_id is --session-id, and a fresh HOME needs only the login and the session's .jsonl", () => {
    const one = runs.get("resume-1")!;
    const two = runs.get("resume-2")!;
    expect(one.result).toMatchObject({ subtype: "success", is_error: false, session_id: sessionId });
    expect(two.result, JSON.stringify(two.result)).toMatchObject({ subtype: "success", is_error: false, session_id: sessionId });
    // The resumed request carried the first call's conversation (one assistant turn already).
    expect(requestsOf("question: resume").map((q) => q.body!.assistantTurns)).toEqual([0, 1]);
    // Without the .jsonl the resume does not happen: no request, an error result.
    const none = runs.get("resume-without-session-file")!;
    expect(none.exitCode).not.toBe(0);
    expect(requestsOf("question: resume")).toHaveLength(2);
  });

  it("total_cost_usd is cumulative over the session, and --max-budget-usd caps the call, not the session", () => {
    expect(runs.get("resume-1")!.result!.total_cost_usd).toBeCloseTo(CALL_USD, 12);
    // 2 x CALL_USD is above the resumed call's cap of 1.5 x CALL_USD, yet the call succeeded.
    expect(runs.get("resume-2")!.result!.total_cost_usd).toBeCloseTo(2 * CALL_USD, 12);
  });
});

describe("529 and 429 from the API", () => {
  it("529 twice: two api_retry events with growing waits, then a normal success", () => {
    const r = runs.get("overload-twice")!;
    const events = retries(r);
    expect(events.map((e) => [e.attempt, e.error_status, e.max_retries])).toEqual([
      [1, 529, 10],
      [2, 529, 10],
    ]);
    expect(requestsOf("question: overload twice")).toHaveLength(3);
    expect(r.result).toMatchObject({ subtype: "success", is_error: false });
    for (const e of events) expect(e.retry_delay_ms).toBeLessThan(5_000);
  });

  it("429 with retry-after: 3 waits the 3 seconds the header asks for", () => {
    const r = runs.get("rate-limit")!;
    const [e] = retries(r);
    expect(e).toMatchObject({ attempt: 1, error_status: 429 });
    expect(e!.retry_delay_ms).toBe(3_000);
    const [a, b] = requestsOf("question: rate limit");
    expect(Date.parse(b!.at) - Date.parse(a!.at)).toBeGreaterThanOrEqual(2_900);
    expect(r.result).toMatchObject({ subtype: "success", is_error: false });
  });

  it("CLAUDE_CODE_MAX_RETRIES=1 against a 529 every time: one retry, then an error result with the status", () => {
    const r = runs.get("overload-always")!;
    expect(retries(r)).toHaveLength(1);
    expect(requestsOf("question: overload always")).toHaveLength(2);
    expect(r.result).toMatchObject({ subtype: "success", is_error: true, api_error_status: 529 });
    expect(r.exitCode).toBe(1);
  });
});

describe("requests besides POST /v1/messages (as the gateway recorded them, forwarded or refused)", () => {
  const routesOf = (name: string) => runs.get(name)!.metered.requests.map((q) => `${q.method} ${q.path.split("?")[0]}${q.refused ? ` (refused: ${q.refused.kind})` : ""}`);

  it("with CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 (the runner's setting): only POST /v1/messages", () => {
    expect(routesOf("traffic-runner")).toEqual(["POST /v1/messages"]);
    // Nor did any other run with the runner's setting send anything else.
    for (const name of runs.keys())
      if (name !== "traffic-default")
        expect(
          routesOf(name).filter((r) => r !== "POST /v1/messages"),
          name,
        ).toEqual([]);
  });

  it("with the variable empty: one HEAD /api/hello besides the messages, which the gateway refuses on the host", () => {
    expect(routesOf("traffic-default").sort()).toEqual(["HEAD /api/hello (refused: path)", "POST /v1/messages"]);
    expect(runs.get("traffic-default")!.result).toMatchObject({ subtype: "success", is_error: false });
    // Refused, so it never reached the API: the upstream got message requests only.
    expect(api.requests.filter((q) => !q.path.startsWith("/v1/messages"))).toEqual([]);
  });
});

describe("metered usage through the gateway", () => {
  it("equals the transcript's in every run; the resumed call's is the session's modelUsage less the first call's", () => {
    for (const [name, r] of runs) {
      if (name === "resume-2") continue;
      assertMeteredEqualsTranscript(name, r.metered, modelUsageTotals(r.facts.modelUsage), r.facts.perMessageUsage);
    }
    // The resumed call's modelUsage covers the whole session, its stream only its own messages.
    const one = modelUsageTotals(runs.get("resume-1")!.facts.modelUsage);
    const two = runs.get("resume-2")!;
    const session = modelUsageTotals(two.facts.modelUsage);
    const call = {
      inputTokens: session.inputTokens - one.inputTokens,
      outputTokens: session.outputTokens - one.outputTokens,
      cacheReadInputTokens: session.cacheReadInputTokens - one.cacheReadInputTokens,
      cacheCreationInputTokens: session.cacheCreationInputTokens - one.cacheCreationInputTokens,
    };
    assertMeteredEqualsTranscript("resume-2", two.metered, call, two.facts.perMessageUsage);
    expect(call.inputTokens).toBe(60_000);
    // Error answers (529, 429) were passed on and metered at nothing; only the answers carry usage.
    expect(runs.get("overload-twice")!.metered.requests.map((q) => q.status)).toEqual([529, 529, 200]);
    expect(runs.get("overload-always")!.metered.meteredCostUsd).toBe(0);
  });

  it("flags only what a study would make invalid-setup: the scripted 60,000-token prompts of the resume (more than the request's bytes) and the refused HEAD", () => {
    for (const [name, r] of runs) {
      for (const problem of r.metered.setupProblems) {
        if (name === "traffic-default" && problem.includes("HEAD /api/hello")) continue;
        const [, tokens, bytes] = /claims (\d+) prompt tokens for a request of (\d+) bytes/.exec(problem) ?? [];
        expect(name.startsWith("resume"), `${name}: ${problem}`).toBe(true);
        expect(Number(tokens), problem).toBeGreaterThan(Number(bytes));
      }
    }
    expect(runs.get("traffic-runner")!.metered.setupProblems).toEqual([]);
  });
});
