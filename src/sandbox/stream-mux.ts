import { connect, type Socket } from "node:net";

/**
 * The runner's end of the engine-api channel's stream (contract R242): the frames the relay
 * container (docker/helpers/stream-relay.cjs, which keeps the same numbers) writes on its stdout,
 * one channel per connection the inside opened to an endpoint socket, each joined here to a new
 * connection to the real endpoint on the runner's host, so the gateway, the doc-bridge and the
 * proxy see the same bytes as through a bound socket folder. The relay is as untrusted as the
 * attempt beside it: a frame that breaks the format or the bounds ends the stream and is kept as
 * the fault the attempt is recorded invalid-setup for.
 *
 * A frame: channel (uint32 BE) | kind (uint8) | length (uint32 BE) | payload.
 */

/**
 * `listen` goes from the runner to the relay only: the endpoints' names and sockets, a
 * `<name>=<socket>` line each. Before it, on channel 0, `put` and `data` frames may carry the
 * staged folder (src/sandbox/staged-stream.ts), which the relay answers with one `staged` frame,
 * the digest of what it wrote, before `ready` (contract R282).
 */
export const FRAME = { open: 1, data: 2, close: 3, ready: 4, listen: 5, put: 6, staged: 7 } as const;
export const FRAME_HEADER_BYTES = 9;

export interface StreamLimits {
  /** The largest payload of one frame. */
  maxPayloadBytes: number;
  /** Channels open at once. */
  maxChannels: number;
  /** Bytes waiting for one endpoint connection before the stream pauses. */
  channelBufferBytes: number;
}

export const STREAM_LIMITS: StreamLimits = { maxPayloadBytes: 64 * 1024, maxChannels: 64, channelBufferBytes: 1024 * 1024 };

export function encodeFrame(channel: number, kind: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.alloc(FRAME_HEADER_BYTES);
  header.writeUInt32BE(channel, 0);
  header.writeUInt8(kind, 4);
  header.writeUInt32BE(payload.length, 5);
  return Buffer.concat([header, payload]);
}

interface Channel {
  socket: Socket;
  sentClose: boolean;
  gotClose: boolean;
}

export interface StreamMux {
  /** Resolves once the relay listens on every endpoint socket; rejects on a fault or the stream's end first. */
  ready: Promise<void>;
  /** The digest of the staged folder the relay says it wrote (its `staged` frame before `ready`), if it sent one (contract R282). */
  staged(): string | undefined;
  /** Why the stream was refused, once it was. */
  fault(): string | undefined;
  /** Called once, on the first fault. */
  onFault(listener: (reason: string) => void): void;
  /** Ends every channel. */
  close(): void;
}

/**
 * Serves the relay's stream: `input` is the relay's stdout, `output` its stdin, `endpoints` the
 * host socket of each endpoint name the relay may open channels to.
 */
export function serveStream(input: NodeJS.ReadableStream, output: NodeJS.WritableStream, endpoints: ReadonlyMap<string, string>, limits: StreamLimits = STREAM_LIMITS): StreamMux {
  return new StreamServer(input, output, endpoints, limits);
}

class StreamServer implements StreamMux {
  readonly ready: Promise<void>;
  private readonly channels = new Map<number, Channel>();
  private lastOpened = 0;
  private faultReason: string | undefined;
  private readonly listeners: Array<(reason: string) => void> = [];
  private outputPaused = false;
  /** The relay's stream waits for one endpoint connection to take what it was sent. */
  private inputPaused = false;
  private isReady = false;
  private stagedDigest: string | undefined;
  private closed = false;
  private pending: Buffer = Buffer.alloc(0);
  private resolveReady!: () => void;
  private rejectReady!: (err: Error) => void;
  private readonly onData = (chunk: Buffer): void => this.take(chunk);

  constructor(
    private readonly input: NodeJS.ReadableStream,
    private readonly output: NodeJS.WritableStream,
    private readonly endpoints: ReadonlyMap<string, string>,
    private readonly limits: StreamLimits,
  ) {
    this.ready = new Promise<void>((resolve, reject) => {
      this.resolveReady = resolve;
      this.rejectReady = reject;
    });
    this.ready.catch(() => undefined);
    input.on("data", this.onData);
    const ended = (): void => {
      if (!this.isReady) this.rejectReady(new Error(this.faultReason ?? "the relay's stream ended before it was ready"));
    };
    input.on("end", ended);
    input.on("close", ended);
    input.on("error", ended);
  }

  fault(): string | undefined {
    return this.faultReason;
  }

  staged(): string | undefined {
    return this.stagedDigest;
  }

  onFault(listener: (reason: string) => void): void {
    this.listeners.push(listener);
  }

  close(): void {
    // What the endpoint connections do once destroyed is nothing the relay hears of: its stdin may be ending.
    this.closed = true;
    this.input.removeListener("data", this.onData);
    for (const c of this.channels.values()) c.socket.destroy();
    this.channels.clear();
  }

  private refuse(reason: string): void {
    if (this.faultReason !== undefined) return;
    this.faultReason = reason;
    this.close();
    this.rejectReady(new Error(reason));
    for (const l of this.listeners) l(reason);
  }

  private send(channel: number, kind: number, payload?: Buffer): void {
    if (this.faultReason !== undefined || this.closed) return;
    if (!this.output.write(encodeFrame(channel, kind, payload)) && !this.outputPaused) {
      // The relay is not taking what the endpoints answer: every endpoint connection waits.
      this.outputPaused = true;
      for (const c of this.channels.values()) c.socket.pause();
      this.output.once("drain", () => {
        this.outputPaused = false;
        for (const c of this.channels.values()) c.socket.resume();
      });
    }
  }

  private settle(id: number): void {
    const c = this.channels.get(id);
    if (c?.sentClose && c.gotClose) {
      this.channels.delete(id);
      c.socket.destroy();
    }
  }

  private open(id: number, name: string): void {
    if (id !== this.lastOpened + 1) return this.refuse(`the relay opened channel ${id} after ${this.lastOpened}; channels are numbered in order`);
    this.lastOpened = id;
    const path = this.endpoints.get(name);
    if (path === undefined) return this.refuse(`the relay opened a channel to ${JSON.stringify(name.slice(0, 64))}, which is no endpoint of this attempt`);
    if (this.channels.size >= this.limits.maxChannels) return this.refuse(`the relay opened more than ${this.limits.maxChannels} channels at once`);
    const socket = connect({ path, allowHalfOpen: true });
    const c: Channel = { socket, sentClose: false, gotClose: false };
    this.channels.set(id, c);
    if (this.outputPaused) socket.pause();
    const max = this.limits.maxPayloadBytes;
    socket.on("data", (chunk: Buffer) => {
      for (let i = 0; i < chunk.length; i += max) this.send(id, FRAME.data, chunk.subarray(i, i + max));
    });
    const closed = (): void => {
      if (c.sentClose) return;
      c.sentClose = true;
      this.send(id, FRAME.close);
      this.settle(id);
    };
    socket.on("end", closed);
    socket.on("close", () => {
      closed();
      // A connection gone both ways takes what the relay still sends for it as nothing.
      c.gotClose = true;
      this.settle(id);
    });
    socket.on("error", () => undefined); // 'close' follows
  }

  private take(chunk: Buffer): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (this.faultReason === undefined && this.pending.length >= FRAME_HEADER_BYTES) {
      const id = this.pending.readUInt32BE(0);
      const kind = this.pending.readUInt8(4);
      const length = this.pending.readUInt32BE(5);
      if (length > this.limits.maxPayloadBytes) return this.refuse(`the relay sent a frame of ${length} bytes, above the ${this.limits.maxPayloadBytes}-byte bound`);
      if (this.pending.length < FRAME_HEADER_BYTES + length) return;
      const payload = this.pending.subarray(FRAME_HEADER_BYTES, FRAME_HEADER_BYTES + length);
      this.pending = this.pending.subarray(FRAME_HEADER_BYTES + length);
      this.frame(id, kind, payload);
    }
  }

  private frame(id: number, kind: number, payload: Buffer): void {
    if (kind === FRAME.ready && id === 0 && payload.length === 0 && !this.isReady) {
      this.isReady = true;
      this.resolveReady();
      return;
    }
    if (kind === FRAME.staged && id === 0 && !this.isReady && this.stagedDigest === undefined) {
      const digest = payload.toString("latin1");
      if (!/^[0-9a-f]{64}$/.test(digest)) return this.refuse("the relay's staged frame holds no sha256 digest");
      this.stagedDigest = digest;
      return;
    }
    if (!this.isReady) return this.refuse(`the relay sent a frame of kind ${kind} before it was ready`);
    if (kind === FRAME.open) return this.open(id, payload.toString("utf8"));
    if (kind !== FRAME.data && kind !== FRAME.close) return this.refuse(`the relay sent a frame of unknown kind ${kind}`);
    if (id < 1 || id > this.lastOpened) return this.refuse(`the relay sent a frame of kind ${kind} on channel ${id}, which it never opened`);
    const c = this.channels.get(id);
    // What comes for a connection already gone both ways is the race of a closing connection.
    if (!c || c.gotClose) return;
    if (kind === FRAME.close) {
      c.gotClose = true;
      c.socket.end();
      this.settle(id);
      return;
    }
    c.socket.write(payload);
    if (c.socket.writableLength > this.limits.channelBufferBytes && !this.inputPaused) {
      // The endpoint is not taking what the relay sends: the whole stream waits for it (bounded memory, contract R252).
      this.inputPaused = true;
      this.input.pause();
      const resume = (): void => {
        if (!this.inputPaused) return;
        this.inputPaused = false;
        c.socket.removeListener("drain", resume);
        c.socket.removeListener("close", resume);
        this.input.resume();
      };
      c.socket.once("drain", resume);
      c.socket.once("close", resume);
    }
  }
}
