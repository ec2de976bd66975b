// with-relay.mjs <socket> -- <command> [args...]: the container's entrypoint when the Messages
// API is reached through a unix socket. It starts api-relay.mjs in this process, listening on the
// port that ANTHROPIC_BASE_URL names, and only once it listens spawns <command> (claude) with the
// same environment and every stdio stream inherited, so the container's stdout is exactly the
// CLI's stream-json (this wrapper never writes to stdout). Signals it receives go to the child,
// and it exits with the child's exit code (128 + signal number when the child was killed: as PID 1
// of a container this process cannot re-raise a signal on itself).
//
// Why one wrapper process rather than a shell line or a second container: a scratch image has no
// shell, and a sidecar would need a shared network namespace; here the relay lives exactly as long
// as the CLI and cannot be started late (the CLI's first request, HEAD /api/hello, comes at once).
//
// The port is read from ANTHROPIC_BASE_URL, which must be http://127.0.0.1:<port>, so the address
// the CLI uses and the one the relay listens on cannot disagree; anything else is refused before
// the CLI starts (exit 2), never silently routed elsewhere.
import { spawn } from "node:child_process";
import { constants } from "node:os";
import { relayArgumentProblem, startApiRelay } from "./api-relay.mjs";

function fail(code, message) {
  process.stderr.write(`with-relay: ${message}\n`);
  process.exit(code);
}

const args = process.argv.slice(2);
const socketPath = args[0];
if (args[1] !== "--" || args.length < 3) fail(2, "usage: with-relay.mjs <unix-socket-path> -- <command> [args...]");
const [command, ...commandArgs] = args.slice(2);

const baseUrl = process.env.ANTHROPIC_BASE_URL ?? "";
const portText = /^http:\/\/127\.0\.0\.1:([0-9]{1,5})\/?$/.exec(baseUrl)?.[1];
if (portText === undefined) fail(2, `ANTHROPIC_BASE_URL ${JSON.stringify(baseUrl)} is not http://127.0.0.1:<port>`);
const problem = relayArgumentProblem(portText, socketPath);
if (problem) fail(2, problem);

try {
  await startApiRelay(Number(portText), socketPath);
} catch (err) {
  fail(1, `cannot listen on 127.0.0.1:${portText}: ${err.code ?? ""} ${err.message}`);
}

const child = spawn(command, commandArgs, { stdio: "inherit" });
const forwarded = ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"];
for (const signal of forwarded) process.on(signal, () => child.kill(signal));
child.on("error", (err) => fail(err.code === "ENOENT" ? 127 : 126, `cannot start ${command}: ${err.message}`));
child.on("exit", (code, signal) => {
  process.exit(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0));
});
