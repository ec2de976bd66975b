import { contentDigest } from "../../src/transcript/content.ts";
import { mkdtemp, writeFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { meteredCostPico, requestBound, SseMeter } from "../../src/gateway/meter.ts";
import { compareMeteredUsage } from "../../src/gateway/check.ts";
import { readCredential, resolveCredentialSource, SETUP_TOKEN_ENV } from "../../src/gateway/credential.ts";
import { CLI_MAX_TOKENS, gatewayForRun, gatewayLimitProblem, prepareRunGateway } from "../../src/gateway/run.ts";
import { picoToUsd } from "../../src/cost/money.ts";
import type { GatewayRecord, GatewayRequestRecord } from "../../src/gateway/gateway.ts";
import { resolveLogin } from "../../src/credentials/login.ts";
import { RefusalError } from "../../src/util/errors.ts";

const MODEL = "claude-haiku-5-5";

const events = [
  `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { id: "msg_1", model: MODEL, usage: { input_tokens: 100, cache_read_input_tokens: 5, cache_creation_input_tokens: 30, cache_creation: { ephemeral_5m_input_tokens: 10, ephemeral_1h_input_tokens: 20 }, output_tokens: 1 } } })}\n\n`,
  `event: content_block_delta\ndata: ${JSON.stringify({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "héllo\n\nworld" } })}\n\n`,
  `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 42, server_tool_use: { web_search_requests: 2, web_fetch_requests: 0 } } })}\n\n`,
  `event: message_stop\ndata: {"type":"message_stop"}\n\n`,
].join("");

describe("the streaming meter", () => {
  it("reads id, model, every kind of token and reported server-tool use however the stream is cut into chunks", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 40 }), { minLength: 1, maxLength: 200 }), (cuts) => {
        const bytes = Buffer.from(events);
        const m = new SseMeter();
        let at = 0;
        for (const c of cuts) {
          if (at >= bytes.length) break;
          m.push(bytes.subarray(at, at + c));
          at += c;
        }
        if (at < bytes.length) m.push(bytes.subarray(at));
        m.end();
        expect(m.facts).toEqual({
          messageId: "msg_1",
          model: MODEL,
          complete: true,
          usage: { inputTokens: 100, cacheReadInputTokens: 5, cacheWrite5mInputTokens: 10, cacheWrite1hInputTokens: 20, outputTokens: 42 },
          serverToolUse: "web_search_requests=2",
          // The stream carries no content block: the digest of empty content.
          contentSha256: contentDigest([]),
        });
      }),
    );
  });
});

describe("the request bound", () => {
  it("is never below the cost of any usage the request could produce (prompt at most its bytes, output at most max_tokens)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4_000_000 }), fc.integer({ min: 1, max: 128_000 }), fc.array(fc.nat(), { minLength: 4, maxLength: 4 }), fc.nat(), (bytes, maxTokens, parts, out) => {
        // Split at most `bytes` prompt tokens over the four kinds.
        const total = parts.reduce((a, b) => a + b, 0) || 1;
        const scale = (n: number) => Math.floor((n / total) * bytes);
        const u = {
          inputTokens: scale(parts[0]!),
          cacheReadInputTokens: scale(parts[1]!),
          cacheWrite5mInputTokens: scale(parts[2]!),
          cacheWrite1hInputTokens: scale(parts[3]!),
          outputTokens: out % (maxTokens + 1),
        };
        expect(meteredCostPico(MODEL, u)).toBeLessThanOrEqual(requestBound(MODEL, bytes, maxTokens).costPico);
      }),
    );
  });

  it("prices at the second tier once the body could hold more prompt tokens than the first tier allows", () => {
    // The body's bytes plus the API's own preamble (8,192 tokens) against the 100,000-token boundary.
    expect(requestBound(MODEL, 100_000 - 8192, 1000).tier).toBe(1);
    expect(requestBound(MODEL, 100_001 - 8192, 1000).tier).toBe(2);
    // haiku-5-5 (measured table): 1-hour writes 0.2 / 1 USD per Mtok, output 0.5 / 2.5.
    expect(requestBound(MODEL, 100_000 - 8192, 128_000).costPico).toBe(100_000n * 200_000n + 128_000n * 500_000n);
    expect(requestBound(MODEL, 100_001 - 8192, 128_000).costPico).toBe(100_001n * 1_000_000n + 128_000n * 2_500_000n);
  });
});

function request(over: Partial<GatewayRequestRecord>): GatewayRequestRecord {
  return {
    seq: 0,
    method: "POST",
    path: "/v1/messages",
    status: 200,
    requestBytes: 10_000,
    requestModel: MODEL,
    messageId: "msg_1",
    model: MODEL,
    inputTokens: 100,
    cacheReadInputTokens: 0,
    cacheWrite5mInputTokens: 0,
    cacheWrite1hInputTokens: 0,
    outputTokens: 10,
    complete: true,
    boundUsd: 0.1,
    costUsd: 0.00001,
    ttfbMs: 1,
    durationMs: 2,
    refused: null,
    ...over,
  };
}
const record = (requests: GatewayRequestRecord[]): GatewayRecord => ({ requests, dropped: 0, forwarded: requests.length, refused: 0, meteredCostUsd: 0, budgetRefused: false, setupProblems: [] });
const modelUsage = (input: number, output: number) =>
  ({ [MODEL]: { inputTokens: input, outputTokens: output, cacheReadInputTokens: 0, cacheCreationInputTokens: 0, costUSD: 0, costBasis: "list" } }) as never;

describe("metered against transcript usage", () => {
  it("agrees when every figure matches, and names each difference otherwise", () => {
    const r = record([request({})]);
    expect(compareMeteredUsage(r, { modelUsage: modelUsage(100, 10), perMessageUsage: [{ messageId: "msg_1", inputTokens: 100, cacheReadInputTokens: 0, cacheCreationInputTokens: 0 }] })).toEqual([]);
    expect(compareMeteredUsage(r, { modelUsage: modelUsage(90, 10), perMessageUsage: [] })).toEqual(["metered usage differs from the transcript's modelUsage: input metered 100 vs transcript 90"]);
    expect(compareMeteredUsage(r, { modelUsage: modelUsage(100, 10), perMessageUsage: [{ messageId: "msg_2", inputTokens: 5, cacheReadInputTokens: 0, cacheCreationInputTokens: 0 }] })[0]).toMatch(
      /never metered/,
    );
    expect(compareMeteredUsage(record([request({ complete: false })]), { modelUsage: modelUsage(100, 10), perMessageUsage: [] })[0]).toMatch(/broke off/);
  });
});

describe("the credential", () => {
  it("refuses a host login that would expire during the attempt, saying how to refresh it, before anything is reserved", async () => {
    const dir = await mkdtemp(join(tmpdir(), "sr-gw-cred-"));
    try {
      const login = resolveLogin({ configDir: dir });
      const expiresAt = Date.now() + 60_000;
      await writeFile(login.credentialsPath, JSON.stringify({ claudeAiOauth: { accessToken: "test-token-not-real", refreshToken: "r", expiresAt } }), { mode: 0o600 });
      const source = await resolveCredentialSource({ login, env: {} });
      await expect(readCredential(source, { mustLastUntil: Date.now() + 10 * 60_000 })).rejects.toThrow(/expires at .*run `claude` on this machine once so it refreshes its login/);
      await expect(prepareRunGateway({ model: MODEL, login, timeoutMs: 5 * 60_000 })).rejects.toBeInstanceOf(RefusalError);
      expect((await readCredential(source, { mustLastUntil: Date.now() + 1000 })).token).toBe("test-token-not-real");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("takes a setup token from the environment and removes it there, so no child inherits it", async () => {
    const env: NodeJS.ProcessEnv = { [SETUP_TOKEN_ENV]: "test-setup-token-not-real" };
    const source = await resolveCredentialSource({ login: resolveLogin({ configDir: "/nonexistent" }), env });
    expect(source).toMatchObject({ kind: "setup-token", token: "test-setup-token-not-real" });
    expect(env[SETUP_TOKEN_ENV]).toBeUndefined();
    await expect(resolveCredentialSource({ login: resolveLogin({ configDir: "/nonexistent" }), env: { [SETUP_TOKEN_ENV]: "two words" } })).rejects.toThrow(/visible ASCII/);
  });
});

describe("a limit too small for one request through the gateway", () => {
  it("is refused before anything is reserved, naming the flag, the floor and both ways out; a limit that holds one request passes", () => {
    const floor = (model: string) => picoToUsd(requestBound(model, 0, CLI_MAX_TOKENS).costPico);
    // The default adjudicator at the default item budget: every request would be refused.
    expect(floor("claude-sonnet-5-5")).toBeGreaterThan(0.1);
    const problem = gatewayLimitProblem("claude-sonnet-5-5", 0.1, "--item-budget-usd");
    expect(problem).toContain("--item-budget-usd 0.1 USD cannot hold one request of claude-sonnet-5-5");
    expect(problem).toContain(String(floor("claude-sonnet-5-5")));
    expect(problem).toContain("--credentials login-copy");
    expect(gatewayLimitProblem("claude-sonnet-5-5", floor("claude-sonnet-5-5"), "--item-budget-usd")).toBeNull();
    expect(gatewayLimitProblem("claude-haiku-5-5", 0.1, "--item-budget-usd")).toBeNull();
  });
});

describe("gatewayForRun: the one place every kind (study, adjudication, sessions) gets its gateway", () => {
  const sonnet = "claude-sonnet-5-5";
  const tooSmall = { usd: 0.001, flag: "--item-budget-usd" };

  it("makes none with login-copy, refuses a Messages API socket, and holds the limit to one request unless the image is the fake one", async () => {
    const dir = await mkdtemp(join(tmpdir(), "sr-gw-for-run-"));
    try {
      const login = resolveLogin({ configDir: dir });
      await writeFile(login.credentialsPath, JSON.stringify({ claudeAiOauth: { accessToken: "test-token-not-real", refreshToken: "r", expiresAt: Date.now() + 86_400_000 } }), { mode: 0o600 });
      const o = { model: sonnet, login, holder: "test", limit: tooSmall, fakeImage: false };
      // Login-copy: no gateway, and not even the too-small limit is looked at.
      expect(await gatewayForRun({ credentials: "login-copy" }, o)).toBeUndefined();
      expect(await gatewayForRun({}, o)).toBeUndefined();
      await expect(gatewayForRun({ credentials: "gateway", modelApi: { socketPath: "/nowhere.sock" } }, o)).rejects.toThrow(
        /Messages API socket \(--model-api-socket\) bypasses the gateway; use --credentials login-copy/,
      );
      await expect(gatewayForRun({ credentials: "gateway" }, o)).rejects.toThrow(/^--item-budget-usd 0\.001 USD cannot hold one request of claude-sonnet-5-5 through the gateway/);
      // The fake image sends no request: the same limit starts a gateway.
      const fake = await gatewayForRun({ credentials: "gateway" }, { ...o, fakeImage: true });
      expect(fake?.source.kind).toBe("host-login");
      fake?.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
