// mcp-relay.cjs <socket>: joins this process's stdin/stdout to a unix socket, byte for byte.
//
// Claude Code starts it inside the study container as the doc-bridge stdio "server"; the real
// server runs on the host, behind the runner's bridge at the other end of the socket. Plain
// Node with no dependencies, because the image has bare node and nothing else; CommonJS, because
// every doc-bridge attempt starts it and an ES module entry costs the ES loader's start (measured
// in an attempt container: 36-40 ms for the ES module against 27-33 ms for `node -e 0`).
"use strict";
const { createConnection } = require("node:net");

const socketPath = process.argv[2];
if (!socketPath) {
  process.stderr.write("usage: mcp-relay.cjs <unix-socket-path>\n");
  process.exit(2);
}

// After our stdin closes, the host side gets this long to flush and close before we leave.
const DRAIN_MS = 2000;

const socket = createConnection({ path: socketPath, allowHalfOpen: true });

function exit(code) {
  // Writes to a pipe are synchronous on Linux, but wait for the callback anyway.
  process.stdout.write("", () => process.exit(code));
}

socket.on("connect", () => {
  process.stdin.pipe(socket);
  socket.pipe(process.stdout, { end: false });
});
process.stdin.on("end", () => {
  setTimeout(() => exit(0), DRAIN_MS).unref();
});
socket.on("error", (err) => {
  process.stderr.write(`mcp-relay: ${err.code ?? ""} ${err.message}\n`);
  exit(1);
});
// The host closed its side (the server exited or the runner stopped the bridge): we are done.
socket.on("end", () => exit(0));
socket.on("close", () => exit(0));
process.stdout.on("error", () => process.exit(1));
