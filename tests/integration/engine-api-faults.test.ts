import { randomUUID } from "node:crypto";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage } from "../../src/image/build.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import { runBounded } from "../../src/sandbox/bounded.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { DockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import type { SandboxSpec } from "../../src/sandbox/sandbox.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import { nodeScriptSpec } from "../support/node-sandbox.ts";

/**
 * Faults on the engine-api channel's stream (src/sandbox/engine-api.ts, src/sandbox/stream-mux.ts)
 * on the local engine, with the real relay container: what a user would notice is the runner's
 * memory and what the ledger says.
 */

const runtime = new DockerRuntime();
const RELAY = [IMAGE_LAYOUT.node, `${IMAGE_LAYOUT.helpers}/stream-relay.cjs`];
const run = `engine-api-faults-${randomUUID()}`;
let image: string;
let work: string;

beforeAll(async () => {
  image = (await buildImage(runtime, await fakeClaudeImageSpec())).id;
  work = await mkdtemp(join(tmpdir(), "sr-engine-faults-"));
  await chmod(work, 0o755);
}, 300_000);
afterAll(() => rm(work, { recursive: true, force: true }));

function spec(script: string, extra: Partial<SandboxSpec> = {}): SandboxSpec {
  return nodeScriptSpec(image, { [LABELS.run]: run }, script, extra);
}

/** A full garbage collection of this process (the flag set at run time, as --expose-gc would). */
setFlagsFromString("--expose-gc");
const collectGarbage = runInNewContext("gc") as () => void;

/**
 * The most the runner's Buffers held above what they held when it was made, while a window was
 * open. Buffers already let go but not yet collected count in `arrayBuffers` too, and how many
 * there are depends on when the collector last ran (the machine's load): a sample above
 * `recheckAbove` is taken again right after a full collection, so only what is still held counts.
 */
class BufferPeak {
  private readonly base: number;
  private peak = 0;
  private open = false;
  private readonly timer = setInterval(() => {
    if (!this.open) return;
    let held = process.memoryUsage().arrayBuffers - this.base;
    if (held > this.recheckAbove) {
      collectGarbage();
      held = process.memoryUsage().arrayBuffers - this.base;
    }
    this.peak = Math.max(this.peak, held);
  }, 20);
  constructor(private readonly recheckAbove: number) {
    collectGarbage();
    this.base = process.memoryUsage().arrayBuffers;
  }
  async window(ms: number): Promise<void> {
    this.open = true;
    await new Promise((r) => setTimeout(r, ms));
    this.open = false;
  }
  stop(): number {
    clearInterval(this.timer);
    return this.peak;
  }
}

const MIB = 1024 * 1024;
const FLOOD_BYTES = 96 * MIB;
/** How long a side stops reading while the other floods. */
const STALL_MS = 4_000;
/** What the runner may hold for one stalled channel: the mux's channel buffer, the streams' high-water marks, a few frames. */
const BOUND_BYTES = 24 * MIB;

describe("the engine-api stream under load", () => {
  // contract: R252
  it("an inside that floods a stalled endpoint, and an endpoint that floods an inside that stops reading, keep the runner's memory bounded and lose nothing", async () => {
    const socket = join(work, "flood.sock");
    const received: number[] = [];
    let stalled: Socket | undefined;
    const server: Server = createServer((c) => {
      c.once("data", (first: Buffer) => {
        if (first.toString("utf8").startsWith("send")) {
          // The endpoint floods: 1 MiB at a time, as fast as the stream takes it.
          let sent = 0;
          const chunk = Buffer.alloc(MIB, 0x61);
          const pump = (): void => {
            while (sent < FLOOD_BYTES) {
              sent += chunk.length;
              if (!c.write(chunk)) return void c.once("drain", pump);
            }
            c.end();
          };
          pump();
          return;
        }
        // The endpoint stalls: it reads nothing until the test lets it.
        c.pause();
        stalled = c;
        let n = first.length;
        c.on("data", (d: Buffer) => (n += d.length));
        c.on("end", () => received.push(n));
      });
    });
    await new Promise<void>((r) => server.listen(socket, r));
    const inside = `
      const net = require("node:net");
      const ENDPOINT = "/run/study-runner-api/flood.sock";
      const chunk = Buffer.alloc(1 << 20, 0x62);
      let sent = 0;
      const out = net.connect(ENDPOINT, () => {
        const pump = () => {
          while (sent < ${FLOOD_BYTES}) { sent += chunk.length; if (!out.write(chunk)) return out.once("drain", pump); }
          out.end();
        };
        pump();
      });
      out.on("close", () => {
        const back = net.connect(ENDPOINT, () => back.write("send"));
        back.pause();
        console.log("reading-stalled");
        setTimeout(() => {
          let n = 0;
          back.on("data", (d) => (n += d.length));
          back.on("end", () => console.log("received " + n));
          back.resume();
        }, ${STALL_MS});
      });`;
    const sandbox = new DockerSandbox(runtime, { channel: "engine-api", engineApi: { streamRelay: RELAY } });
    const lines: string[] = [];
    let running!: ReturnType<typeof runBounded>;
    const insideStalled = new Promise<void>((resolve) => {
      const seen = (l: string): void => {
        lines.push(l);
        if (l === "reading-stalled") resolve();
      };
      running = runBounded(sandbox, spec(inside, { endpoints: [{ name: "model-api", socket }] }), seen, { timeoutMs: 240_000 });
    });
    const peak = new BufferPeak(BOUND_BYTES / 2);
    // The inside floods the endpoint, which reads nothing for a while; then the endpoint floods the inside, which reads nothing for a while.
    for (let i = 0; i < 600 && !stalled; i++) await new Promise((r) => setTimeout(r, 50));
    expect(stalled, `the inside's flood reached the endpoint; ${lines.join("\n")}`).toBeDefined();
    await peak.window(STALL_MS);
    stalled!.resume();
    await insideStalled;
    await new Promise((r) => setTimeout(r, 500));
    await peak.window(STALL_MS - 1_000);
    const result = await running;
    const held = peak.stop();
    await new Promise((r) => server.close(r));
    expect(result.exitCode, lines.join("\n")).toBe(0);
    expect(result.channelFault).toBeUndefined();
    // Nothing lost either way.
    expect(received).toEqual([FLOOD_BYTES]);
    expect(lines).toEqual(["reading-stalled", `received ${FLOOD_BYTES}`]);
    // Neither stalled side made the runner hold the flood.
    expect(held).toBeLessThan(BOUND_BYTES);
  }, 300_000);
});
