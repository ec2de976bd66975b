/**
 * Gateway: the latency the model gateway adds to one Messages request, first byte and total,
 * side by side with the direct routes, all on this machine (the scripted API as the upstream):
 *
 * - direct-socket: the client to the scripted API on a unix socket (the conformance relay's route);
 * - direct-tls: the client to the scripted API over TLS on loopback (what the CLI does itself
 *   when it has a network);
 * - gateway: the client to the gateway's unix socket, the gateway over TLS on loopback to the
 *   scripted API (credential swap, allow list, ceiling, streaming meter).
 *
 * Each request is a 48 KiB body (a first CLI request is about 17 KB, measured) streamed back as
 * server-sent events; connections are kept alive as the CLI keeps them. The target: at most
 * 5 ms added to the first byte at the median, gateway against direct-tls.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Gateway } from "../src/gateway/gateway.ts";
import { startScriptedApi } from "../src/stand-ins/scripted-api/server.ts";
import { makeTestCa } from "../tests/support/test-ca.ts";
import { note, round, runMain, stats } from "./lib.ts";

const MODEL = "claude-haiku-5-5";
const TARGET_ADDED_FIRST_BYTE_MS = 5;
const WARMUP = 20;
const RUNS = 200;

const script = { name: "bench", turns: [{ answer: "x".repeat(2000), usage: { input_tokens: 12_000, output_tokens: 500 } }] };
const body = JSON.stringify({ model: MODEL, max_tokens: 32_000, stream: true, messages: [{ role: "user", content: "y".repeat(48 * 1024) }] });

type Send = (headers: Record<string, string>, onFirstByte: () => void) => Promise<void>;

function sender(make: (o: { headers: Record<string, string> }) => ReturnType<typeof httpRequest>): Send {
  return (headers, onFirstByte) =>
    new Promise((resolve, reject) => {
      const req = make({ headers: { "content-type": "application/json", "anthropic-version": "2023-06-01", "content-length": String(Buffer.byteLength(body)), ...headers } });
      req.on("response", (res) => {
        let first = true;
        res.on("data", () => {
          if (first) {
            first = false;
            onFirstByte();
          }
        });
        res.on("end", () => (res.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`))));
      });
      req.on("error", reject);
      req.end(body);
    });
}

async function time(send: Send, headers: Record<string, string>) {
  const first: number[] = [];
  const total: number[] = [];
  for (let i = 0; i < WARMUP + RUNS; i++) {
    const t0 = performance.now();
    let t1 = NaN;
    await send(headers, () => (t1 = performance.now()));
    const t2 = performance.now();
    if (i >= WARMUP) {
      first.push(t1 - t0);
      total.push(t2 - t0);
    }
  }
  return { firstByteMs: stats(first, 2), totalMs: stats(total, 2) };
}

runMain("gateway", async () => {
  const ca = makeTestCa();
  const dir = await mkdtemp(join(tmpdir(), "sr-bench-gateway-"));
  const plain = await startScriptedApi({ socketPath: join(dir, "api.sock"), script });
  const tls = await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, script });
  const gateway = new Gateway({ model: MODEL, upstream: { url: tls.url!, ca: ca.ca } });
  const attempt = await gateway.openAttempt({ credential: "bench-credential-not-real", limitUsd: 1_000_000 });
  const unixAgent = new HttpAgent({ keepAlive: true, maxSockets: 1 });
  const tlsAgent = new HttpsAgent({ keepAlive: true, maxSockets: 1, ca: ca.ca });
  const gwAgent = new HttpAgent({ keepAlive: true, maxSockets: 1 });
  const port = Number(new URL(tls.url!).port);
  try {
    note(`direct-socket, ${RUNS} requests`);
    const directSocket = await time(
      sender((o) => httpRequest({ socketPath: plain.socketPath, agent: unixAgent, method: "POST", path: "/v1/messages?beta=true", ...o })),
      { authorization: "Bearer bench-direct" },
    );
    note(`direct-tls, ${RUNS} requests`);
    const directTls = await time(
      sender((o) => httpsRequest({ host: "127.0.0.1", port, agent: tlsAgent, method: "POST", path: "/v1/messages?beta=true", ...o })),
      { authorization: "Bearer bench-direct" },
    );
    note(`gateway, ${RUNS} requests`);
    const viaGateway = await time(
      sender((o) => httpRequest({ socketPath: attempt.socketPath, agent: gwAgent, method: "POST", path: "/v1/messages?beta=true", ...o })),
      { authorization: `Bearer ${attempt.placeholder}` },
    );
    const metered = attempt.record.requests.filter((r) => r.inputTokens === 12_000 && r.outputTokens === 500).length;
    if (metered !== WARMUP + RUNS) throw new Error(`the gateway metered ${metered} of ${WARMUP + RUNS} requests`);
    const addedFirstByte = round(viaGateway.firstByteMs.median - directTls.firstByteMs.median, 2);
    const addedTotal = round(viaGateway.totalMs.median - directTls.totalMs.median, 2);
    return {
      requestBytes: Buffer.byteLength(body),
      directSocket,
      directTls,
      gateway: viaGateway,
      addedFirstByteMsMedian: addedFirstByte,
      addedTotalMsMedian: addedTotal,
      addedFirstByteVsSocketMsMedian: round(viaGateway.firstByteMs.median - directSocket.firstByteMs.median, 2),
      targetAddedFirstByteMs: TARGET_ADDED_FIRST_BYTE_MS,
      targetMet: addedFirstByte <= TARGET_ADDED_FIRST_BYTE_MS,
    };
  } finally {
    unixAgent.destroy();
    tlsAgent.destroy();
    gwAgent.destroy();
    await attempt.stop();
    gateway.close();
    await plain.close();
    await tls.close();
    await rm(dir, { recursive: true, force: true });
  }
});
