import { createWriteStream, type WriteStream } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { listenForContainer, makeSocketDir } from "../../util/container-socket.ts";

/**
 * The channel a session call's files leave the container through (contract R141): a unix socket
 * the runner listens on, in a fresh folder bind-mounted read-only, which with-relay.cjs connects to
 * before the CLI starts. The first connection is the wrapper's (it is the container's only process
 * then); the runner closes its listener at once and only then sends the "ready" line the wrapper
 * waits for, so once the CLI runs there is nothing left to connect to, and the one connection is a
 * descriptor the CLI never inherits. Nothing the agent's file tools can name is writable: the
 * folder is read-only (EROFS), a socket cannot be opened as a file (ENXIO), a second connection
 * finds no listener. What arrives is written to `streamFile` (a private file outside every mount),
 * at most `limitBytes`; src/session/state.ts reads it as untrusted input all the same.
 */

/**
 * The most the runner keeps of one call's stream: the session files' own bound (32 MiB, the
 * same in with-relay.cjs and src/session/state.ts) and 1 MiB for the frames' header lines.
 */
export const SESSION_STREAM_LIMIT_BYTES = 33 * 1024 * 1024;

/** The socket's name in its folder. */
export const SESSION_CHANNEL_SOCKET = "session.sock";

export interface SessionChannelReceipt {
  /** The bytes received, or null when the container never connected. */
  streamFile: string | null;
  /** Why the stream cannot be complete (too long, never opened); null otherwise. */
  problem: string | null;
}

export interface SessionChannel {
  readonly socketDir: string;
  readonly socketPath: string;
  /** After the container ended: waits for the connection to close (at most `timeoutMs`) and says what arrived. */
  finish(timeoutMs?: number): Promise<SessionChannelReceipt>;
  /** Closes everything; idempotent. */
  close(): Promise<void>;
}

/** The longest unix socket path Linux takes (sun_path less its NUL); a longer one is cut short silently. */
const SOCKET_PATH_LIMIT_BYTES = 107;

export async function openSessionChannel(socketDir: string, streamFile: string, limitBytes: number): Promise<SessionChannel> {
  const wanted = join(socketDir, SESSION_CHANNEL_SOCKET);
  if (Buffer.byteLength(wanted) > SOCKET_PATH_LIMIT_BYTES)
    throw new Error(`the session channel's socket path ${wanted} is longer than ${SOCKET_PATH_LIMIT_BYTES} bytes; set TMPDIR to a shorter folder`);
  const dir = await makeSocketDir(socketDir, "sr-session-channel-");
  let connection: Socket | undefined;
  let out: WriteStream | undefined;
  let received = 0;
  let problem: string | null = null;
  let closed: Promise<void> | undefined;
  const server: Server = createServer((socket) => {
    if (connection !== undefined) {
      // Queued behind the wrapper's before the listener closed: never read.
      socket.destroy();
      return;
    }
    connection = socket;
    const file = createWriteStream(streamFile, { flags: "wx", mode: 0o600 });
    out = file;
    closed = new Promise<void>((resolve) => {
      let pending = 2;
      const done = () => --pending === 0 && resolve();
      socket.once("close", () => {
        file.end();
        done();
      });
      file.once("close", done);
      file.once("error", (err) => {
        problem = `the session files could not be kept (${(err as NodeJS.ErrnoException).code ?? "error"})`;
        socket.destroy();
        done();
      });
    });
    socket.on("error", () => {}); // a reset is an incomplete stream, which the reader sees
    socket.on("data", (chunk: Buffer) => {
      received += chunk.length;
      if (received > limitBytes) {
        problem ??= `the session files sent are longer than ${limitBytes} bytes`;
        socket.destroy();
        return;
      }
      file.write(chunk);
    });
    socket.on("end", () => socket.end());
    // Nobody can connect once the listener is closed; only then may the wrapper start the CLI.
    server.close();
    socket.write("ready\n");
  });
  const socketPath = await listenForContainer(server, dir, SESSION_CHANNEL_SOCKET);
  return {
    socketDir: dir,
    socketPath,
    async finish(timeoutMs = 10_000) {
      if (connection === undefined) return { streamFile: null, problem: "the container never opened the session channel" };
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          problem ??= `the session channel was still open ${timeoutMs} ms after the container ended`;
          connection?.destroy();
          resolve();
        }, timeoutMs);
      });
      await Promise.race([closed, timedOut]);
      clearTimeout(timer);
      await closed;
      return { streamFile, problem };
    },
    async close() {
      connection?.destroy();
      out?.end();
      if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()));
      if (closed) await closed;
    },
  };
}

/** Where the channel's socket folder and its stream file go inside a call's private folder. */
export function sessionChannelPaths(parent: string): { socketDir: string; streamFile: string } {
  return { socketDir: join(parent, "session-channel"), streamFile: join(parent, "session-files.stream") };
}
