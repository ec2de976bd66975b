/**
 * Acceptance of the model gateway with the REAL Claude Code 2.1.296 in the real image: the
 * scripted Messages API is the gateway's upstream over TLS on loopback (a test CA made here with
 * openssl); the containers get a placeholder login and no network; the runner holds the
 * (test) credential on the host.
 */
import { createHash } from "node:crypto";
import { createServer as createTlsServer } from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startScriptedApi, type RecordedRequest, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import type { Turn } from "../../src/stand-ins/scripted-api/script.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { makeTestCa, type TestCa } from "../support/test-ca.ts";
import { runCli } from "../support/cli.ts";
import { assertMeteredEqualsTranscript, prepareCorpus, realImage, runConformanceStudy, scanContainers, TEST_TOKEN, type ContainerScan, type Corpus } from "./support.ts";
import { pilotScripts } from "./scripts.ts";

const sha12 = (t: string) => createHash("sha256").update(t).digest("hex").slice(0, 12);

/** `ledger check` and `ledger verify` of a ledger a run wrote: both must exit 0. */
async function expectLedgerPasses(path: string): Promise<void> {
  const check = await runCli(["ledger", "check", path]);
  expect(check.code, check.stdout + check.stderr).toBe(0);
  const verify = await runCli(["ledger", "verify", path]);
  expect(verify.code, verify.stdout + verify.stderr).toBe(0);
}

let ca: TestCa;
let image: { tag: string; id: string };
beforeAll(async () => {
  ca = makeTestCa();
  image = await realImage();
}, 600_000);

describe("the pilot through the gateway", () => {
  let corpus: Corpus;
  let api: ScriptedApi;
  const scans = new Map<string, ContainerScan>();
  let run: Awaited<ReturnType<typeof runConformanceStudy>>;
  beforeAll(async () => {
    corpus = await prepareCorpus("gateway-pilot");
    api = await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, script: pilotScripts(), onRequest: () => scanContainers(scans, { [LABELS.pid]: String(process.pid) }) });
    run = await runConformanceStudy({ corpus, gateway: { url: api.url!, ca: ca.ca }, image: image.id, plan: "pilot", timeoutMs: 120_000 });
  }, 600_000);
  afterAll(async () => {
    await api?.close();
    await corpus?.cleanup();
  });

  it("completes both arms with metered usage equal to the transcript's", () => {
    expect(run.ledger.credentials).toBe("gateway");
    expect(run.ledger.observations.map((o) => o.status)).toEqual(["completed", "completed"]);
    for (const o of run.ledger.observations) {
      const g = o.gateway!;
      const metered = g.requests.filter((r) => r.messageId !== null);
      expect(metered.length).toBeGreaterThan(0);
      assertMeteredEqualsTranscript(`observation ${o.index}`, g, o);
      expect(g.setupProblems).toEqual([]);
      expect(g.refused).toBe(0);
      expect(metered.every((r) => r.ttfbMs !== null && r.complete)).toBe(true);
    }
  });

  it("keeps the real credential out of every container: the upstream saw only it, the containers only placeholders", () => {
    const messages = api.requests.filter((r) => r.path.startsWith("/v1/messages"));
    expect(messages.length).toBeGreaterThan(0);
    expect(new Set(messages.map((r) => r.auth.bearerSha256Prefix))).toEqual(new Set([sha12(TEST_TOKEN)]));
    expect(messages.every((r) => !r.auth.apiKey)).toBe(true);
    expect(scans.size).toBe(2);
    for (const s of scans.values()) {
      expect(s.envHasRealToken).toBe(false);
      expect(s.envNames).not.toContain("ANTHROPIC_API_KEY");
      expect(s.mountFilesWithRealToken).toEqual([]);
      expect(s.placeholderFiles).toBeGreaterThan(0);
    }
  });

  it("runs every attempt container with network none and only the loopback interface", () => {
    for (const s of scans.values()) {
      expect(s.networkMode).toBe("none");
      expect(s.interfaces).toEqual(["lo"]);
    }
  });
});

describe("the host-enforced ceiling", () => {
  let corpus: Corpus;
  let api: ScriptedApi;
  let run: Awaited<ReturnType<typeof runConformanceStudy>>;
  const RESERVATION = 0.2;
  beforeAll(async () => {
    corpus = await prepareCorpus("gateway-ceiling");
    // A conversation that grows as a real one does: each prompt is about the request's size in
    // tokens (a quarter of its bytes), so it holds the previous prompt, its output (the long text
    // the CLI sends back) and the tool result; each answer writes 8,000 tokens of text and reads a file.
    const respond = ({ body, record }: { body: Record<string, unknown>; record: RecordedRequest }): Turn => {
      const bytes = Buffer.byteLength(JSON.stringify(body));
      return {
        text: `${"words ".repeat(5000)}turn ${record.body!.assistantTurns}`,
        toolCalls: [{ name: "Read", input: { file_path: "/workspace/README.md" } }],
        usage: { input_tokens: Math.floor(bytes / 4), output_tokens: 8000, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 },
      };
    };
    api = await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, respond });
    run = await runConformanceStudy({ corpus, gateway: { url: api.url!, ca: ca.ca }, image: image.id, plan: "repository", attemptBudgetUsd: RESERVATION, capUsd: 1, timeoutMs: 120_000 });
  }, 600_000);
  afterAll(async () => {
    await api?.close();
    await corpus?.cleanup();
  });

  it("refuses the turn that would pass the reservation before it is sent; the spend stays under it; the attempt is budget-exceeded", () => {
    const o = run.ledger.observations[0]!;
    expect(o.status).toBe("budget-exceeded");
    const g = o.gateway!;
    const refusedAt = g.requests.findIndex((r) => r.refused?.kind === "budget");
    expect(refusedAt).toBeGreaterThan(0);
    // The upstream got exactly the forwarded requests: the refused turn never left the host.
    expect(api.requests.filter((r) => r.path.startsWith("/v1/messages")).length).toBe(g.forwarded);
    expect(g.meteredCostUsd).toBeLessThanOrEqual(RESERVATION);
    // Before the refused request, every forwarded one fit: metered so far plus its bound within the reservation.
    let spent = 0;
    for (const r of g.requests.slice(0, refusedAt)) {
      expect(spent + r.boundUsd!).toBeLessThanOrEqual(RESERVATION + 1e-12);
      spent += r.costUsd!;
    }
    expect(spent + g.requests[refusedAt]!.boundUsd!).toBeGreaterThan(RESERVATION);
    expect(o.setupProblems).toEqual([]);
    // Charge rules unchanged: a budget-exceeded attempt keeps its reservation charged.
    expect(o.chargedUsd).toBe(RESERVATION);
  });

  // contract: R174
  it("leaves a ledger that passes `ledger check` and `ledger verify`", async () => {
    await expectLedgerPasses(run.ledgerPath);
  });
});

describe("an upstream that cannot be reached", () => {
  let corpus: Corpus;
  let run: Awaited<ReturnType<typeof runConformanceStudy>>;
  beforeAll(async () => {
    corpus = await prepareCorpus("gateway-unreachable");
    // An upstream that answers the preflight's TLS handshake (contract R192) and then goes away:
    // a loopback TLS listener that stops listening once it has accepted that one connection (the
    // handshake still completes on it), so every request the CLI sends through the gateway meets
    // a port with no listener.
    const s = createTlsServer({ key: ca.key, cert: ca.cert }, (socket) => socket.destroy());
    s.once("connection", () => s.close());
    await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
    const port = (s.address() as { port: number }).port;
    // The CLI retries an unreachable API for minutes; 30 s of refused requests is enough to count, and the attempt ends timed-out.
    run = await runConformanceStudy({ corpus, gateway: { url: `https://127.0.0.1:${port}`, ca: ca.ca }, image: image.id, plan: "repository", timeoutMs: 30_000 });
    expect(s.listening).toBe(false);
  }, 600_000);
  afterAll(async () => {
    await corpus?.cleanup();
  });

  // contract: R174
  it("counts every request refused as unreachable, and its ledger passes `ledger check` and `ledger verify`", async () => {
    const g = run.ledger.observations[0]!.gateway!;
    expect(g.requests.length).toBeGreaterThan(0);
    expect(g.requests.map((r) => r.refused?.kind)).toEqual(g.requests.map(() => "upstream-unreachable"));
    expect(g.refused).toBe(g.requests.length);
    await expectLedgerPasses(run.ledgerPath);
  });
});

describe("metering against the transcript", () => {
  let corpus: Corpus;
  let api: ScriptedApi;
  let run: Awaited<ReturnType<typeof runConformanceStudy>>;
  beforeAll(async () => {
    corpus = await prepareCorpus("gateway-mismatch");
    // The stream restates a larger prompt in message_delta than message_start gave: the gateway
    // meters the newest figure; the CLI's per-message usage in its transcript keeps message_start's.
    api = await startScriptedApi({
      port: 0,
      tls: { key: ca.key, cert: ca.cert },
      script: { name: "mismatch", turns: [{ answer: "done", usage: { input_tokens: 1000, output_tokens: 10 }, deltaUsage: { input_tokens: 1500 } }] },
    });
    run = await runConformanceStudy({ corpus, gateway: { url: api.url!, ca: ca.ca }, image: image.id, plan: "repository", timeoutMs: 120_000 });
  }, 600_000);
  afterAll(async () => {
    await api?.close();
    await corpus?.cleanup();
  });

  it("makes the attempt invalid-setup when the transcript reports fewer tokens than the stream carried", () => {
    const o = run.ledger.observations[0]!;
    expect(o.gateway!.requests[0]!.inputTokens).toBe(1500);
    // Measured: the CLI's modelUsage takes the restated figure, its per-message usage keeps message_start's.
    expect(o.inputTokens).toBe(1500);
    expect(o.status).toBe("invalid-setup");
    expect(o.setupProblems.join("\n")).toMatch(/metered prompt 1500\/0\/0 vs transcript 1000\/0\/0/);
  });
});
