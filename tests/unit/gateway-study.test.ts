import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FakeRuntime, FakeProcess } from "../support/fake-runtime.ts";
import { fakeClaudeRuntime, unitStudyConfig } from "../support/unit-study.ts";
import { runStudy, type StudyConfig } from "../../src/study/run.ts";
import { loadManifest, type LoadedManifest } from "../../src/manifest/load.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { buildReport } from "../../src/report/build.ts";
import { CONTAINER } from "../../src/transport/cli/spec.ts";
import { ExitCode, RefusalError } from "../../src/util/errors.ts";
import { GATEWAY_SOCKET_NAME } from "../../src/gateway/gateway.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { makeTestCa, type TestCa } from "../support/test-ca.ts";
import { baseEvents, MODEL, toText } from "./transcript-fixtures.ts";

/**
 * The study in gateway mode on the in-memory runtime: containers are functions that talk to the
 * real gateway through the socket and the placeholder login the runner mounted for them; the
 * scripted API is the gateway's upstream over TLS with a test CA.
 */

let work: string;
let loaded: LoadedManifest;
let roots: Map<string, string>;
let ca: TestCa;
let api: ScriptedApi;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-unit-gw-"));
  const corpus = await makeDemoCorpus(join(work, "corpus"));
  roots = new Map(Object.entries(corpus).map(([n, { dir }]) => [n, dir]));
  loaded = await loadManifest(DEMO_MANIFEST);
  ca = makeTestCa();
  api = await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, script: { name: "s", turns: [{ answer: "ok", usage: { input_tokens: 10, output_tokens: 1 } }], neverEnd: false } });
}, 60_000);
afterAll(async () => {
  await api?.close();
  await rm(work, { recursive: true, force: true });
});

/** What the attempt's container was given: the placeholder in its login mount and its gateway socket. */
async function mounted(proc: FakeProcess): Promise<{ placeholder: string; socket: string }> {
  const login = proc.spec.mounts.find((m) => m.target === CONTAINER.loginDir)!.source;
  const creds = JSON.parse(await readFile(join(login, ".claude", ".credentials.json"), "utf8")) as { claudeAiOauth: { accessToken: string } };
  const dir = proc.spec.mounts.find((m) => m.target === CONTAINER.modelApiDir)!.source;
  return { placeholder: creds.claudeAiOauth.accessToken, socket: join(dir, GATEWAY_SOCKET_NAME) };
}

function send(socket: string, token: string, o: { model?: string; method?: string; path?: string } = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ model: o.model ?? MODEL, max_tokens: 100, stream: true, messages: [{ role: "user", content: "hi" }] });
    const req = request(
      { socketPath: socket, method: o.method ?? "POST", path: o.path ?? "/v1/messages?beta=true", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" } },
      (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode ?? 0));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const runtimeWith = (attempt: (n: number, proc: FakeProcess) => Promise<number>, o: { fakeImage?: boolean } = {}): FakeRuntime => fakeClaudeRuntime(attempt, o);

const answer = (proc: FakeProcess) => {
  proc.stdout.write(toText(baseEvents("repository")));
  return 0;
};

async function run(name: string, runtime: FakeRuntime, o: { attempts?: number; loginDir?: string; isolation?: StudyConfig["isolation"]; model?: string; upstream?: ScriptedApi } = {}) {
  const loginDir = o.loginDir ?? join(work, `login-${name}`);
  if (!o.loginDir) await writeTestLogin(loginDir);
  const config = unitStudyConfig({
    work,
    name,
    loaded,
    roots,
    loginDir,
    attempts: o.attempts ?? 2,
    overrides: { model: o.model ?? MODEL, isolation: o.isolation ?? "standard", credentials: "gateway", gatewayUpstream: { url: (o.upstream ?? api).url!, ca: ca.ca } },
  });
  let stdout = "";
  const code = await runStudy(config, { runtime, stdout: (t) => (stdout += t), stderr: process.stderr });
  return { code, stdout, ledger: await readLedger(config.output), loginDir, config };
}

describe("the study through the gateway (in-memory runtime)", () => {
  it("gives each container a placeholder login, network none in every profile, and forwards its requests with the host credential", async () => {
    const seen: Array<{ placeholder: string; status: number }> = [];
    const runtime = runtimeWith(async (_n, proc) => {
      const m = await mounted(proc);
      seen.push({ placeholder: m.placeholder, status: await send(m.socket, m.placeholder) });
      return answer(proc);
    });
    const r = await run("ok", runtime, { isolation: "standard" });
    expect(r.code).toBe(ExitCode.ok);
    expect(r.ledger.credentials).toBe("gateway");
    expect(r.ledger.observations.map((o) => o.status)).toEqual(["completed", "completed"]);
    expect(seen.map((s) => s.status)).toEqual([200, 200]);
    expect(seen[0]!.placeholder).toMatch(/^study-runner-placeholder-[0-9a-f]{48}$/);
    expect(seen[0]!.placeholder).not.toBe(seen[1]!.placeholder);
    for (const spec of runtime.created.filter((s) => !s.cmd.includes("--version"))) {
      expect(spec.networkMode).toBe("none");
      expect(spec.env.ANTHROPIC_BASE_URL).toBe("http://127.0.0.1:8080");
      expect(Object.keys(spec.env).filter((k) => /PROXY/i.test(k))).toEqual([]);
    }
    expect(r.ledger.observations[0]!.gateway!.requests[0]).toMatchObject({ status: 200, inputTokens: 10, outputTokens: 1, refused: null });
  });

  it("makes the attempt invalid-setup when its container asks for a foreign model or an unlisted path, and records both", async () => {
    const runtime = runtimeWith(async (_n, proc) => {
      const m = await mounted(proc);
      await send(m.socket, m.placeholder, { model: "claude-opus-5-5" });
      await send(m.socket, m.placeholder, { method: "HEAD", path: "/api/hello" });
      return answer(proc);
    });
    const r = await run("foreign", runtime, { attempts: 1 });
    const o = r.ledger.observations[0]!;
    expect(o.status).toBe("invalid-setup");
    expect(o.gateway!.requests.map((q) => q.refused?.kind)).toEqual(["model", "path"]);
    expect(o.setupProblems.join("\n")).toMatch(/gateway: gateway refused POST .*claude-opus-5-5/);
    // The gateway's refusals first, by kind, then the transcript's reading (contract R194).
    expect(r.ledger.statusReason).toMatch(/ended invalid-setup: the gateway refused 1 request \(400, model: .*\), 1 request \(404, path: .*\); then gateway: gateway refused/);
  });

  // contract: R194
  it("names the gateway's errors first when the upstream stops answering mid-run: the summary, the ledger and the report's gaps", async () => {
    const failing = await startScriptedApi({
      port: 0,
      tls: { key: ca.key, cert: ca.cert },
      script: { name: "s", turns: [{ answer: "ok", usage: { input_tokens: 10, output_tokens: 1 } }], neverEnd: false },
    });
    const runtime = runtimeWith(async (_n, proc) => {
      const m = await mounted(proc);
      // The upstream answered the preflight's handshake; now it is gone.
      await failing.close();
      await send(m.socket, m.placeholder);
      await send(m.socket, m.placeholder);
      proc.stdout.write(toText(baseEvents("repository").slice(0, 1)));
      return 1;
    });
    const r = await run("unreached", runtime, { attempts: 1, upstream: failing });
    expect(r.code).toBe(ExitCode.blocked);
    const o = r.ledger.observations[0]!;
    expect(o.status).not.toBe("completed");
    const cause = "the model API was not reached (502, ECONNREFUSED, 2 requests)";
    expect(r.ledger.statusReason).toContain(`ended ${o.status}: ${cause}; then `);
    expect(r.stdout).toContain(cause);
    const report = buildReport({ ledger: r.ledger, ledgerSha256: "0".repeat(64), record: null, manifest: loaded.manifest });
    expect(report.gaps).toContainEqual(expect.stringContaining(`: attempt ${o.status} (${cause})`));
    expect(report.gaps.join("\n")).not.toMatch(/modelUsage has no entry/);
  });

  it("makes the attempt invalid-setup when its container uses another attempt's placeholder", async () => {
    let first = "";
    const runtime = runtimeWith(async (n, proc) => {
      const m = await mounted(proc);
      if (n === 0) first = m.placeholder;
      else expect(await send(m.socket, first)).toBe(401);
      return answer(proc);
    });
    const r = await run("other", runtime);
    expect(r.ledger.observations.map((o) => o.status)).toEqual(["completed", "invalid-setup"]);
    expect(r.ledger.observations[1]!.gateway!.requests[0]!.refused?.kind).toBe("foreign-placeholder");
  });

  it("refuses to start when the host login would expire during an attempt, and stops the run blocked when it would at a later attempt", async () => {
    const loginDir = join(work, "login-expiring");
    await writeTestLogin(loginDir);
    const path = join(loginDir, ".credentials.json");
    const setExpiry = async (ms: number) => {
      const login = JSON.parse(await readFile(path, "utf8"));
      login.claudeAiOauth.expiresAt = ms;
      await writeFile(path, JSON.stringify(login));
    };
    await setExpiry(Date.now() + 60_000);
    await expect(
      run(
        "expiring-start",
        runtimeWith(async (_n, proc) => answer(proc)),
        { loginDir },
      ),
    ).rejects.toBeInstanceOf(RefusalError);

    await setExpiry(Date.parse("2099-01-01T00:00:00Z"));
    const runtime = runtimeWith(async (n, proc) => {
      // Another process refreshes the host login to one that ends within the next attempt.
      if (n === 0) await setExpiry(Date.now() + 60_000);
      return answer(proc);
    });
    const r = await run("expiring-later", runtime, { loginDir });
    expect(r.code).toBe(ExitCode.blocked);
    expect(r.ledger.status).toBe("blocked");
    expect(r.ledger.observations.map((o) => o.status)).toEqual(["completed"]);
    expect(r.ledger.statusReason).toMatch(/^attempt 2 not started, nothing reserved: the Claude login .* expires at .*run `claude` on this machine once/);
  });

  it("refuses, before anything is reserved, a per-attempt limit that cannot hold one request of the model through the gateway", async () => {
    // An image that is not the fake: its CLI would send real requests.
    const runtime = runtimeWith(async (_n, proc) => answer(proc), { fakeImage: false });
    const err = await run("limit-too-small", runtime, { model: "claude-sonnet-5-5" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RefusalError);
    expect((err as Error).message).toMatch(/^--attempt-budget-usd 0\.1 USD cannot hold one request of claude-sonnet-5-5 through the gateway/);
    expect(runtime.created.filter((spec) => !spec.cmd.includes("--version"))).toHaveLength(0);
  });
});
