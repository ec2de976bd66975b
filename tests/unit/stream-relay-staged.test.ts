import { spawn } from "node:child_process";
import { PassThrough } from "node:stream";
import { chmod, lstat, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readStagedTree, sendStaged, STAGED_LIMIT_BYTES } from "../../src/sandbox/staged-stream.ts";
import { encodeFrame, FRAME, serveStream } from "../../src/sandbox/stream-mux.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

/**
 * The staged folder on the relay's stream (src/sandbox/staged-stream.ts and
 * docker/helpers/stream-relay.cjs), the relay run here as a plain process: what it writes is the
 * folder sent, with its modes and owner, its digest the runner's; a header that leaves the root,
 * names a link or passes the bounds ends the relay with nothing written outside its root.
 */

const RELAY = join(PROJECT_ROOT, "docker", "helpers", "stream-relay.cjs");
// The test's own ids: a relay not run as root can give files no other owner.
const owner = { uid: process.getuid!(), gid: process.getgid!() };

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "sr-relay-staged-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The relay as a process: its stdin, the frames it sent, its exit and its stderr. */
function relay() {
  const child = spawn(process.execPath, [RELAY], { stdio: ["pipe", "pipe", "pipe"] });
  let err = "";
  child.stderr.on("data", (d: Buffer) => (err += d.toString("utf8")));
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  return { child, exited, stderr: () => err };
}

/** A tree of every kind the staged folder holds, a file larger than one frame among them. */
async function stagedFolder(): Promise<string> {
  const folder = join(dir, "staged");
  await mkdir(join(folder, ".claude", "projects", "p"), { recursive: true });
  await writeFile(join(folder, ".claude.json"), '{"hasCompletedOnboarding":true}');
  await chmod(join(folder, ".claude.json"), 0o600);
  await writeFile(join(folder, ".claude", ".credentials.json"), '{"claudeAiOauth":{}}');
  await writeFile(join(folder, ".claude", "projects", "p", "s.jsonl"), Buffer.alloc(150 * 1024, 7));
  await chmod(join(folder, ".claude", "projects", "p", "s.jsonl"), 0o640);
  await writeFile(join(folder, "prompt.txt"), "");
  await chmod(join(folder, ".claude"), 0o700);
  await chmod(join(folder, ".claude", "projects"), 0o750);
  return folder;
}

/** Every entry under `root`: type, mode, owner and bytes. */
async function listing(root: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (rel: string): Promise<void> => {
    for (const name of (await readdir(join(root, rel))).sort()) {
      const path = rel === "" ? name : `${rel}/${name}`;
      const st = await lstat(join(root, path));
      const bytes = st.isFile() ? (await readFile(join(root, path))).toString("base64").slice(0, 40) : "-";
      out.push(`${path} ${st.isDirectory() ? "d" : st.isFile() ? "f" : "?"} ${(st.mode & 0o7777).toString(8)} ${st.uid}:${st.gid} ${st.size * Number(st.isFile())} ${bytes}`);
      if (st.isDirectory()) await walk(path);
    }
  };
  await walk("");
  return out;
}

describe("the staged folder on the relay's stream", () => {
  // contract: R282
  it("the relay writes the folder sent, with its modes and owner, and reports the digest the runner computed, before it is ready", async () => {
    const folder = await stagedFolder();
    const root = join(dir, "volume");
    await mkdir(root);
    const r = relay();
    const mux = serveStream(r.child.stdout, r.child.stdin, new Map());
    const sent = await sendStaged(r.child.stdin, await readStagedTree(folder, root, owner));
    r.child.stdin.write(encodeFrame(0, FRAME.listen));
    await mux.ready;
    expect(mux.staged()).toBe(sent);
    expect(await listing(root)).toEqual(await listing(folder));
    r.child.stdin.end();
    expect(await r.exited).toBe(0);
  });

  /** Frames of one hostile `put`, then `listen`, to a fresh relay: its exit, its stderr and what it left in the folder. */
  async function hostile(header: Record<string, unknown>, extra: Buffer[] = []): Promise<{ code: number | null; stderr: string; left: string[] }> {
    const root = join(dir, "volume");
    await mkdir(root, { recursive: true });
    const r = relay();
    const put = (h: Record<string, unknown>) => encodeFrame(0, FRAME.put, Buffer.from(JSON.stringify(h)));
    const base = { root, type: "file", mode: 0o600, uid: owner.uid, gid: owner.gid, size: 1 };
    r.child.stdin.on("error", () => undefined);
    r.child.stdin.write(Buffer.concat([put({ ...base, ...header }), ...extra, encodeFrame(0, FRAME.listen)]));
    const code = await r.exited;
    const left = (await readdir(dir)).sort();
    return { code, stderr: r.stderr(), left };
  }

  // contract: R283
  it.each([
    ["a name that leaves the root", { path: "../escaped" }, /staged path "\.\.\/escaped" is not a plain relative name/],
    ["an absolute name", { path: "/tmp/x" }, /is not a plain relative name/],
    ["a link", { path: "link", type: "symlink" }, /is a "symlink", not a file or folder/],
    ["a set-id mode", { path: "x", mode: 0o4755 }, /has mode 2541, not permission bits alone/],
    ["a file past the bound", { path: "big", size: STAGED_LIMIT_BYTES + 1 }, /passes its bounds/],
    ["a file in a folder never sent", { path: "nowhere/x" }, /comes before its folder/],
    ["a root that is not a plain absolute path", { path: "x", root: "volume/../.." }, /is not a plain absolute path/],
  ])("ends the relay on %s, with nothing written outside its root and no ready", async (_what, header, message) => {
    const { code, stderr, left } = await hostile(header);
    expect(code).toBe(2);
    expect(stderr).toMatch(message);
    expect(left).toEqual(["volume"]);
  });

  // contract: R283
  it("ends the relay on more bytes than a file's size, and on a file whose bytes had not all come before listen", async () => {
    const more = await hostile({ path: "x", size: 1 }, [encodeFrame(0, FRAME.data, Buffer.from("ab"))]);
    expect([more.code, more.stderr]).toEqual([2, expect.stringMatching(/more staged bytes for "x" than its size/)]);
    await rm(join(dir, "volume"), { recursive: true });
    const short = await hostile({ path: "x", size: 3 }, [encodeFrame(0, FRAME.data, Buffer.from("a"))]);
    expect([short.code, short.stderr]).toEqual([2, expect.stringMatching(/the staged file "x" ended short/)]);
  });

  // contract: R283
  it("refuses, on the runner's side, a staged folder holding a link or more than the bound, before anything is sent", async () => {
    const folder = await stagedFolder();
    await expect(readStagedTree(folder, "/v", owner, { limitBytes: 100 })).rejects.toThrow(/^the folder \S+ for the engine-api relay holds more than 100 bytes: .* use --sandbox-channel host-paths/);
    await symlink("/etc/passwd", join(folder, ".claude", "evil"));
    await expect(readStagedTree(folder, "/v", owner)).rejects.toThrow(/holds "\.claude\/evil", a symbolic link/);
  });

  // contract: R282
  it("the runner's end takes one staged digest before ready, and refuses one that is no digest or comes twice", async () => {
    const digest = Buffer.from("ab".repeat(32));
    for (const [frames, fault] of [
      [[encodeFrame(0, FRAME.staged, Buffer.from("not a digest"))], /the relay's staged frame holds no sha256 digest/],
      [[encodeFrame(0, FRAME.staged, digest), encodeFrame(0, FRAME.staged, digest)], /a frame of kind 7 before it was ready/],
      [[encodeFrame(0, FRAME.ready), encodeFrame(0, FRAME.staged, digest)], /unknown kind 7/],
    ] as const) {
      const fromRelay = new PassThrough();
      const mux = serveStream(fromRelay, new PassThrough(), new Map());
      for (const f of frames) fromRelay.write(f);
      await new Promise((r) => setImmediate(r));
      expect(mux.fault()).toMatch(fault);
    }
    const fromRelay = new PassThrough();
    const mux = serveStream(fromRelay, new PassThrough(), new Map());
    fromRelay.write(Buffer.concat([encodeFrame(0, FRAME.staged, digest), encodeFrame(0, FRAME.ready)]));
    await mux.ready;
    expect([mux.staged(), mux.fault()]).toEqual([digest.toString(), undefined]);
  });
});
