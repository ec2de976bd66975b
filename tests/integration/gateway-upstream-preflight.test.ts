/**
 * A pilot through the shipped command whose model API cannot be reached (contract R192): the
 * gateway's preflight opens a TLS connection to its upstream before anything is reserved and
 * refuses with exit 2 naming the host, in seconds, with no ledger and no attempt container. The
 * upstreams are on loopback (the hidden test flags); the fake image sends no model request.
 */
import { createServer } from "node:net";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { makeTestCa, type TestCa } from "../support/test-ca.ts";
import { containersCreatedBy, freshLogin, leftovers, preparePipeline, prepareRun, startPipeline, type Pipeline, type PreparedRun } from "../support/pipeline.ts";

let p: Pipeline;
let ca: TestCa;
let caFile: string;
let api: ScriptedApi;
beforeAll(async () => {
  p = await preparePipeline("upstream");
  ca = makeTestCa();
  caFile = join(p.work, "ca.pem");
  await writeFile(caFile, ca.ca);
  api = await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, script: { name: "s", turns: [{ answer: "ok", usage: { input_tokens: 1, output_tokens: 1 } }], neverEnd: false } });
}, 300_000);
afterAll(async () => {
  await api?.close();
  await p?.cleanup();
});

/** The prepared pilot, through the gateway to `upstream`. */
async function gatewayRun(upstream: string): Promise<PreparedRun> {
  const run = await prepareRun(p, { loginDir: await freshLogin(p), behaviour: { default: { kind: "ok" } } });
  run.args = run.args.map((a, i, all) => (all[i - 1] === "--credentials" ? "gateway" : all[i - 1] === "--isolation" ? "standard" : a));
  run.args.push("--test-gateway-upstream", upstream, "--test-gateway-ca", caFile);
  return run;
}

describe("the pilot whose model API cannot be reached", () => {
  // contract: R192
  it("exits 2 in under 10 s naming the host, with nothing reserved and no attempt container", async () => {
    const s = createServer();
    await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
    const port = (s.address() as { port: number }).port;
    await new Promise((resolve) => s.close(resolve));
    const run = await gatewayRun(`https://127.0.0.1:${port}`);
    const startedAt = Date.now();
    const started = startPipeline(run);
    const result = await started.done;
    const took = Date.now() - startedAt;
    expect(result.code, result.stderr).toBe(2);
    expect(took).toBeLessThan(10_000);
    expect(result.stderr).toContain(`the model API at 127.0.0.1:${port} cannot be reached from the gateway (ECONNREFUSED`);
    expect(result.stderr).toMatch(/Fix: .*--credentials login-copy/);
    await expect(readFile(run.output)).rejects.toMatchObject({ code: "ENOENT" }); // no ledger: nothing reserved
    expect(await containersCreatedBy(started.pid, startedAt, Date.now(), { exceptProbes: true })).toEqual([]);
    expect(await leftovers(run.tmp, started.pid)).toEqual([]);
  }, 60_000);

  // contract: R192
  it("runs the pilot when the scripted upstream answers the handshake", async () => {
    const run = await gatewayRun(api.url!.replace(/^http:/, "https:"));
    const started = startPipeline(run);
    const result = await started.done;
    expect(result.code, result.stderr).toBe(0);
    const ledger = JSON.parse(await readFile(run.output, "utf8")) as { credentials: string; observations: Array<{ status: string }> };
    expect(ledger.credentials).toBe("gateway");
    expect(ledger.observations.map((o) => o.status)).toEqual(["completed", "completed"]);
  }, 300_000);
});
