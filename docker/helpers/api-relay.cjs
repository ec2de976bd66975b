// api-relay.cjs <port> <socket>: listens on 127.0.0.1:<port> and joins each TCP connection,
// byte for byte, to a new connection to the unix socket <socket>.
//
// Inside a container with NetworkMode "none" only loopback exists, so the Claude Code CLI
// (ANTHROPIC_BASE_URL=http://127.0.0.1:<port>) reaches the Messages API server on the host
// through a bind-mounted socket folder and nothing else. The relay does not parse HTTP: what
// the CLI sends is what the host server records. Plain Node with no dependencies, because
// the image has bare node and nothing else.
//
// Required (not run) by with-relay.cjs, which starts it in-process before it spawns claude.
// CommonJS like with-relay.cjs: an ES module here made every attempt's wrapper start the ES
// loader (measured: docs/performance.md, "Issue 28, third pass").
"use strict";
const { createConnection, createServer } = require("node:net");

/**
 * Starts the relay; resolves with the listening server once 127.0.0.1:<port> accepts
 * connections, rejects when it cannot listen (e.g. the port is taken).
 * @param {number} port
 * @param {string} socketPath
 * @param {(message: string) => void} [log] where connection errors are reported (default stderr)
 * @returns {Promise<import("node:net").Server>}
 */
function startApiRelay(port, socketPath, log = (m) => process.stderr.write(`api-relay: ${m}\n`)) {
  const server = createServer({ allowHalfOpen: true }, (client) => {
    const upstream = createConnection({ path: socketPath, allowHalfOpen: true });
    client.pipe(upstream);
    upstream.pipe(client);
    // One side failing ends both: the CLI sees a reset connection (and retries or reports an
    // API error), never a silently half-dead one.
    client.on("error", () => upstream.destroy());
    upstream.on("error", (err) => {
      log(`${socketPath}: ${err.code ?? ""} ${err.message}`);
      client.destroy();
    });
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen({ host: "127.0.0.1", port, exclusive: true }, () => {
      server.off("error", reject);
      resolve(server);
    });
  });
}

/** Validates the argv pair; returns a message for the first problem, or undefined. */
function relayArgumentProblem(portText, socketPath) {
  if (!/^[0-9]{1,5}$/.test(portText ?? "") || Number(portText) < 1 || Number(portText) > 65535) {
    return `port ${JSON.stringify(portText)} is not 1..65535`;
  }
  if (!socketPath?.startsWith("/")) return `socket path ${JSON.stringify(socketPath)} is not absolute`;
  return undefined;
}

module.exports = { relayArgumentProblem, startApiRelay };

if (require.main === module) {
  const [portText, socketPath] = process.argv.slice(2);
  const problem = relayArgumentProblem(portText, socketPath);
  if (problem) {
    process.stderr.write(`usage: api-relay.cjs <port> <unix-socket-path>: ${problem}\n`);
    process.exit(2);
  }
  startApiRelay(Number(portText), socketPath).then(
    () => process.stderr.write(`api-relay: 127.0.0.1:${portText} -> ${socketPath}\n`),
    (err) => {
      process.stderr.write(`api-relay: cannot listen on 127.0.0.1:${portText}: ${err.code ?? ""} ${err.message}\n`);
      process.exit(1);
    },
  );
}
