/**
 * A hostile corpus (issue 10): 100,000 files, 300 levels of nesting, names holding newlines, tabs,
 * backslashes, quotes and bytes that are not UTF-8, built in seconds with `git fast-import`. The
 * shipped `export` and `--dry-run` (root check) must not crash, keep non-UTF-8 names out and count
 * them, write every other name exactly as it is, and finish in bounded time.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile, spawn } from "node:child_process";
import { lstat, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { removeTree } from "../../src/export/export.ts";
import { runCli } from "../support/cli.ts";

const execFileP = promisify(execFile);

const BULK = 100_000;
const DEPTH = 300;
/** Valid UTF-8 names that need care: control characters, a backslash, quotes, spaces, a leading dash. */
const ODD_NAMES = ["odd/nl\nname.md", "odd/tab\tname.md", "odd/back\\slash.md", 'odd/"quoted" name.md', "odd/-rf.md", "odd/ünïcødé 🙂.md", "odd/cr\rname.md"];
/** Names that are not UTF-8 (raw bytes); the second is a folder, so each file under it is one too. */
const NOT_UTF8 = [Buffer.from("bad\xff\xfe.md", "latin1"), Buffer.from("dir\xff/a.md", "latin1"), Buffer.from("dir\xff/b.md", "latin1")];
const deepPath = `${Array.from({ length: DEPTH }, (_, i) => `n${i}`).join("/")}/deep.md`;

/** A path for fast-import: C-quoted, with every byte outside printable ASCII as an octal escape. */
function quotePath(raw: Buffer): string {
  let out = '"';
  for (const b of raw) {
    if (b === 0x22 || b === 0x5c) out += `\\${String.fromCharCode(b)}`;
    else if (b >= 0x20 && b < 0x7f) out += String.fromCharCode(b);
    else out += `\\${b.toString(8).padStart(3, "0")}`;
  }
  return `${out}"`;
}

let work = "";
let repo = "";
let pin = "";
let manifest = "";

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-rel-corpus-"));
  repo = join(work, "big");
  await execFileP("git", ["init", "-q", "-b", "main", repo]);
  const parts: Buffer[] = [];
  const add = (s: string | Buffer) => parts.push(typeof s === "string" ? Buffer.from(s, "utf8") : s);
  const blob = (mark: number, text: string) => add(`blob\nmark :${mark}\ndata ${Buffer.byteLength(text)}\n${text}\n`);
  blob(1, "one of many\n");
  blob(2, "# Readme\nThe retry limit is documented in docs/limits.md.\n");
  blob(3, "odd but public\n");
  add("commit refs/heads/main\ncommitter Test <test@example.com> 1700000000 +0000\ndata 7\ncorpus\n");
  for (let i = 0; i < BULK; i++) add(`M 100644 :1 bulk/d${i % 100}/e${Math.floor(i / 100) % 50}/f${i}.txt\n`);
  add("M 100644 :2 docs/readme.md\n");
  add(`M 100644 :3 ${deepPath}\n`);
  for (const name of ODD_NAMES) add(`M 100644 :3 ${quotePath(Buffer.from(name, "utf8"))}\n`);
  for (const raw of NOT_UTF8) add(`M 100644 :3 ${quotePath(raw)}\n`);
  add("\n");
  await new Promise<void>((resolve, reject) => {
    const child = spawn("git", ["fast-import", "--quiet"], { cwd: repo, stdio: ["pipe", "ignore", "inherit"] });
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve() : reject(new Error(`git fast-import exited ${code}`))));
    child.stdin.end(Buffer.concat(parts));
  });
  await execFileP("git", ["-c", "advice.detachedHead=false", "checkout", "-q", "main"], { cwd: repo });
  pin = (await execFileP("git", ["rev-parse", "HEAD"], { cwd: repo })).stdout.trim();
  manifest = join(work, "manifest.json");
  await writeFile(
    manifest,
    JSON.stringify({
      version: 1,
      repetitions: 1,
      scenarios: ["repository-only", "doc-bridge"],
      repositories: { big: pin },
      tasks: [
        {
          id: "big-limits",
          repository: "big",
          category: "behaviour",
          question: "Where is the retry limit documented?",
          sources: ["docs/readme.md", ODD_NAMES[1], deepPath],
          expected: ["docs/limits.md"],
        },
      ],
    }),
  );
}, 180_000);
afterAll(() => rm(work, { recursive: true, force: true }));

/** Every file below `dir`, as paths relative to it (readdir recursion, no symlinks followed). */
async function walk(dir: string, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...(await walk(join(dir, e.name), rel)));
    else out.push(rel);
  }
  return out;
}

describe("a corpus of 100,000 files with hostile names", () => {
  it("export: every public file written under its exact name, non-UTF-8 names excluded and counted, in under 60 s", async () => {
    const out = join(work, "export");
    const t0 = Date.now();
    const r = await runCli(["export", "--manifest", manifest, "--root", `big=${repo}`, "--repository", "big", "--out", out, "--max-export-files", "200000"], { timeoutMs: 120_000 });
    const ms = Date.now() - t0;
    try {
      expect(r.code, r.stderr).toBe(0);
      expect(ms).toBeLessThan(60_000);
      const summary = JSON.parse(r.stdout) as { files: number; excluded: Record<string, number>; exportHash: string };
      const publicCount = BULK + 2 + ODD_NAMES.length;
      expect(summary.files).toBe(publicCount);
      expect(summary.excluded["not-utf8-path"]).toBe(NOT_UTF8.length);
      expect(summary.exportHash).toMatch(/^[0-9a-f]{64}$/);

      const files = await walk(out);
      expect(files).toHaveLength(publicCount);
      for (const name of [...ODD_NAMES, deepPath, "docs/readme.md", "bulk/d7/e3/f307.txt"]) expect(files, JSON.stringify(name)).toContain(name);
      // Nothing was written under a lossy decoding of a non-UTF-8 name.
      expect(files.filter((f) => f.includes("\ufffd") || f.startsWith("bad") || f.startsWith("dir"))).toEqual([]);
      expect((await lstat(join(out, ODD_NAMES[0]!))).mode & 0o777).toBe(0o444);
      expect((await lstat(join(out, "n0", "n1"))).mode & 0o777).toBe(0o555);
    } finally {
      await removeTree(out);
    }
  }, 180_000);

  it("dry-run with the checkout: the root check passes (clean, at the pin, sources public) in under 60 s", async () => {
    const t0 = Date.now();
    const r = await runCli(["--dry-run", "--pilot", "--manifest", manifest, "--root", `big=${repo}`, "--max-export-files", "200000"], { timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(0);
    expect(Date.now() - t0).toBeLessThan(60_000);
    const summary = JSON.parse(r.stdout);
    expect(summary).toMatchObject({ dryRun: true, attempts: 2, networkCalls: 0, claudeProcesses: 0 });
    expect(summary.repositories).toEqual([expect.objectContaining({ name: "big", pin, checked: true, sourcesChecked: 3 })]);
  }, 180_000);

  it("a source naming the lossy decoding of a non-UTF-8 file is refused, not matched", async () => {
    const lossy = join(work, "manifest-lossy.json");
    await writeFile(
      lossy,
      JSON.stringify({
        version: 1,
        repetitions: 1,
        scenarios: ["repository-only", "doc-bridge"],
        repositories: { big: pin },
        tasks: [{ id: "big-lossy", repository: "big", category: "behaviour", question: "q?", sources: [NOT_UTF8[0]!.toString("utf8")], expected: ["x"] }],
      }),
    );
    const r = await runCli(["--dry-run", "--pilot", "--manifest", lossy, "--root", `big=${repo}`, "--max-export-files", "200000"], { timeoutMs: 120_000 });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/tasks\[0\]\.sources\[0\] .* is not a public file at the pin \(not-utf8-path\)/);
  }, 180_000);
});
