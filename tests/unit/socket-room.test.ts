/**
 * A unix socket's path has at most 107 bytes on Linux. The runner makes its units' sockets in
 * folders of TMPDIR; a TMPDIR too deep for them is refused at preflight, and a socket path too long
 * is refused before listening (Node binds a truncated path instead, and the chmod that follows
 * failed with ENOENT in the middle of an attempt).
 */
import { createServer } from "node:net";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { assertSocketRoom, type UnitRoute } from "../../src/transport/cli/preflight.ts";
import { listenForContainer, MAX_SOCKET_PATH_BYTES, socketPathProblem } from "../../src/util/container-socket.ts";
import { RefusalError } from "../../src/util/errors.ts";

describe("room for the runner's sockets", () => {
  // contract: R288
  it("a TMPDIR too deep for the longest socket is refused before anything is reserved, naming TMPDIR, the path and the limit", () => {
    const every: UnitRoute = { isolation: "strict", gateway: false, modelApiSocket: false, docBridge: true, session: true };
    expect(() => assertSocketRoom(every, "/tmp")).not.toThrow();
    const deep = `/tmp/${"d".repeat(60)}`;
    // A route that makes no socket needs no room.
    expect(() => assertSocketRoom({ isolation: "offline", gateway: false, modelApiSocket: false }, deep)).not.toThrow();
    let refused: unknown;
    try {
      assertSocketRoom(every, deep);
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(RefusalError);
    const message = (refused as Error).message;
    expect(message).toContain(`TMPDIR ${deep} is too deep for the runner's sockets`);
    // The longest of them: the session channel's.
    expect(message).toContain(`the socket path ${deep}/study-runner-home-${process.pid}-XXXXXX/session-channel/session.sock is `);
    expect(message).toContain(` bytes, over the ${MAX_SOCKET_PATH_BYTES} bytes`);
    expect(message).toMatch(/set TMPDIR to a shorter folder.*nothing was charged$/);
  });

  it("a socket path one byte over the limit is refused before the server listens; one at the limit is not", async () => {
    const at = `/${"s".repeat(MAX_SOCKET_PATH_BYTES - 1)}`;
    expect(socketPathProblem(at)).toBeNull();
    expect(socketPathProblem(`${at}x`)).toContain(`is ${MAX_SOCKET_PATH_BYTES + 1} bytes`);
    const server = createServer();
    const dir = join("/tmp", "f".repeat(MAX_SOCKET_PATH_BYTES - "/tmp/".length - "/a.sock".length + 1));
    await expect(listenForContainer(server, dir, "a.sock")).rejects.toThrow(new RegExp(`^the socket path ${dir}/a\\.sock is ${MAX_SOCKET_PATH_BYTES + 1} bytes`));
    expect(server.listening).toBe(false);
  });
});
