import { createHash } from "node:crypto";
import { mkdtemp, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tar from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { contextDigest, packContext, renderDockerfile, type ImageSpec } from "../../src/image/context.ts";
import { collectLibraries, parseLdd } from "../../src/image/libraries.ts";
import { claudeCodeImageSpec, IMAGE_LABELS } from "../../src/image/specs.ts";
import { fakeClaudeImageSpec, FAKE_CLAUDE_SCRIPT } from "../../src/stand-ins/fake-claude/image.ts";

interface TarEntry {
  name: string;
  type: string;
  mode: number;
  uid: number;
  gid: number;
  uname: string;
  gname: string;
  mtime: number;
  body: Buffer;
}

async function entries(context: Buffer): Promise<TarEntry[]> {
  const out: TarEntry[] = [];
  const extract = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    extract.on("entry", (h, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on("data", (c: unknown) => chunks.push(c as Buffer));
      stream.on("end", () => {
        out.push({
          name: h.name,
          type: h.type ?? "file",
          mode: h.mode ?? 0,
          uid: h.uid ?? -1,
          gid: h.gid ?? -1,
          uname: h.uname ?? "",
          gname: h.gname ?? "",
          mtime: h.mtime?.getTime() ?? -1,
          body: Buffer.concat(chunks),
        });
        next();
      });
    });
    extract.on("finish", resolve);
    extract.on("error", reject);
  });
  extract.end(context);
  await done;
  return out;
}

let dir = "";
let hostFile = "";
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "image-context-"));
  hostFile = join(dir, "tool");
  await writeFile(hostFile, "#!/bin/sh\necho tool\n");
});
afterAll(() => rm(dir, { recursive: true, force: true }));

const spec = (over: Partial<ImageSpec> = {}): ImageSpec => ({
  tag: "t/x:1",
  files: [
    { path: "/usr/local/bin/tool", mode: 0o755, source: { hostPath: hostFile } },
    { path: "/etc/passwd", mode: 0o644, source: { content: "agent:x:1000:1000::/home/agent:/nonexistent\n" } },
  ],
  dirs: [
    { path: "/tmp", mode: 0o1777 },
    { path: "/home/agent", mode: 0o755, userOwned: true },
  ],
  user: "1000:1000",
  env: { B: "2", A: "1" },
  entrypoint: ["/usr/local/bin/tool"],
  workdir: "/workspace",
  labels: { "z.label": "last", "a.label": "first" },
  ...over,
});

describe("deterministic build contexts", () => {
  it("renders a scratch Dockerfile with sorted ENV and LABEL, the agent's dir chowned, USER and ENTRYPOINT", () => {
    expect(renderDockerfile(spec())).toBe(
      [
        "FROM scratch",
        "COPY rootfs/ /",
        "COPY --chown=1000:1000 owned/home/agent/ /home/agent/",
        'ENV A="1" B="2"',
        'LABEL "a.label"="first" "z.label"="last"',
        "WORKDIR /workspace",
        "USER 1000:1000",
        'ENTRYPOINT ["/usr/local/bin/tool"]',
        "",
      ].join("\n"),
    );
  });

  it("packs sorted entries with fixed owner and mtime 0, parents included, modes kept", async () => {
    const list = await entries(await packContext(spec()));
    expect(list.map((e) => e.name)).toEqual([
      "Dockerfile",
      "owned/",
      "owned/home/",
      "owned/home/agent/",
      "rootfs/",
      "rootfs/etc/",
      "rootfs/etc/passwd",
      "rootfs/home/",
      "rootfs/tmp/",
      "rootfs/usr/",
      "rootfs/usr/local/",
      "rootfs/usr/local/bin/",
      "rootfs/usr/local/bin/tool",
    ]);
    for (const e of list) expect([e.uid, e.gid, e.uname, e.gname, e.mtime]).toEqual([0, 0, "root", "root", 0]);
    const byName = new Map(list.map((e) => [e.name, e]));
    expect(byName.get("rootfs/tmp/")?.mode).toBe(0o1777);
    expect(byName.get("rootfs/usr/local/bin/tool")?.mode).toBe(0o755);
    expect(byName.get("rootfs/usr/local/bin/tool")?.body.toString()).toBe("#!/bin/sh\necho tool\n");
    expect(byName.get("Dockerfile")?.body.toString()).toBe(renderDockerfile(spec()));
  });

  it("gives the same digest for the same inputs in any order, and a new one for any changed input", async () => {
    const a = await contextDigest(spec());
    expect(a).toMatch(/^sha256:[0-9a-f]{64}$/);
    const shuffled = spec();
    shuffled.files.reverse();
    shuffled.dirs.reverse();
    expect(await contextDigest(shuffled)).toBe(a);
    expect(await contextDigest(await packContext(spec()))).toBe(a);
    expect(a).toBe(
      `sha256:${createHash("sha256")
        .update(await packContext(spec()))
        .digest("hex")}`,
    );

    expect(await contextDigest(spec({ labels: { "a.label": "other" } }))).not.toBe(a);
    expect(await contextDigest(spec({ env: { A: "1", B: "3" } }))).not.toBe(a);
    const mode = spec();
    mode.files[0]!.mode = 0o700;
    expect(await contextDigest(mode)).not.toBe(a);
    await writeFile(hostFile, "#!/bin/sh\necho tool changed\n");
    try {
      expect(await contextDigest(spec())).not.toBe(a);
    } finally {
      await writeFile(hostFile, "#!/bin/sh\necho tool\n");
    }
    expect(await contextDigest(spec())).toBe(a);
  });

  it("rejects duplicate paths, relative paths, a non-empty user-owned dir and multi-line values", async () => {
    const dup = spec();
    dup.files.push({ path: "/etc/passwd", mode: 0o644, source: { content: "x" } });
    await expect(packContext(dup)).rejects.toThrow(/twice/);
    await expect(packContext(spec({ files: [{ path: "etc/passwd", mode: 0o644, source: { content: "x" } }] }))).rejects.toThrow(/absolute/);
    await expect(packContext(spec({ files: [{ path: "/home/agent/x", mode: 0o644, source: { content: "x" } }] }))).rejects.toThrow(/must be empty/);
    expect(() => renderDockerfile(spec({ labels: { a: "two\nlines" } }))).toThrow(/one line/);
    expect(() => renderDockerfile(spec({ env: { "BAD-NAME": "x" } }))).toThrow(/variable name/);
  });
});

describe("shared libraries via ldd", () => {
  it("parses ldd output: libraries and the loader, no vDSO; a missing library fails", () => {
    const out = [
      "\tlinux-vdso.so.1 (0x00007ffd)",
      "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f1a)",
      "\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f1b)",
      "\t/lib64/ld-linux-x86-64.so.2 (0x00007f1c)",
    ].join("\n");
    expect(parseLdd(out)).toEqual(["/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libm.so.6", "/lib64/ld-linux-x86-64.so.2"]);
    expect(() => parseLdd(`${out}\n\tlibfoo.so.1 => not found`)).toThrow(/libfoo\.so\.1/);
    expect(() => parseLdd("something unexpected here")).toThrow(/unexpected ldd line/);
  });

  it("collects this Node's libraries including the dynamic loader; a non-binary has none", async () => {
    const libs = await collectLibraries(process.execPath);
    expect(libs.some((l) => /\/libc\.so\.6$/.test(l))).toBe(true);
    expect(libs.some((l) => /\/ld-linux-x86-64\.so\.2$/.test(l))).toBe(true);
    expect(libs.every((l) => l.startsWith("/"))).toBe(true);
    expect(await collectLibraries(hostFile)).toEqual([]);
    await expect(collectLibraries(join(dir, "absent"))).rejects.toThrow(/ldd/);
  });
});

describe("the two image specs", () => {
  it("assembles the real image around a given claude binary: binary, Node, libraries, users, helpers, dirs, labels", async () => {
    const claude = join(dir, "claude-dummy");
    await writeFile(claude, "dummy claude binary\n");
    const helpers = join(dir, "helpers");
    await mkdir(helpers);
    await writeFile(join(helpers, "relay.mjs"), "export {};\n");
    await writeFile(join(helpers, "notes.txt"), "not a helper\n");
    const s = await claudeCodeImageSpec({ claudeBinary: claude, helpersDir: helpers });
    expect(s.tag).toBe("study-runner/claude-code:2.1.296");
    expect(s.entrypoint).toEqual(["/usr/local/bin/claude"]);
    expect(s.user).toBe("1000:1000");
    expect(s.env).toMatchObject({ DISABLE_AUTOUPDATER: "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", HOME: "/home/agent" });
    expect(s.labels).toEqual({
      [IMAGE_LABELS.kind]: "claude-code",
      [IMAGE_LABELS.claudeVersion]: "2.1.296",
      [IMAGE_LABELS.claudeSha256]: createHash("sha256").update("dummy claude binary\n").digest("hex"),
    });
    const list = await entries(await packContext(s));
    const names = list.map((e) => e.name);
    expect(names).toEqual([...names].sort());
    const byName = new Map(list.map((e) => [e.name, e]));
    expect(byName.get("rootfs/usr/local/bin/claude")?.body.toString()).toBe("dummy claude binary\n");
    expect(byName.get("rootfs/usr/local/bin/claude")?.mode).toBe(0o755);
    expect(byName.get("rootfs/usr/local/bin/node")?.body.length).toBeGreaterThan(1_000_000);
    for (const lib of await collectLibraries(process.execPath)) expect(names).toContain(`rootfs${lib}`);
    expect(byName.get("rootfs/etc/passwd")?.body.toString()).toContain("agent:x:1000:1000:agent:/home/agent:");
    expect(byName.get("rootfs/etc/group")?.body.toString()).toContain("agent:x:1000:");
    expect(names).toContain("rootfs/opt/study-runner/relay.mjs");
    expect(names).not.toContain("rootfs/opt/study-runner/notes.txt");
    expect(byName.get("rootfs/tmp/")?.mode).toBe(0o1777);
    expect(names).toContain("rootfs/workspace/");
    expect(names).toContain("owned/home/agent/");
    expect(byName.get("Dockerfile")?.body.toString()).toContain("COPY --chown=1000:1000 owned/home/agent/ /home/agent/");
  });

  it("builds the fake image from the stand-in src/stand-ins/fake-claude/claude.cjs under the same layout", async () => {
    const s = await fakeClaudeImageSpec({ helpersDir: join(dir, "no-helpers") });
    expect(s.tag).toBe("study-runner/fake-claude:2.1.296");
    const claude = s.files.find((f) => f.path === "/usr/local/bin/claude");
    expect(claude?.source).toEqual({ hostPath: FAKE_CLAUDE_SCRIPT });
    expect(s.labels[IMAGE_LABELS.kind]).toBe("fake-claude");
    expect(s.files.some((f) => f.path === "/usr/local/bin/node")).toBe(true);
  });

  it("keeps the fake's shebang pointing at the image's Node", async () => {
    expect((await readFile(FAKE_CLAUDE_SCRIPT, "utf8")).split("\n")[0]).toBe("#!/usr/local/bin/node");
  });
});
