// stream-relay.cjs [<name>=<socket> ...]: the engine-api channel's relay (src/sandbox/engine-api.ts).
//
// Runs alone in a per-attempt container with network "none", its stdio attached by the runner
// through the engine's API; it may be started before its attempt is known (made ahead), so with
// no arguments it waits for the runner's `listen` frame, which names the sockets. It listens on
// each unix <socket> (in a per-attempt volume the attempt
// container mounts read-only where it mounts the runner's socket folders on a local engine), and
// carries every connection accepted there as one channel of a multiplexed stream on its stdout,
// the runner's side answering on its stdin. The runner joins each channel to the real endpoint
// (the model gateway, the doc-bridge, the egress proxy), which sees the same bytes as through a
// bound socket folder.
//
// A frame: channel (uint32 BE) | kind (uint8) | length (uint32 BE) | payload (at most 64 KiB).
//   kind 1 open   (relay -> runner) payload: the endpoint's name; channel ids grow from 1
//   kind 2 data   (both ways)
//   kind 3 close  (both ways) the sender sends no more on the channel (a half-close, as a FIN)
//   kind 4 ready  (relay -> runner, channel 0) every socket listens
//   kind 5 listen (runner -> relay, channel 0, once, first) payload: <name>=<socket> lines
// The runner refuses anything else (src/sandbox/stream-mux.ts keeps the same numbers).
//
// Bounded: a connection whose bytes the runner has not taken (stdout full) pauses every
// connection; a connection that does not read what the runner sent pauses stdin.
"use strict";
const fs = require("node:fs");
const net = require("node:net");

const KIND = { open: 1, data: 2, close: 3, ready: 4, listen: 5 };
const HEADER = 9;
const MAX_PAYLOAD = 64 * 1024;
const CONNECTION_BUFFER = 1024 * 1024;

function fail(message) {
  process.stderr.write(`stream-relay: ${message}\n`);
  process.exit(2);
}

function parseEndpoints(args) {
  return args.map((arg) => {
    const eq = arg.indexOf("=");
    if (eq < 1 || !arg.slice(eq + 1).startsWith("/")) fail(`argument ${JSON.stringify(arg)} is not <name>=<absolute socket path>`);
    return { name: arg.slice(0, eq), socket: arg.slice(eq + 1) };
  });
}

const out = process.stdout;
const connections = new Map();
let nextChannel = 1;
let outPaused = false;

function frame(channel, kind, payload = Buffer.alloc(0)) {
  const header = Buffer.alloc(HEADER);
  header.writeUInt32BE(channel, 0);
  header.writeUInt8(kind, 4);
  header.writeUInt32BE(payload.length, 5);
  if (!out.write(Buffer.concat([header, payload])) && !outPaused) {
    outPaused = true;
    for (const c of connections.values()) c.socket.pause();
    out.once("drain", () => {
      outPaused = false;
      for (const c of connections.values()) c.socket.resume();
    });
  }
}

function settle(channel) {
  const c = connections.get(channel);
  if (c?.sentClose && c.gotClose) {
    connections.delete(channel);
    c.socket.destroy();
  }
}

function accept(name, socket) {
  const channel = nextChannel++;
  const c = { socket, sentClose: false, gotClose: false };
  connections.set(channel, c);
  frame(channel, KIND.open, Buffer.from(name, "utf8"));
  if (outPaused) socket.pause();
  socket.on("data", (chunk) => {
    for (let i = 0; i < chunk.length; i += MAX_PAYLOAD) frame(channel, KIND.data, chunk.subarray(i, i + MAX_PAYLOAD));
  });
  const closed = () => {
    if (c.sentClose) return;
    c.sentClose = true;
    frame(channel, KIND.close);
    settle(channel);
  };
  socket.on("end", closed);
  socket.on("close", () => {
    closed();
    c.gotClose = true;
    settle(channel);
  });
  socket.on("error", () => undefined); // 'close' follows
}

// The runner's frames on stdin.
let pending = Buffer.alloc(0);
process.stdin.on("data", (chunk) => {
  pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
  while (pending.length >= HEADER) {
    const channel = pending.readUInt32BE(0);
    const kind = pending.readUInt8(4);
    const length = pending.readUInt32BE(5);
    if (length > MAX_PAYLOAD) fail(`a frame of ${length} bytes from the runner`);
    if (pending.length < HEADER + length) break;
    const payload = pending.subarray(HEADER, HEADER + length);
    pending = pending.subarray(HEADER + length);
    if (kind === KIND.listen && channel === 0 && !listened) {
      const lines = payload
        .toString("utf8")
        .split("\n")
        .filter((l) => l !== "");
      listen(parseEndpoints(lines));
      continue;
    }
    const c = connections.get(channel);
    if (!c) continue; // the connection went away while the runner wrote to it
    if (kind === KIND.data) {
      if (!c.socket.write(payload) && c.socket.writableLength > CONNECTION_BUFFER) {
        process.stdin.pause();
        c.socket.once("drain", () => process.stdin.resume());
      }
    } else if (kind === KIND.close) {
      c.gotClose = true;
      c.socket.end();
      settle(channel);
    }
  }
});
// The runner went away: nothing is served any more.
process.stdin.on("end", () => process.exit(0));

let listened = false;
function listen(endpoints) {
  listened = true;
  if (endpoints.length === 0) return frame(0, KIND.ready);
  let listening = 0;
  for (const e of endpoints) {
    try {
      fs.unlinkSync(e.socket);
    } catch {}
    const server = net.createServer({ allowHalfOpen: true }, (socket) => accept(e.name, socket));
    server.on("error", (err) => fail(`${e.socket}: ${err.code ?? ""} ${err.message}`));
    server.listen(e.socket, () => {
      // The attempt's user connects; the relay runs as another.
      fs.chmodSync(e.socket, 0o666);
      if (++listening === endpoints.length) frame(0, KIND.ready);
    });
  }
}
if (process.argv.length > 2) listen(parseEndpoints(process.argv.slice(2)));
