/**
 * Gateway memory: how much the runner's resident memory grows when one attempt's socket gets
 * 48 stalled 16 MiB uploads (each declares a 16 MiB body, sends all of it but the last byte, and
 * waits), side by side with an unbounded baseline:
 *
 * - bounded: the gateway as shipped (MAX_ATTEMPT_CONNECTIONS connections per attempt,
 *   MAX_ATTEMPT_BUFFERED_BYTES of request bodies buffered per attempt);
 * - unbounded: the same gateway with both bounds set to Infinity (what the runner did before).
 *
 * Each gateway runs in a child process of its own, so the figure is that process's RSS: sampled
 * every 20 ms from before the first connection until the uploads have stalled for two seconds,
 * the rise is the peak minus the value before. The uploads come from this process. The target:
 * a rise under 64 MiB for the bounded gateway. Nothing is forwarded (no upload completes), so
 * the upstream is an address nobody listens on.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { Gateway, MAX_ATTEMPT_BUFFERED_BYTES, MAX_ATTEMPT_CONNECTIONS } from "../src/gateway/gateway.ts";
import { note, round, runMain } from "./lib.ts";

const MODEL = "claude-haiku-5-5";
const UPLOADS = 48;
const UPLOAD_BYTES = 16 * 1024 * 1024;
const TARGET_RISE_MIB = 64;
const MIB = 1024 * 1024;

/** The child: one gateway, one attempt; prints its socket and placeholder, then RSS samples until told to stop. */
async function child(mode: "bounded" | "unbounded"): Promise<void> {
  const gateway = new Gateway({
    model: MODEL,
    upstream: { url: "https://127.0.0.1:9" },
    ...(mode === "unbounded" ? { attemptConnections: Number.POSITIVE_INFINITY, attemptBufferedBytes: Number.POSITIVE_INFINITY } : {}),
  });
  const attempt = await gateway.openAttempt({ credential: "bench-credential-not-real", limitUsd: 1_000_000 });
  globalThis.gc?.();
  await new Promise((r) => setTimeout(r, 200));
  const before = process.memoryUsage.rss();
  let peak = before;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 20);
  process.stdout.write(`${JSON.stringify({ socketPath: attempt.socketPath, placeholder: attempt.placeholder })}\n`);
  // Any line on stdin: report and stop.
  await once(createInterface({ input: process.stdin }), "line");
  clearInterval(timer);
  peak = Math.max(peak, process.memoryUsage.rss());
  const { setupProblems, requests } = attempt.record;
  process.stdout.write(
    `${JSON.stringify({ beforeMib: round(before / MIB, 1), peakMib: round(peak / MIB, 1), refused: requests.filter((r) => r.refused).length, setupProblems: setupProblems.length, firstProblem: setupProblems[0] ?? null })}\n`,
  );
  await attempt.stop();
  gateway.close();
  process.exit(0);
}

/** Opens the uploads on `socketPath`; resolves once no byte has been accepted for two seconds. */
async function upload(socketPath: string, placeholder: string): Promise<{ sentMib: number; closedEarly: number }> {
  const chunk = Buffer.alloc(1024 * 1024, 0x78);
  let sent = 0;
  let closedEarly = 0;
  let lastProgress = Date.now();
  const sockets = Array.from({ length: UPLOADS }, () => {
    const s = connect(socketPath);
    s.on("error", () => {});
    s.on("close", () => closedEarly++);
    s.write(`POST /v1/messages?beta=true HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\nauthorization: Bearer ${placeholder}\r\ncontent-length: ${UPLOAD_BYTES}\r\n\r\n`);
    let left = UPLOAD_BYTES - 1;
    const pump = () => {
      while (left > 0 && !s.destroyed) {
        const n = Math.min(left, chunk.length);
        left -= n;
        sent += n;
        lastProgress = Date.now();
        if (!s.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void s.once("drain", pump);
      }
    };
    s.once("connect", pump);
    return s;
  });
  while (Date.now() - lastProgress < 2000) await new Promise((r) => setTimeout(r, 100));
  for (const s of sockets) s.destroy();
  return { sentMib: round(sent / MIB, 1), closedEarly };
}

async function measureMode(mode: "bounded" | "unbounded") {
  note(`${mode}: ${UPLOADS} stalled uploads of ${UPLOAD_BYTES / MIB} MiB on one attempt's socket`);
  const proc = spawn(process.execPath, ["--expose-gc", "--import", "tsx", fileURLToPath(import.meta.url), "--child", mode], { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: proc.stdout! })[Symbol.asyncIterator]();
  const ready = JSON.parse((await lines.next()).value as string) as { socketPath: string; placeholder: string };
  const sent = await upload(ready.socketPath, ready.placeholder);
  proc.stdin!.write("report\n");
  const report = JSON.parse((await lines.next()).value as string) as { beforeMib: number; peakMib: number; refused: number; setupProblems: number; firstProblem: string | null };
  await once(proc, "exit");
  return { ...report, riseMib: round(report.peakMib - report.beforeMib, 1), uploadedMib: sent.sentMib, connectionsClosedByGateway: sent.closedEarly };
}

if (process.argv[2] === "--child") {
  await child(process.argv[3] as "bounded" | "unbounded");
} else {
  runMain("gateway-memory", async () => {
    const bounded = await measureMode("bounded");
    const unbounded = await measureMode("unbounded");
    return {
      uploads: UPLOADS,
      uploadMib: UPLOAD_BYTES / MIB,
      attemptConnections: MAX_ATTEMPT_CONNECTIONS,
      attemptBufferedMib: MAX_ATTEMPT_BUFFERED_BYTES / MIB,
      bounded,
      unbounded,
      riseRatioUnboundedToBounded: round(unbounded.riseMib / Math.max(bounded.riseMib, 0.1), 1),
      targetRiseMib: TARGET_RISE_MIB,
      targetMet: bounded.riseMib < TARGET_RISE_MIB,
    };
  });
}
