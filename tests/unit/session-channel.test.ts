import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createConnection, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { openSessionChannel, sessionChannelPaths } from "../../src/transport/cli/session-channel.ts";
import { collectSessionCall, parseSessionStream, STATE_FILE_LIMIT_BYTES } from "../../src/session/state.ts";

let dir = "";
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "sr-session-channel-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Connects and resolves with the first line the runner sends, or the connection's error code. */
function connect(path: string): Promise<{ socket: Socket; line: string } | { error: string }> {
  return new Promise((resolve) => {
    const socket = createConnection(path);
    let seen = "";
    socket.on("data", (chunk) => {
      seen += chunk.toString();
      if (seen.includes("\n")) resolve({ socket, line: seen });
    });
    socket.on("error", (err: NodeJS.ErrnoException) => resolve({ error: err.code ?? String(err) }));
    socket.on("close", () => resolve({ error: "closed" }));
  });
}

const frame = (path: string, text: string) => `${JSON.stringify({ path, bytes: Buffer.byteLength(text) })}\n${text}`;
const END = '{"end":true}\n';

describe("the session channel (runner side)", () => {
  // contract: R141
  it("says ready to the first connection only after its listener is closed: a second one finds nothing, and what the first sends is kept", async () => {
    const paths = sessionChannelPaths(dir);
    const channel = await openSessionChannel(paths.socketDir, paths.streamFile, 1024 * 1024);
    try {
      const first = await connect(channel.socketPath);
      if (!("line" in first)) throw new Error(`the first connection failed: ${first.error}`);
      expect(first.line).toBe("ready\n");
      // Once ready was said, nobody else can connect: the listener and its socket file are gone.
      const second = await connect(channel.socketPath);
      expect(second).toMatchObject({ error: expect.stringMatching(/^(ENOENT|ECONNREFUSED)$/) });
      expect(await readdir(channel.socketDir)).toEqual([]);
      first.socket.end(frame("-workspace/a.jsonl", "{}\n") + END);
      const receipt = await channel.finish(5_000);
      expect(receipt.problem).toBeNull();
      const state = join(dir, "state");
      await mkdir(state, { mode: 0o700 });
      expect(await collectSessionCall(receipt, state)).toEqual([]);
      expect(await readFile(join(state, "-workspace", "a.jsonl"), "utf8")).toBe("{}\n");
    } finally {
      await channel.close();
    }
  });

  // contract: R141
  it("keeps at most its bound, and says when the container never connected", async () => {
    const paths = sessionChannelPaths(dir);
    const channel = await openSessionChannel(paths.socketDir, paths.streamFile, 64);
    const first = await connect(channel.socketPath);
    if (!("line" in first)) throw new Error(`the first connection failed: ${first.error}`);
    first.socket.end(frame("a.jsonl", "x".repeat(100)) + END);
    expect((await channel.finish(5_000)).problem).toMatch(/longer than 64 bytes/);
    await channel.close();
    const idle = sessionChannelPaths(join(dir, "idle"));
    await mkdir(join(dir, "idle"));
    const unused = await openSessionChannel(idle.socketDir, idle.streamFile, 64);
    expect(await unused.finish(100)).toEqual({ streamFile: null, problem: "the container never opened the session channel" });
    await unused.close();
  });
});

describe("the session files' stream (read as untrusted)", () => {
  // contract: R141
  it("refuses the whole stream for a missing end, an odd path, a file twice, a file past its bound or bytes after the end, and keeps the previous state", async () => {
    const bad: Record<string, string> = {
      "no end frame": frame("a.jsonl", "{}\n"),
      "cut short": `${JSON.stringify({ path: "a.jsonl", bytes: 10 })}\n{}`,
      "a path up and out": frame("../a.jsonl", "{}\n") + END,
      "an absolute path": frame("/etc/a", "{}\n") + END,
      "too deep": frame("a/b/c/d/e.jsonl", "{}\n") + END,
      "a file twice": frame("a.jsonl", "1") + frame("a.jsonl", "2") + END,
      "a file and a folder": frame("a", "1") + frame("a/b", "2") + END,
      "past the file bound": `${JSON.stringify({ path: "a.jsonl", bytes: STATE_FILE_LIMIT_BYTES + 1 })}\n` + END,
      "another header": `${JSON.stringify({ path: "a.jsonl", bytes: 1, mode: 0o777 })}\n1` + END,
      "after the end": END + frame("a.jsonl", "1"),
    };
    for (const [what, text] of Object.entries(bad)) expect(parseSessionStream(Buffer.from(text)), what).toHaveProperty("problem");
    expect(parseSessionStream(Buffer.from(frame("-workspace/x.jsonl", "1") + frame("-workspace/y/z.jsonl", "") + END))).toEqual({
      files: [
        { path: "-workspace/x.jsonl", bytes: Buffer.from("1") },
        { path: "-workspace/y/z.jsonl", bytes: Buffer.from("") },
      ],
    });
    // A refused stream leaves the session's previous state as it was.
    const state = join(dir, "state");
    await mkdir(state, { mode: 0o700 });
    await writeFile(join(state, "kept.jsonl"), "previous");
    const stream = join(dir, "stream");
    await writeFile(stream, bad["a file twice"]!);
    expect(await collectSessionCall({ streamFile: stream, problem: null }, state)).toEqual([expect.stringContaining("twice")]);
    expect(await readdir(state)).toEqual(["kept.jsonl"]);
  });
});
