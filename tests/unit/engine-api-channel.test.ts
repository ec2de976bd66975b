import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { IMAGE_LABELS } from "../../src/image/specs.ts";
import { probeCliImage } from "../../src/transport/cli/preflight.ts";
import { encodeFrame, FRAME, FRAME_HEADER_BYTES, serveStream } from "../../src/sandbox/stream-mux.ts";
import { FakeRuntime } from "../support/fake-runtime.ts";

/**
 * The runner's end of the engine-api channel's stream (src/sandbox/stream-mux.ts) against a relay
 * played by the test: what an endpoint sees is the bytes the inside sent, and a relay that breaks
 * the format or the bounds is refused with the reason the attempt is recorded invalid-setup for.
 */

let dir: string;
let echo: Server;
let socket: string;
let received: Buffer[];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "sr-stream-mux-"));
  socket = join(dir, "echo.sock");
  received = [];
  echo = createServer((c) => {
    c.on("data", (d: Buffer) => {
      received.push(d);
      c.write(Buffer.concat([Buffer.from("echo:"), d]));
    });
  });
  await new Promise<void>((r) => echo.listen(socket, r));
});
afterEach(async () => {
  await new Promise((r) => echo.close(r));
  await rm(dir, { recursive: true, force: true });
});

/** The relay's side: frames written to the runner, and the frames the runner sent back, parsed. */
function relayPair() {
  const fromRelay = new PassThrough();
  const toRelay = new PassThrough();
  const frames: Array<{ channel: number; kind: number; payload: Buffer }> = [];
  let pending = Buffer.alloc(0);
  toRelay.on("data", (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= FRAME_HEADER_BYTES && pending.length >= FRAME_HEADER_BYTES + pending.readUInt32BE(5)) {
      const length = pending.readUInt32BE(5);
      frames.push({ channel: pending.readUInt32BE(0), kind: pending.readUInt8(4), payload: pending.subarray(FRAME_HEADER_BYTES, FRAME_HEADER_BYTES + length) });
      pending = pending.subarray(FRAME_HEADER_BYTES + length);
    }
  });
  return { fromRelay, toRelay, frames };
}

/** A data frame's header that announces `length` bytes. */
function lengthSaid(length: number): Buffer {
  const header = encodeFrame(1, FRAME.data);
  header.writeUInt32BE(length, 5);
  return header;
}

async function until(check: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("the engine-api stream, the runner's end", () => {
  // contract: R242
  it("once closed, sends the relay nothing more: endpoint connections that close after the relay's stdin ended raise no error", async () => {
    const { fromRelay, toRelay, frames } = relayPair();
    const errors: Error[] = [];
    toRelay.on("error", (e) => errors.push(e));
    const mux = serveStream(fromRelay, toRelay, new Map([["model-api", socket]]));
    fromRelay.write(encodeFrame(0, FRAME.ready));
    await mux.ready;
    fromRelay.write(encodeFrame(1, FRAME.open, Buffer.from("model-api")));
    fromRelay.write(encodeFrame(1, FRAME.data, Buffer.from("ping")));
    await until(() => frames.some((f) => f.kind === FRAME.data));
    const before = frames.length;
    // As a sandbox's cleanup does: the channels ended, then the relay's stdin, which the engine
    // has not taken in full yet (not read here any more).
    toRelay.removeAllListeners("data");
    toRelay.pause();
    mux.close();
    toRelay.end();
    await new Promise((r) => setTimeout(r, 100));
    expect(errors).toEqual([]);
    expect(frames.length).toBe(before);
  });

  // contract: R242
  it("joins each channel the relay opens to a new connection to the endpoint, byte for byte both ways", async () => {
    const { fromRelay, toRelay, frames } = relayPair();
    const mux = serveStream(fromRelay, toRelay, new Map([["model-api", socket]]));
    fromRelay.write(encodeFrame(0, FRAME.ready));
    await mux.ready;
    fromRelay.write(encodeFrame(1, FRAME.open, Buffer.from("model-api")));
    fromRelay.write(encodeFrame(1, FRAME.data, Buffer.from("GET / HTTP/1.1\r\n\r\n")));
    await until(() => frames.some((f) => f.channel === 1 && f.kind === FRAME.data));
    expect(Buffer.concat(received).toString()).toBe("GET / HTTP/1.1\r\n\r\n");
    expect(frames.find((f) => f.kind === FRAME.data)!.payload.toString()).toBe("echo:GET / HTTP/1.1\r\n\r\n");
    expect(mux.fault()).toBeUndefined();
    mux.close();
  });

  // contract: R242
  it.each([
    ["a frame above the payload bound", () => lengthSaid(70_000), /a frame of 70000 bytes, above the 65536-byte bound/],
    ["a frame of an unknown kind", () => encodeFrame(1, 9, Buffer.from("x")), /unknown kind 9/],
    ["data on a channel never opened", () => encodeFrame(7, FRAME.data, Buffer.from("x")), /channel 7, which it never opened/],
    ["a channel to something that is no endpoint", () => encodeFrame(1, FRAME.open, Buffer.from("/etc/passwd")), /no endpoint of this attempt/],
  ])("refuses %s and ends every channel", async (_name, garbage, reason) => {
    const { fromRelay, toRelay } = relayPair();
    const mux = serveStream(fromRelay, toRelay, new Map([["model-api", socket]]));
    const faults: string[] = [];
    mux.onFault((r) => faults.push(r));
    fromRelay.write(encodeFrame(0, FRAME.ready));
    await mux.ready;
    fromRelay.write(garbage());
    await until(() => faults.length > 0);
    expect(mux.fault()).toMatch(reason);
    expect(faults).toHaveLength(1);
  });

  // contract: R242
  it("refuses more channels open at once than the bound, and anything before the relay is ready", async () => {
    const { fromRelay, toRelay } = relayPair();
    const mux = serveStream(fromRelay, toRelay, new Map([["model-api", socket]]), { maxPayloadBytes: 1024, maxChannels: 3, channelBufferBytes: 1024 });
    fromRelay.write(encodeFrame(0, FRAME.ready));
    await mux.ready;
    for (let id = 1; id <= 4; id++) fromRelay.write(encodeFrame(id, FRAME.open, Buffer.from("model-api")));
    await until(() => mux.fault() !== undefined);
    expect(mux.fault()).toMatch(/more than 3 channels at once/);

    const early = relayPair();
    const refused = serveStream(early.fromRelay, early.toRelay, new Map([["model-api", socket]]));
    early.fromRelay.write(encodeFrame(1, FRAME.open, Buffer.from("model-api")));
    await expect(refused.ready).rejects.toThrow(/before it was ready/);
  });

  // contract: R242
  it("takes the endpoint's half-close as the channel's close and the relay's close as the endpoint connection's end", async () => {
    const halfClosed = new Promise<void>((resolve) => {
      echo.close();
      echo = createServer({ allowHalfOpen: true }, (c) => {
        c.on("end", () => {
          c.end("bye");
          resolve();
        });
      });
    });
    await rm(socket, { force: true });
    await new Promise<void>((r) => echo.listen(socket, r));
    const { fromRelay, toRelay, frames } = relayPair();
    const mux = serveStream(fromRelay, toRelay, new Map([["doc-bridge", socket]]));
    fromRelay.write(encodeFrame(0, FRAME.ready));
    await mux.ready;
    fromRelay.write(encodeFrame(1, FRAME.open, Buffer.from("doc-bridge")));
    fromRelay.write(encodeFrame(1, FRAME.close));
    await halfClosed;
    await until(() => frames.some((f) => f.kind === FRAME.close));
    expect(Buffer.concat(frames.filter((f) => f.kind === FRAME.data).map((f) => f.payload)).toString()).toBe("bye");
    expect(mux.fault()).toBeUndefined();
    mux.close();
  });
});

describe("the engine-api stream's backpressure", () => {
  // contract: R252
  it("an endpoint that stops reading stops the relay's stream, once, however many frames come", async () => {
    let stalled: import("node:net").Socket | undefined;
    await new Promise((r) => echo.close(r));
    await rm(socket, { force: true });
    echo = createServer((c) => {
      c.pause();
      stalled = c;
    });
    await new Promise<void>((r) => echo.listen(socket, r));
    const warnings: string[] = [];
    const warned = (w: Error): void => void warnings.push(w.name);
    process.on("warning", warned);
    const { fromRelay, toRelay } = relayPair();
    const mux = serveStream(fromRelay, toRelay, new Map([["model-api", socket]]), { maxPayloadBytes: 16 * 1024, maxChannels: 4, channelBufferBytes: 64 * 1024 });
    fromRelay.write(encodeFrame(0, FRAME.ready));
    await mux.ready;
    fromRelay.write(encodeFrame(1, FRAME.open, Buffer.from("model-api")));
    // Many frames at once, as a pipe delivers them: the stream pauses on the first past the bound, not once per frame.
    const frame = Buffer.concat(Array.from({ length: 32 }, () => encodeFrame(1, FRAME.data, Buffer.alloc(16 * 1024, 0x61))));
    let accepted = 0;
    // The relay writes as its stream lets it, for as long as the stream takes anything within half a second.
    for (;;) {
      if (fromRelay.write(frame)) {
        accepted += frame.length;
        if (accepted > 64 * 1024 * 1024) break;
        continue;
      }
      accepted += frame.length;
      const drained = await Promise.race([new Promise((r) => fromRelay.once("drain", () => r(true))), new Promise((r) => setTimeout(() => r(false), 500))]);
      if (!drained) break;
    }
    expect(stalled).toBeDefined();
    // What the runner took is the endpoint's kernel buffer, the channel's bound and a few frames: not the flood.
    expect(accepted).toBeLessThan(8 * 1024 * 1024);
    expect(fromRelay.isPaused()).toBe(true);
    expect(mux.fault()).toBeUndefined();
    // Reading again lets the stream go on.
    stalled!.resume();
    await until(() => !fromRelay.isPaused());
    process.off("warning", warned);
    expect(warnings).toEqual([]);
    mux.close();
  });
});

/** The fake engine with the engine-api channel's operations, which the preflight checks for but never calls. */
function engineApiRuntime(): FakeRuntime {
  const runtime = new FakeRuntime({ program: ({ stdout }) => void stdout.write("2.1.296 (Claude Code)\n") });
  runtime.addImage("study-runner/fake-claude:2.1.296", { [IMAGE_LABELS.claudeSha256]: "a".repeat(64), [IMAGE_LABELS.kind]: "fake-claude" });
  const unused = () => Promise.reject(new Error("not called by the preflight"));
  return Object.assign(runtime, { createVolume: unused, putArchive: unused, attachStdio: unused });
}

describe("the preflight's channel", () => {
  const base = { image: "study-runner/fake-claude:2.1.296", expectedCliVersion: "2.1.296", runtimeName: undefined, runId: "run-test" };

  // contract: R244
  it("refuses the login-copy mode on the engine-api channel before anything is reserved, naming the fix", async () => {
    const runtime = engineApiRuntime();
    const engine = await runtime.ping();
    await expect(probeCliImage(runtime, engine, { ...base, channel: "engine-api", route: { isolation: "offline", gateway: false, modelApiSocket: false } })).rejects.toThrow(
      /login-copy mode is not carried over it.*use --credentials gateway.*nothing was charged/,
    );
    const chosen = await probeCliImage(runtime, engine, { ...base, channel: "engine-api", route: { isolation: "offline", gateway: true, modelApiSocket: false } });
    expect(chosen.channel).toBe("engine-api");
  });

  // contract: R244
  it("takes host-paths when the engine sees the runner's files, and refuses engine-api on a runtime without it", async () => {
    const runtime = new FakeRuntime({ program: ({ stdout }) => void stdout.write("2.1.296 (Claude Code)\n") });
    runtime.addImage("study-runner/fake-claude:2.1.296", { [IMAGE_LABELS.claudeSha256]: "a".repeat(64), [IMAGE_LABELS.kind]: "fake-claude" });
    const engine = await runtime.ping();
    const route = { isolation: "offline" as const, gateway: true, modelApiSocket: false };
    expect((await probeCliImage(runtime, engine, { ...base, route })).channel).toBe("host-paths");
    await expect(probeCliImage(runtime, engine, { ...base, channel: "engine-api", route })).rejects.toThrow(/which this container runtime does not offer; nothing was charged/);
  });
});
