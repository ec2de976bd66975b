import { afterEach, describe, expect, it } from "vitest";
import { createServer, connect, type Server } from "node:net";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { childProcessCounts, ChildProcessError, runChild, runChildResult } from "../../src/process/child.ts";
import { watchNetwork } from "../../src/process/network.ts";
import { measureSideEffects, sideEffectViolations } from "../../src/process/measure.ts";

/** The children each command name started since `before` (the counter is per process, and a test file shares one). */
function startedSince(before: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(childProcessCounts()).flatMap(([name, n]) => (n > (before[name] ?? 0) ? [[name, n - (before[name] ?? 0)]] : [])));
}

describe("the one child-process module", () => {
  it("counts every child by command name", async () => {
    const before = childProcessCounts();
    await runChild("git", ["--version"], { timeoutMs: 10_000, maxOutputBytes: 4096 });
    await runChild("git", ["--version"], { timeoutMs: 10_000, maxOutputBytes: 4096 });
    await runChild("/bin/true", [], { timeoutMs: 10_000, maxOutputBytes: 4096 });
    expect(startedSince(before)).toEqual({ git: 2, true: 1 });
  });

  it("closes stdin: a child that reads it sees its end at once", async () => {
    const r = await runChild("cat", [], { timeoutMs: 5_000, maxOutputBytes: 4096 });
    expect(r.stdout.length).toBe(0);
    expect(r.exitCode).toBe(0);
    const fed = await runChild("cat", [], { input: "hello", timeoutMs: 5_000, maxOutputBytes: 4096 });
    expect(fed.stdout.toString()).toBe("hello");
  });

  it("bounds the output: past the bound the child is killed and the call fails", async () => {
    const args = ["-e", "process.stdout.write('x'.repeat(1 << 20))"];
    const r = await runChildResult(process.execPath, args, { timeoutMs: 10_000, maxOutputBytes: 1000 });
    expect(r).toMatchObject({ truncated: true, timedOut: false });
    expect(r.stdout.length).toBe(1000);
    await expect(runChild(process.execPath, args, { timeoutMs: 10_000, maxOutputBytes: 1000 })).rejects.toThrow(/output exceeded 1000 bytes/);
  });

  it("kills a child at its timeout", async () => {
    const started = Date.now();
    const r = await runChildResult("sleep", ["30"], { timeoutMs: 200, maxOutputBytes: 1000 });
    expect(r).toMatchObject({ timedOut: true, exitCode: null, signal: "SIGKILL" });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("names the command, its exit and its stderr on failure, and the errno when it did not start", async () => {
    const err = await runChild("git", ["no-such-subcommand"], { timeoutMs: 10_000, maxOutputBytes: 4096 }).catch((e) => e);
    expect(err).toBeInstanceOf(ChildProcessError);
    expect(err.message).toMatch(/^Command failed \(exit 1\): git no-such-subcommand\n.*not a git command/s);
    const missing = await runChild("no-such-program-here", [], { timeoutMs: 1000, maxOutputBytes: 10 }).catch((e) => e);
    expect(missing.code).toBe("ENOENT");
  });
});

describe("the network counter", () => {
  let server: Server | undefined;
  let dir: string | undefined;
  const open = new Set<import("node:net").Socket>();
  afterEach(async () => {
    for (const s of open) s.destroy();
    await new Promise((r) => (server ? server.close(r) : r(undefined)));
    server = undefined;
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("counts TCP connects, unix-socket connects and fetch calls of this process, and stops counting when stopped", async () => {
    server = createServer((s) => {
      open.add(s);
      s.end("HTTP/1.1 204 No Content\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    });
    await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    dir = await mkdtemp(join(tmpdir(), "sr-net-"));
    const unix = createServer((s) => {
      open.add(s);
      s.end();
    });
    await new Promise<void>((r) => unix.listen(join(dir!, "s.sock"), r));

    const watch = watchNetwork();
    try {
      await new Promise<void>((r, j) =>
        connect(port, "127.0.0.1", r)
          .on("error", j)
          .on("connect", function (this: { end(): void }) {
            this.end();
          }),
      );
      await new Promise<void>((r, j) =>
        connect(join(dir!, "s.sock"), r)
          .on("error", j)
          .on("connect", function (this: { end(): void }) {
            this.end();
          }),
      );
      await fetch(`http://127.0.0.1:${port}/`)
        .then((res) => res.arrayBuffer())
        .catch(() => undefined);
    } finally {
      watch.stop();
    }
    const counts = watch.counts();
    expect(counts.unixSocketConnects).toBe(1);
    expect(counts.fetchCalls).toBe(1);
    // The plain connect and the one fetch opened.
    expect(counts.inetConnects).toBe(2);
    expect(watch.networkCalls()).toBe(3);
    await new Promise<void>((r) =>
      connect(port, "127.0.0.1").on("connect", function (this: { end(): void }) {
        this.end();
        r();
      }),
    );
    expect(watch.counts().inetConnects).toBe(2);
    await new Promise((r) => unix.close(r));
  });
});

describe("measured side effects", () => {
  it("reports children started since the start only, and flags a child other than the allowed ones and any network use", async () => {
    await runChild("/bin/true", [], { timeoutMs: 5_000, maxOutputBytes: 10 });
    const m = measureSideEffects();
    await runChild("git", ["--version"], { timeoutMs: 10_000, maxOutputBytes: 4096 });
    const seen = m.finish();
    expect(seen).toMatchObject({ childProcesses: { git: 1 }, claudeProcesses: 0, networkCalls: 0 });
    expect(sideEffectViolations(seen, ["git"])).toEqual([]);
    expect(sideEffectViolations({ ...seen, childProcesses: { git: 1, claude: 1 }, claudeProcesses: 1 }, ["git"])).toEqual(["started child processes other than git: claude (1)"]);
    expect(sideEffectViolations({ ...seen, networkCalls: 2 }, ["git"])[0]).toMatch(/^used the network 2 time\(s\)/);
  });
});
