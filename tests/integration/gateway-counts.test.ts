/**
 * The gateway's record keeps its counts where it marks a request: every refusal path (each kind a
 * check can refuse with, a budget ceiling, a redirect from the upstream and an upstream that
 * cannot be reached, a loopback port with no listener) leaves a record whose `refused` is the
 * number of requests it marks refused, and a ledger holding those records passes the shipped
 * `ledger check`. Requests are raw bytes on the attempt's socket; the upstream is a TLS server on
 * loopback (test CA).
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer as createTlsServer, type Server } from "node:https";
import { createServer as createTcpServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Gateway, type GatewayRecord, type RefusalKind } from "../../src/gateway/gateway.ts";
import { requestBound } from "../../src/gateway/meter.ts";
import { picoToUsd } from "../../src/cost/money.ts";
import { BETAS, cliBody, MODEL, raw, REAL } from "../support/gateway-raw.ts";
import { makeTestCa, type TestCa } from "../support/test-ca.ts";
import { completedObservation, sampleLedger } from "../support/ledger-sample.ts";
import { runCli } from "../support/cli.ts";

/** A loopback port nothing listens on: bound, then closed. */
async function deadPort(): Promise<number> {
  const s = createTcpServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

describe("the gateway counts every request it marks refused", () => {
  let ca: TestCa;
  let upstream: Server;
  let work: string;
  let upstreamUrl: string;

  beforeAll(async () => {
    ca = makeTestCa();
    work = await mkdtemp(join(tmpdir(), "sr-gateway-counts-"));
    let n = 0;
    upstream = createTlsServer({ key: ca.key, cert: ca.cert }, (req, res) => {
      let body = "";
      req.on("data", (d: Buffer) => (body += d.toString("utf8")));
      req.on("end", () => {
        if (body.includes("redirect-me")) {
          res.writeHead(307, { location: "https://127.0.0.1:1/elsewhere" });
          res.end();
          return;
        }
        n++;
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({
            id: `msg_${n}`,
            type: "message",
            role: "assistant",
            model: MODEL,
            content: [{ type: "text", text: "ok" }],
            stop_reason: "end_turn",
            usage: { input_tokens: 10, output_tokens: 2 },
          }),
        );
      });
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    upstreamUrl = `https://127.0.0.1:${(upstream.address() as { port: number }).port}`;
  }, 60_000);
  afterAll(async () => {
    await new Promise((r) => upstream?.close(r));
    if (work) await rm(work, { recursive: true, force: true });
  });

  // contract: R174
  it("marks and counts each refusal kind, a ceiling, a redirect and an unreachable upstream; the ledger holding the records passes `ledger check`", async () => {
    const gateway = new Gateway({ model: MODEL, upstream: { url: upstreamUrl, ca: ca.ca }, maxRequestBytes: 64 * 1024 });
    const dead = new Gateway({ model: MODEL, upstream: { url: `https://127.0.0.1:${await deadPort()}`, ca: ca.ca } });
    const ok = JSON.stringify(cliBody());
    // The attempt may spend two ordinary requests' worst case; a request asking for far more output is over it.
    const limitUsd = 2 * picoToUsd(requestBound(MODEL, Buffer.byteLength(ok), 1000).costPico);
    const records: GatewayRecord[] = [];
    try {
      const a = await gateway.openAttempt({ credential: REAL, limitUsd });
      const other = await gateway.openAttempt({ credential: REAL, limitUsd });
      const send = (o: Parameters<typeof raw>[1]) => raw(a.socketPath, o);
      expect((await send({ token: a.placeholder, body: ok })).status).toBe(200);
      expect((await send({ token: a.placeholder, body: ok, target: "/v1/other" })).status).toBe(404);
      expect((await send({ token: "not-a-placeholder", body: ok })).status).toBe(401);
      expect((await send({ token: other.placeholder, body: ok })).status).toBe(401);
      expect((await send({ token: a.placeholder, body: ok, headers: { "anthropic-beta": `${BETAS},never-measured` } })).status).toBe(400);
      expect((await send({ token: a.placeholder, body: JSON.stringify(cliBody({ padding: "x".repeat(70 * 1024) })) })).status).toBe(413);
      expect((await send({ token: a.placeholder, body: JSON.stringify(cliBody({ unmeasured: true })) })).status).toBe(400);
      expect((await send({ token: a.placeholder, body: JSON.stringify(cliBody({ model: "claude-opus-9" })) })).status).toBe(400);
      expect((await send({ token: a.placeholder, body: JSON.stringify(cliBody({ max_tokens: 64_000 })) })).status).toBe(400);
      expect((await send({ token: a.placeholder, body: JSON.stringify(cliBody({ messages: [{ role: "user", content: "redirect-me" }] })) })).status).toBe(502);
      records.push(await a.stop());
      await other.stop();
      const b = await dead.openAttempt({ credential: REAL, limitUsd });
      expect((await raw(b.socketPath, { token: b.placeholder, body: ok })).status).toBe(502);
      expect((await raw(b.socketPath, { token: b.placeholder, body: ok })).status).toBe(502);
      records.push(await b.stop());
    } finally {
      gateway.close();
      dead.close();
    }
    const kinds = records.flatMap((r) => r.requests.map((q) => q.refused?.kind ?? null));
    const every: RefusalKind[] = ["path", "unknown-token", "foreign-placeholder", "header", "size", "body", "model", "budget", "upstream-redirect", "upstream-unreachable"];
    expect(new Set(kinds)).toEqual(new Set([null, ...every]));
    for (const r of records) expect(r.refused).toBe(r.requests.filter((q) => q.refused !== null).length);
    expect(records[1]!.refused).toBe(2);

    const ledger = sampleLedger({
      status: "awaiting-adjudication",
      credentials: "gateway",
      budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0, spentUsd: 0.1, cumulativeCapExceeded: false },
      observations: records.map((g, i) => completedObservation(i, 0.05, { gateway: g })),
    });
    const file = join(work, "ledger.json");
    await writeFile(file, JSON.stringify(ledger, null, 2), { mode: 0o600 });
    const check = await runCli(["ledger", "check", file]);
    expect(check.code, check.stdout + check.stderr).toBe(0);
  }, 120_000);
});
