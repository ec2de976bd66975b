/**
 * What the engine-api channel's stream adds to the runner's sockets, seen from inside the
 * sandbox: the same program in the same fake image on the same engine reaches one endpoint of the
 * runner either through the socket folder bound in (`host-paths`) or through the relay container's
 * socket, carried as one channel of the attached stream (`engine-api`, src/sandbox/engine-api.ts).
 *
 * Two exchanges, each timed in the container with performance.now() and reported as medians:
 * - `mcp`: a JSON-RPC request line of about 200 bytes and its answer line, one connection kept
 *   open, as the CLI talks to the doc-bridge (20 warm-up, 300 timed round trips);
 * - `firstByte`: a 48 KiB request (the gateway benchmark's body size) and the first byte of the
 *   answer, one keep-alive connection, as the CLI's Messages requests reach the gateway (20
 *   warm-up, 300 timed).
 * The endpoint answers at once, so what differs between the channels is the channel alone (the
 * gateway's and the bridge's own work is the same on both and measured by their benchmarks).
 * Channels alternate over rounds, so a change in the machine's load hits both alike.
 * Targets (docs/performance.md, "stream"): at most +2 ms on the MCP round trip and +5 ms on the
 * first byte at the median.
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildImage } from "../src/image/build.ts";
import { IMAGE_LAYOUT } from "../src/image/specs.ts";
import { runBounded } from "../src/sandbox/bounded.ts";
import { DockerRuntime } from "../src/sandbox/docker.ts";
import { DockerSandbox, type SandboxChannel } from "../src/sandbox/docker-sandbox.ts";
import type { SandboxSpec } from "../src/sandbox/sandbox.ts";
import { fakeClaudeImageSpec } from "../src/stand-ins/fake-claude/image.ts";
import { median, note, round, runMain } from "./lib.ts";

const ROUNDS = 4;
const WARMUP = 20;
const TIMED = 300;
const REQUEST_BYTES = 48 * 1024;
const TARGET_MCP_ADDED_MS = 2;
const TARGET_FIRST_BYTE_ADDED_MS = 5;
const CHANNELS: readonly SandboxChannel[] = ["host-paths", "engine-api"];
const REQUEST_HEAD = `POST /v1/messages HTTP/1.1\r\nhost: gateway\r\ncontent-length: ${REQUEST_BYTES}\r\n\r\n`;

/** The program in the sandbox: both exchanges against ENDPOINT, one JSON line of samples each. */
const INSIDE = `
const net = require("node:net");
const { performance } = require("node:perf_hooks");
const total = ${WARMUP} + ${TIMED};
function exchange(request, answered, done) {
  const s = net.connect(process.env.ENDPOINT);
  const samples = [];
  let t0 = 0;
  let pending = "";
  const next = () => {
    if (samples.length === total) { s.end(); return done(samples.slice(${WARMUP})); }
    t0 = performance.now();
    s.write(request);
  };
  s.on("data", (d) => {
    pending += d.toString("latin1");
    if (!answered(pending)) return;
    pending = "";
    samples.push(performance.now() - t0);
    next();
  });
  s.on("connect", next);
}
const line = JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: "doc.search", arguments: { query: "how does the ledger settle a reservation", limit: 5 } } }) + "\\n";
exchange(line, (p) => p.endsWith("\\n"), (mcp) => {
  process.stdout.write(JSON.stringify({ mcp }) + "\\n");
  const body = "x".repeat(${REQUEST_BYTES});
  const request = ${JSON.stringify(REQUEST_HEAD)} + body;
  exchange(request, (p) => p.length > 0, (firstByte) => process.stdout.write(JSON.stringify({ firstByte }) + "\\n"));
});
`;

async function main(): Promise<Record<string, unknown>> {
  const work = await mkdtemp(join(tmpdir(), "study-runner-bench-stream-"));
  try {
    const runtime = new DockerRuntime();
    const image = (await buildImage(runtime, await fakeClaudeImageSpec())).id;
    await chmod(work, 0o755);
    const socket = join(work, "endpoint.sock");
    // The endpoint: an answer line for each request line; the first byte of an answer once a whole 48 KiB request came.
    const server = createServer((c) => {
      let pending = 0;
      let mode: "line" | "http" | undefined;
      c.on("data", (d: Buffer) => {
        mode ??= d.toString("latin1").startsWith("POST ") ? "http" : "line";
        if (mode === "line") {
          if (d[d.length - 1] === 0x0a) c.write('{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"found 5"}]}}\n');
          return;
        }
        pending += d.length;
        if (pending >= REQUEST_HEAD.length + REQUEST_BYTES) {
          pending -= REQUEST_HEAD.length + REQUEST_BYTES;
          c.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n");
        }
      });
    });
    await new Promise<void>((r) => server.listen(socket, r));
    await chmod(socket, 0o666);
    const spec: SandboxSpec = {
      image,
      entrypoint: [IMAGE_LAYOUT.node, "-e", INSIDE],
      cmd: [],
      env: { ENDPOINT: "/run/study-runner-api/endpoint.sock" },
      user: "1000:1000",
      memoryVolumes: [],
      endpoints: [{ name: "model-api", socket }],
      limits: { pidsLimit: 64 },
      security: { readOnlyRoot: true, dropAllCapabilities: true, noNewPrivileges: true },
      network: { mode: "none" },
      labels: { "study-runner.bench": "stream" },
      streamRelay: [IMAGE_LAYOUT.node, `${IMAGE_LAYOUT.helpers}/stream-relay.cjs`],
    };
    const samples: Record<string, { mcp: number[]; firstByte: number[] }> = Object.fromEntries(CHANNELS.map((c) => [c, { mcp: [], firstByte: [] }]));
    for (let round = 0; round < ROUNDS; round++) {
      note(`stream: round ${round + 1}/${ROUNDS}`);
      for (const channel of round % 2 === 0 ? CHANNELS : [...CHANNELS].reverse()) {
        const lines: string[] = [];
        const r = await runBounded(new DockerSandbox(runtime, { channel }), spec, (l) => lines.push(l), { timeoutMs: 120_000 });
        if (r.exitCode !== 0 || r.channelFault) throw new Error(`the ${channel} sandbox ended ${r.exitCode} ${r.channelFault ?? ""}: ${r.stderrTail}`);
        for (const l of lines) {
          const o = JSON.parse(l) as { mcp?: number[]; firstByte?: number[] };
          samples[channel]!.mcp.push(...(o.mcp ?? []));
          samples[channel]!.firstByte.push(...(o.firstByte ?? []));
        }
      }
    }
    await new Promise((r) => server.close(r));
    const m = (c: SandboxChannel, k: "mcp" | "firstByte") => round(median(samples[c]![k]), 3);
    const mcpAdded = round(m("engine-api", "mcp") - m("host-paths", "mcp"), 3);
    const firstByteAdded = round(m("engine-api", "firstByte") - m("host-paths", "firstByte"), 3);
    return {
      samplesPerChannel: samples["engine-api"]!.mcp.length,
      mcpRoundTripMs: { hostPaths: m("host-paths", "mcp"), engineApi: m("engine-api", "mcp"), added: mcpAdded, targetAdded: TARGET_MCP_ADDED_MS },
      firstByteMs: { hostPaths: m("host-paths", "firstByte"), engineApi: m("engine-api", "firstByte"), added: firstByteAdded, targetAdded: TARGET_FIRST_BYTE_ADDED_MS },
      targetMet: mcpAdded <= TARGET_MCP_ADDED_MS && firstByteAdded <= TARGET_FIRST_BYTE_ADDED_MS,
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

runMain("stream", main);
