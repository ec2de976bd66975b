import { readFile, writeFile } from "node:fs/promises";
import { createServer, type AddressInfo, type Server } from "node:net";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadManifest } from "../../src/manifest/load.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { runStudy } from "../../src/study/run.ts";
import { readLedger } from "../../src/ledger/store.ts";
import type { Observation } from "../../src/ledger/schema.ts";
import { DEFAULT_EGRESS_ALLOW } from "../../src/isolation/policy.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { MODEL, prepareCorpus, realImage, runtime, type Corpus } from "./support.ts";

// The real Claude Code 2.1.296 under --isolation strict (issue 9), no model API socket: the CLI
// must find its way out through HTTPS_PROXY alone. The test resolver sends every allowed name to
// a loopback sink that reads the first bytes (a TLS ClientHello) and hangs up, so nothing leaves
// the machine and nothing is spent; the attempt then ends in API retries and the runner's timeout.
// What is measured is which hosts the CLI asks the proxy for.

let corpus: Corpus;
let image = "";
let sink: Server;
let port = 0;
const firstBytes: Buffer[] = [];

beforeAll(async () => {
  corpus = await prepareCorpus("iso-strict");
  image = (await realImage()).id; // by id: other checkouts on this engine retag the same name
  sink = createServer((s) => {
    s.on("error", () => {});
    s.once("data", (d: Buffer) => {
      firstBytes.push(d.subarray(0, 8));
      s.destroy();
    });
  });
  await new Promise<void>((r) => sink.listen(0, "127.0.0.1", r));
  port = (sink.address() as AddressInfo).port;
}, 600_000);
afterAll(async () => {
  await new Promise<void>((r) => sink?.close(() => r()));
  await corpus?.cleanup();
});

async function strictAttempt(name: string): Promise<{ obs: Observation; resolved: string[] }> {
  const loaded = await loadManifest(DEMO_MANIFEST);
  const plan = planStudy(loaded.manifest, "pilot")
    .filter((a) => a.arm === "repository")
    .map((a) => ({ ...a, index: 0 }));
  const output = join(corpus.work, `${name}.json`);
  const resolved: string[] = [];
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
      expectedCliVersion: "2.1.296",
      isolation: "strict",
      testHooks: {
        egress: {
          resolve: async (host) => {
            resolved.push(host);
            return { address: "127.0.0.1", port };
          },
        },
      },
      docBridgeCommand: referenceEngineCommand(),
      claudeConfigDir: corpus.loginDir,
      timeoutMs: 12_000,
      quiet: true,
    },
    { runtime, stdout: () => {}, stderr: new Writable({ write: (_c, _e, cb) => cb() }) },
  );
  const ledger = await readLedger(output);
  expect(ledger).toMatchObject({ isolation: "strict", egressAllow: [...DEFAULT_EGRESS_ALLOW] });
  return { obs: ledger.observations[0]!, resolved };
}

describe("the real CLI under --isolation strict", () => {
  it("sends its Messages API traffic as TLS through the proxy to api.anthropic.com:443, and asks for nothing else", async () => {
    const { obs, resolved } = await strictAttempt("fresh-login");
    const egress = obs.egress!;
    expect(egress.requests).toBeGreaterThan(0);
    expect(egress.refused).toBe(0);
    expect(new Set(egress.entries.map((e) => `${e.host}:${e.port}`))).toEqual(new Set(["api.anthropic.com:443"]));
    expect(new Set(resolved)).toEqual(new Set(["api.anthropic.com"]));
    for (const e of egress.entries) expect(e.bytesUp, "a ClientHello went up the tunnel").toBeGreaterThan(100);
    // 0x16 0x03: a TLS handshake record; the CLI speaks HTTPS inside the tunnel.
    expect(firstBytes.length).toBeGreaterThan(0);
    for (const b of firstBytes) expect([b[0], b[1]]).toEqual([0x16, 0x03]);
    // The API never answered: the attempt did not complete, and its reservation stays charged.
    expect(obs.status).not.toBe("completed");
  }, 120_000);

  it("with a login close to expiry, first asks for platform.claude.com:443 (the login refresh), which the default allowlist holds", async () => {
    const path = join(corpus.loginDir, ".credentials.json");
    const login = JSON.parse(await readFile(path, "utf8"));
    login.claudeAiOauth.expiresAt = Date.now() + 150_000;
    await writeFile(path, JSON.stringify(login), { mode: 0o600 });
    const { obs } = await strictAttempt("near-expiry");
    const egress = obs.egress!;
    expect(egress.refused).toBe(0);
    expect(egress.entries[0]).toMatchObject({ host: "platform.claude.com", port: 443, allowed: true });
    expect(new Set(egress.entries.map((e) => e.host))).toEqual(new Set(["platform.claude.com", "api.anthropic.com"]));
  }, 120_000);
});
