/**
 * Every attempt kind under gVisor (`--runtime runsc`), with the REAL Claude Code 2.1.296 and the
 * scripted Messages API (no network, no cost): the demo pilot as a user runs it (both arms, the
 * MCP relay through the bind-mounted doc-bridge socket, the Messages API socket, the demo's
 * adjudication and report), a doc-bridge attempt and its adjudicator through the model gateway's
 * socket, a session call and its resume, and the strict profile's proxy. The engine registers
 * runsc as .ci/run does (ptrace, network none, host unix sockets open; docs/isolation.md,
 * "gVisor"); a missing runsc is a failure here, never a skip. Which runtime ran each container
 * is what the engine reports, recorded per run in the ledger, the adjudication record and the
 * session ledger.
 */
import { createHash } from "node:crypto";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { createServer, type AddressInfo, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, type CliResult } from "../support/cli.ts";
import { readLedger } from "../../src/ledger/store.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import { runAdjudication } from "../../src/adjudicate/run.ts";
import { planAdjudication } from "../../src/adjudicate/plan.ts";
import { readRecord } from "../../src/adjudicate/store.ts";
import type { AdjudicationRecord } from "../../src/adjudicate/schema.ts";
import { DEFAULT_ADJUDICATOR_MODELS } from "../../src/cost/models.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { runStudy } from "../../src/study/run.ts";
import { startSessions } from "../../src/session/run.ts";
import type { SessionLedger } from "../../src/session/schema.ts";
import { makeSessionDemo, sessionDemoScripts } from "../../src/demo/sessions.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { makeTestCa } from "../support/test-ca.ts";
import { armGuessScripts, correctVerdictScripts, MCP_SCRIPT } from "./scripts.ts";
import { MODEL, prepareCorpus, realImage, runConformanceStudy, runtime, startStudyApi, type Corpus, type StudyApi, type StudyRun } from "./support.ts";

const RUNSC = "runsc";
const quietErr = () => new Writable({ write: (_c, _e, cb) => cb() });

let image = "";
let corpus: Corpus;
beforeAll(async () => {
  // CI registers runsc (.ci/run); an engine without it fails this file, it does not skip it.
  expect((await runtime.ping()).runtimes).toContain(RUNSC);
  image = (await realImage()).id; // by id: other checkouts on this engine retag the same name
  corpus = await prepareCorpus("gvisor");
}, 600_000);
afterAll(async () => {
  await corpus?.cleanup();
});

describe("demo --pilot --real-cli --runtime runsc", () => {
  let work = "";
  let run: CliResult;
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "sr-conf-gvisor-demo-"));
    run = await runCli(["demo", "--pilot", "--real-cli", "--runtime", RUNSC, "--quiet", "--workdir", work], { timeoutMs: 400_000 });
  }, 420_000);
  afterAll(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  // contract: R170, R173
  it("completes both arms (the doc-bridge through its bind-mounted socket), the adjudication and the report, every container under runsc", async () => {
    expect(run.code, run.stderr).toBe(0);
    const ledgers = join(work, "ledgers");
    const names = await readdir(ledgers);
    const ledger = await readLedger(join(ledgers, names.find((f) => /^run-.*\.json$/.test(f) && !f.endsWith(".adjudication.json"))!));
    expect(ledger.runtime).toBe(RUNSC);
    expect(ledger.observations.map((o) => [o.arm, o.status, o.runtime])).toEqual([
      ["repository", "completed", RUNSC],
      ["mcp", "completed", RUNSC],
    ]);
    expect(ledger.observations[1]!.toolCallsByName).toEqual({ "mcp__doc-bridge__doc_search": 1, "mcp__doc-bridge__doc_get": 1 });
    // The adjudicator runs where the attempts ran: the ledger's runtime.
    const record = await readRecord(join(ledgers, names.find((f) => f.endsWith(".adjudication.json"))!));
    expect(record.adjudicator.runtime).toBe(RUNSC);
    expect(record.items.map((i) => i.run?.runtime)).toEqual([RUNSC, RUNSC]);
    // The report says it, for the run and for each attempt.
    // The run's summary comes first on stdout, then the demo's own object.
    const { demo } = JSON.parse(run.stdout.slice(run.stdout.lastIndexOf('{\n  "demo"'))) as { demo: { report: { markdown: string } } };
    const markdown = await readFile(demo.report.markdown, "utf8");
    expect(markdown).toMatch(/\| isolation \| runtime \|/);
    expect(markdown.match(/\| runsc \|/g)?.length).toBeGreaterThanOrEqual(3);
  });
});

describe("a doc-bridge attempt through the model gateway, and its adjudicator, under runsc", () => {
  let studyApi: StudyApi;
  let graderApi: StudyApi;
  let run: StudyRun;
  let record: AdjudicationRecord;
  let code = -1;
  beforeAll(async () => {
    studyApi = await startStudyApi([MCP_SCRIPT]);
    run = await runConformanceStudy({ corpus, api: studyApi, image, plan: "mcp", runtime: RUNSC });
    const ledger = run.ledger;
    const loaded = await loadManifest(DEMO_MANIFEST);
    const expected = loaded.manifest.tasks[0]!.expected.length;
    const scripts = correctVerdictScripts(ledger, expected);
    graderApi = await startStudyApi([...armGuessScripts(planAdjudication(ledger, loaded.manifest, 7).items), ...scripts]);
    if (graderApi.route !== "gateway") throw new Error("the adjudicator runs through the gateway");
    const bytes = await readFile(run.summary.ledger);
    const output = join(await mkdtemp(join(corpus.work, "adjudication-")), "adjudication.json");
    code = await runAdjudication(
      {
        ledgerPath: run.summary.ledger,
        ledger,
        ledgerSha256: createHash("sha256").update(bytes).digest("hex"),
        loaded,
        roots: corpus.roots,
        model: DEFAULT_ADJUDICATOR_MODELS[0]!,
        forceSameModel: false,
        capUsd: 5,
        itemBudgetUsd: 2,
        seed: 7,
        output,
        image,
        expectedCliVersion: CLAUDE_CODE_VERSION,
        isolation: "offline",
        claudeConfigDir: corpus.loginDir,
        credentials: "gateway",
        gatewayUpstream: graderApi.gateway,
        runtime: ledger.runtime!,
        timeoutMs: 120_000,
        quiet: true,
      },
      { runtime, stdout: () => {}, stderr: quietErr() },
    );
    record = await readRecord(output);
  }, 600_000);
  afterAll(async () => {
    await studyApi?.close();
    await graderApi?.close();
  });

  // contract: R170
  it("the attempt completes with the doc-bridge tools and metered usage equal to its transcript's", () => {
    expect(run.code, run.stderr).toBe(0);
    expect(run.ledger).toMatchObject({ runtime: RUNSC, credentials: "gateway" });
    const [obs] = run.ledger.observations;
    expect(obs).toMatchObject({ arm: "mcp", status: "completed", runtime: RUNSC });
    expect(obs!.toolCallsByName).toEqual({ "mcp__doc-bridge__doc_search": 1, "mcp__doc-bridge__doc_get": 1 });
    expect(obs!.gateway?.requests.length).toBeGreaterThan(0);
  });

  // contract: R173
  it("the adjudicator's real CLI answers through StructuredOutput under runsc", () => {
    expect(code).toBe(0);
    expect(record.adjudicator).toMatchObject({ runtime: RUNSC, credentials: "gateway" });
    expect(record.items).toHaveLength(1);
    expect(record.items[0]).toMatchObject({ outcome: "correct", decidedBy: "adjudicator" });
    expect(record.items[0]!.run?.runtime).toBe(RUNSC);
  });
});

describe("a session call and its resume under runsc", () => {
  let api: ScriptedApi;
  let ledger: SessionLedger;
  let exitCode = -1;
  beforeAll(async () => {
    const demo = await makeSessionDemo(join(corpus.work, "sessions"));
    const ca = makeTestCa();
    api = await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, script: sessionDemoScripts() });
    const out = await mkdtemp(join(corpus.work, "session-ledger-"));
    ({ ledger, exitCode } = await startSessions(
      {
        manifestPath: demo.manifestPath,
        roots: new Map(Object.entries(demo.roots)),
        output: join(out, "sessions.json"),
        model: MODEL,
        image,
        expectedCliVersion: CLAUDE_CODE_VERSION,
        ociRuntime: RUNSC,
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
    ));
  }, 600_000);
  afterAll(async () => {
    await api?.close();
  });

  // contract: R170
  it("asks, is answered, resumes the same session in a fresh runsc container, and its tests pass", () => {
    expect(exitCode).toBe(0);
    expect(ledger.runtime).toBe(RUNSC);
    for (const s of ledger.sessions) {
      expect(s.state).toBe("done");
      expect(s.calls.map((c) => [c.mode, c.status, c.runtime])).toEqual([
        ["start", "completed", RUNSC],
        ["resume", "completed", RUNSC],
      ]);
      // The resume continued the CLI's own session: the id it reported is the session's.
      expect(s.calls[1]!.sessionIdReported).toBe(s.id);
      expect(s.test?.exitCode).toBe(0);
    }
  });
});

describe("the strict profile's proxy under runsc", () => {
  let sink: Server;
  const firstBytes: Buffer[] = [];
  let ledger: Ledger;
  beforeAll(async () => {
    sink = createServer((s) => {
      s.on("error", () => {});
      s.once("data", (d: Buffer) => {
        firstBytes.push(d.subarray(0, 3));
        s.destroy();
      });
    });
    await new Promise<void>((r) => sink.listen(0, "127.0.0.1", r));
    const port = (sink.address() as AddressInfo).port;
    const loaded = await loadManifest(DEMO_MANIFEST);
    const plan = planStudy(loaded.manifest, "pilot")
      .filter((a) => a.arm === "repository")
      .map((a) => ({ ...a, index: 0 }));
    const output = join(await mkdtemp(join(corpus.work, "strict-")), "strict.json");
    await runStudy(
      {
        loaded,
        mode: "pilot",
        plan,
        fullPlanSize: planStudy(loaded.manifest, "full").length,
        roots: corpus.roots,
        model: MODEL,
        capUsd: 1,
        attemptBudgetUsd: 0.1,
        output,
        image,
        expectedCliVersion: CLAUDE_CODE_VERSION,
        isolation: "strict",
        runtime: RUNSC,
        // Every allowed name goes to the loopback sink: nothing leaves the machine.
        testHooks: { egress: { resolve: async () => ({ address: "127.0.0.1", port }) } },
        docBridgeCommand: referenceEngineCommand(),
        claudeConfigDir: corpus.loginDir,
        timeoutMs: 15_000,
        quiet: true,
      },
      { runtime, stdout: () => {}, stderr: quietErr() },
    );
    ledger = await readLedger(output);
  }, 300_000);
  afterAll(async () => {
    await new Promise<void>((r) => sink?.close(() => r()));
  });

  // contract: R170
  it("the real CLI's TLS leaves the runsc container only through the proxy, to the allowed API host", () => {
    expect(ledger).toMatchObject({ isolation: "strict", runtime: RUNSC, credentials: "login-copy" });
    const obs = ledger.observations[0]!;
    expect(obs.runtime).toBe(RUNSC);
    const hosts = new Set(obs.egress!.entries.map((e) => `${e.host}:${e.port}:${e.allowed}`));
    expect([...hosts]).toEqual(["api.anthropic.com:443:true"]);
    // A TLS handshake record (0x16 0x03 ...) reached the sink through the tunnel.
    expect(firstBytes.length).toBeGreaterThan(0);
    expect(firstBytes[0]![0]).toBe(0x16);
  });
});
