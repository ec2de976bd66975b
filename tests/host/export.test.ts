import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { readBlobs } from "../../src/corpus/git.ts";
import { exportAtPin, reapOrphanExports, removeExport, removeTree, writeExport } from "../../src/export/export.ts";
import { exportCommand } from "../../src/cli/export.ts";
import { UsageError } from "../../src/util/errors.ts";
import { makeGitRepo, type FixtureEntry, type GitFixture } from "../support/git-fixture.ts";

const LABELS = { run: "run-1", attempt: "t1.repository-only.1" };
const ANSWER_TEXT = "THE-ANSWER-IS-42";

/** A byte pattern with NUL, CR/LF and every byte value, so no text conversion can pass unnoticed. */
function binary(size: number, seed: number): Buffer {
  const b = Buffer.alloc(size);
  for (let i = 0; i < size; i++) b[i] = (i * 31 + seed) & 0xff;
  return b;
}

const PUBLIC: FixtureEntry[] = [
  { path: "README.md", content: "# corpus\n" },
  { path: "CLAUDE.md", content: "project notes for claude\n" },
  { path: "AGENTS.md", content: "project notes for agents\n" },
  { path: "src/index.ts", content: "export const x = 1;\n" },
  { path: "src/nested/deep/leaf.ts", content: "export const leaf = true;\n" },
  { path: "bin/run.sh", content: "#!/bin/sh\necho run\n", executable: true },
  { path: "docs/guía rápida.md", content: "¿Qué tal?\n" },
  { path: "notes with spaces/a b.txt", content: "spaced\n" },
  { path: "日本語/ファイル.md", content: "こんにちは\n" },
  { path: "assets/logo.bin", content: binary(4096, 7) },
  { path: "big/exact.bin", content: binary(200_000, 1) },
  { path: "empty.txt", content: "" },
];

const EXCLUDED: FixtureEntry[] = [
  { path: "link-to-readme", symlink: "README.md" },
  { path: "src/dirlink", symlink: "nested" },
  { path: "escape-link", symlink: "/etc/passwd" },
  { path: "vendor/lib", gitlink: "1111111111111111111111111111111111111111" },
  { path: "big/over.bin", content: binary(200_001, 2) },
  { path: ".env", content: "SECRET=1\n" },
  { path: ".github/workflows/ci.yml", content: "on: push\n" },
  { path: "src/.hidden/x.md", content: "hidden\n" },
  { path: "node_modules/x/index.js", content: "module.exports = 1;\n" },
  { path: "dist/bundle.js", content: "bundle\n" },
  { path: "build/out.txt", content: "out\n" },
  { path: "coverage/lcov.info", content: "lcov\n" },
  { path: "package-lock.json", content: "{}\n" },
  { path: "yarn.lock", content: "# yarn\n" },
  { path: "Cargo.lock", content: "# cargo\n" },
  { path: "go.sum", content: "sum\n" },
  { path: "web/pnpm-lock.yaml", content: "lock\n" },
  { path: "answers/q1.md", content: `${ANSWER_TEXT}\n` },
  { path: "answers/sub/q2.md", content: `${ANSWER_TEXT} again\n` },
  { path: "key.md", content: `${ANSWER_TEXT} key\n` },
  { path: "study/manifest.json", content: "{}\n" },
  { rawPath: Buffer.from([0x6c, 0x61, 0x74, 0x69, 0x6e, 0xe9, 0x2e, 0x74, 0x78, 0x74]), content: "latin-1 name\n" },
];

const EXPECTED_PATHS = PUBLIC.map((e) => (e as { path: string }).path).sort();
const FILTER = { answerKeys: ["answers", "key.md"], manifestPaths: ["study/manifest.json"] };

interface Walked {
  files: Map<string, number>;
  dirs: Map<string, number>;
  other: string[];
}

/** Every entry under `root` with its permission bits; symlinks and specials land in `other`. */
async function walk(root: string): Promise<Walked> {
  const out: Walked = { files: new Map(), dirs: new Map(), other: [] };
  const visit = async (dir: string): Promise<void> => {
    out.dirs.set(relative(root, dir), (await lstat(dir)).mode & 0o7777);
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const full = join(dir, entry.name);
      const st = await lstat(full);
      if (st.isDirectory()) await visit(full);
      else if (st.isFile()) out.files.set(relative(root, full), st.mode & 0o7777);
      else out.other.push(relative(root, full));
    }
  };
  await visit(root);
  return out;
}

describe("exportAtPin", () => {
  let repo: GitFixture;
  let pin: string;
  let parent: string;

  beforeAll(async () => {
    repo = await makeGitRepo([...PUBLIC, ...EXCLUDED]);
    pin = repo.commit;
    parent = await mkdtemp(join(tmpdir(), "export-test-parent-"));
  });
  afterAll(async () => {
    await repo?.remove();
    if (parent) await removeTree(parent);
  });

  it("writes exactly the public files, byte for byte as at the pin, 0444 in 0555 folders, without .git", async () => {
    const result = await exportAtPin({ repoDir: repo.dir, pin, ...FILTER, parentDir: parent, labels: LABELS });
    try {
      expect(result.dir.startsWith(join(parent, `study-runner-export-${process.pid}-`))).toBe(true);
      const tree = await walk(result.dir);
      expect([...tree.files.keys()].sort()).toEqual(EXPECTED_PATHS);
      expect(tree.other).toEqual([]);
      expect(existsSync(join(result.dir, ".git"))).toBe(false);
      for (const [path, mode] of tree.files) expect(mode.toString(8), path).toBe("444");
      for (const [path, mode] of tree.dirs) expect(mode.toString(8), path || "(root)").toBe("555");
      expect([...tree.dirs.keys()].sort()).toEqual(["", "assets", "big", "bin", "docs", "notes with spaces", "src", "src/nested", "src/nested/deep", "日本語"].sort());
      for (const path of EXPECTED_PATHS) {
        const atPin = await repo.git(["show", `${pin}:${path}`]);
        expect((await readFile(join(result.dir, path))).equals(atPin), path).toBe(true);
      }

      expect(result.files.map((f) => f.path)).toEqual([...EXPECTED_PATHS].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))));
      for (const f of result.files) {
        expect(f.oid, f.path).toBe((await repo.git(["rev-parse", `${pin}:${f.path}`])).toString().trim());
        expect(f.size, f.path).toBe((await readFile(join(result.dir, f.path))).length);
      }
      expect(result.files.find((f) => f.path === "bin/run.sh")?.mode).toBe("100755");
      expect(result.files.find((f) => f.path === "README.md")?.mode).toBe("100644");
      expect(result.excluded).toEqual({
        "not-a-regular-file": 4,
        "not-utf8-path": 1,
        hidden: 3,
        "build-or-dependency-dir": 4,
        lockfile: 5,
        "answer-key": 3,
        manifest: 1,
        "instruction-file": 0,
        "too-large": 1,
      });
      expect(result.labels).toEqual(LABELS);
    } finally {
      await removeExport(result.dir);
    }
  });

  // contract: R118
  it("computes exportHash as sha256 over the byte-sorted path, mode and bytes of every file written, the same on every export", async () => {
    const a = await exportAtPin({ repoDir: repo.dir, pin, ...FILTER, parentDir: parent, labels: LABELS });
    const b = await exportAtPin({ repoDir: repo.dir, pin, ...FILTER, parentDir: parent, labels: { run: "r2", attempt: "a2" } });
    try {
      expect(a.dir).not.toBe(b.dir);
      expect(a.exportHash).toBe(b.exportHash);
      // Recomputed from the folder itself: each file's path, its mode on disk and its bytes.
      const paths = EXPECTED_PATHS.map((p) => Buffer.from(p, "utf8")).sort(Buffer.compare);
      const hash = createHash("sha256");
      for (const p of paths) {
        const file = join(a.dir, p.toString("utf8"));
        const bytes = await readFile(file);
        hash
          .update(p)
          .update(`\0${((await stat(file)).mode & 0o777).toString(8)}\0${bytes.length}\0`)
          .update(bytes);
      }
      expect(a.exportHash).toBe(hash.digest("hex"));
    } finally {
      await removeExport(a.dir);
      await removeExport(b.dir);
    }
  });

  it("changes exportHash when an exported blob changes, and only then", async () => {
    const other = await makeGitRepo([...PUBLIC, ...EXCLUDED]);
    try {
      const base = await exportAtPin({ repoDir: other.dir, pin: other.commit, ...FILTER, parentDir: parent, labels: LABELS });
      const hiddenOnly = await other.commitEntries([
        { path: ".env", content: "SECRET=2\n" },
        { path: "answers/q1.md", content: "new\n" },
      ]);
      const same = await exportAtPin({ repoDir: other.dir, pin: hiddenOnly, ...FILTER, parentDir: parent, labels: LABELS });
      const changed = await other.commitEntries([{ path: "src/index.ts", content: "export const x = 2;\n" }]);
      const diff = await exportAtPin({ repoDir: other.dir, pin: changed, ...FILTER, parentDir: parent, labels: LABELS });
      try {
        expect(base.exportHash).toBe(same.exportHash);
        expect(diff.exportHash).not.toBe(base.exportHash);
      } finally {
        for (const r of [base, same, diff]) await removeExport(r.dir);
      }
    } finally {
      await other.remove();
    }
  });

  it("exports a file as it was at the pin, whatever the work tree or later commits hold", async () => {
    const other = await makeGitRepo(PUBLIC);
    try {
      const oldPin = other.commit;
      await other.commitEntries([{ path: "src/index.ts", content: "export const x = 'later';\n" }]);
      await writeFile(join(other.dir, "README.md"), "edited in the work tree\n");
      await writeFile(join(other.dir, "untracked.md"), "not committed\n");
      const r = await exportAtPin({ repoDir: other.dir, pin: oldPin, parentDir: parent, labels: LABELS });
      try {
        expect(await readFile(join(r.dir, "README.md"), "utf8")).toBe("# corpus\n");
        expect(await readFile(join(r.dir, "src/index.ts"), "utf8")).toBe("export const x = 1;\n");
        expect(existsSync(join(r.dir, "untracked.md"))).toBe(false);
      } finally {
        await removeExport(r.dir);
      }
    } finally {
      await other.remove();
    }
  });

  it("sets 0444/0555 even under a umask that would strip group and other bits", async () => {
    const old = process.umask(0o077);
    let dir: string | undefined;
    try {
      dir = (await exportAtPin({ repoDir: repo.dir, pin, ...FILTER, parentDir: parent, labels: LABELS })).dir;
    } finally {
      process.umask(old);
    }
    try {
      const tree = await walk(dir);
      expect(new Set([...tree.files.values()].map((m) => m.toString(8)))).toEqual(new Set(["444"]));
      expect(new Set([...tree.dirs.values()].map((m) => m.toString(8)))).toEqual(new Set(["555"]));
    } finally {
      await removeExport(dir);
    }
  });

  it("reads each blob once, through at most three `git cat-file --batch` processes (symlinks, answer keys, then the rest), never one per file", async () => {
    const realGit = execFileSync("sh", ["-c", "command -v git"]).toString().trim();
    const shimDir = await mkdtemp(join(tmpdir(), "git-shim-"));
    const log = join(shimDir, "calls.log");
    const asked = join(shimDir, "asked.log");
    // The shim logs every command line, and every object id asked of `cat-file --batch`.
    await writeFile(
      join(shimDir, "git"),
      `#!/bin/sh\nprintf '%s\\n' "$*" >> '${log}'\nif [ "$*" = "cat-file --batch" ]; then tee -a '${asked}' | '${realGit}' "$@"; exit $?; fi\nexec '${realGit}' "$@"\n`,
      { mode: 0o755 },
    );
    const oldPath = process.env.PATH;
    process.env.PATH = `${shimDir}:${oldPath}`;
    let dir: string | undefined;
    let files: { path: string; oid: string }[] = [];
    try {
      const r = await exportAtPin({ repoDir: repo.dir, pin, ...FILTER, parentDir: parent, labels: LABELS });
      dir = r.dir;
      files = r.files;
      expect(r.files.length).toBe(EXPECTED_PATHS.length);
    } finally {
      process.env.PATH = oldPath;
      if (dir) await removeExport(dir);
    }
    const calls = (await readFile(log, "utf8")).trim().split("\n");
    const oids = (await readFile(asked, "utf8")).trim().split("\n");
    await rm(shimDir, { recursive: true, force: true });
    expect(calls.filter((c) => c === "cat-file --batch").length).toBeLessThanOrEqual(3);
    // Every kept blob was read, and no blob twice (the answer-key comparison reads the bytes that are written).
    for (const f of files) expect(oids).toContain(f.oid);
    const times = new Map<string, number>();
    for (const oid of oids) times.set(oid, (times.get(oid) ?? 0) + 1);
    expect([...times].filter(([, n]) => n > 1)).toEqual([]);
    // One process per file would show as at least as many calls as files.
    expect(calls.length).toBeLessThan(EXPECTED_PATHS.length);
    expect(calls.some((c) => /\b(show|cat-file -p|archive|checkout)\b/.test(c))).toBe(false);
  });

  it("leaves no folder behind for a copy of an answer key that was the folder's only file", async () => {
    const r = await makeGitRepo([
      { path: "README.md", content: "# corpus\n" },
      { path: "answers/q1.md", content: `${ANSWER_TEXT}\n` },
      { path: "copies/deep/solution.md", content: `${ANSWER_TEXT}\r\n` },
      { path: "copies/kept.md", content: "kept\n" },
      { path: "only-copy/q1.txt", content: `${ANSWER_TEXT}\n` },
    ]);
    const out = await exportAtPin({ repoDir: r.dir, pin: r.commit, answerKeys: ["answers"], parentDir: parent, labels: LABELS });
    try {
      expect(out.files.map((f) => f.path)).toEqual(["README.md", "copies/kept.md"]);
      const tree = await walk(out.dir);
      expect([...tree.dirs.keys()].sort()).toEqual(["", "copies"]);
      expect([...tree.files.keys()].sort()).toEqual(["README.md", "copies/kept.md"]);
      expect(out.answerKeys[0]!.byContent.sort()).toEqual(["copies/deep/solution.md", "only-copy/q1.txt"]);
    } finally {
      await removeExport(out.dir);
      await r.remove();
    }
  });

  it("refuses a pin that is not in the repository and leaves no folder behind", async () => {
    const before = await readdir(parent);
    await expect(exportAtPin({ repoDir: repo.dir, pin: "f".repeat(40), parentDir: parent, labels: LABELS })).rejects.toBeInstanceOf(UsageError);
    await expect(exportAtPin({ repoDir: repo.dir, pin: "HEAD", parentDir: parent, labels: LABELS })).rejects.toBeInstanceOf(UsageError);
    expect(await readdir(parent)).toEqual(before);
  });

  it("keeps hostile tree paths ('..' components) out and never writes outside the export", async () => {
    const hi = (await repo.git(["hash-object", "-w", "--stdin"], "escaped\n")).toString().trim();
    const inner = (await repo.git(["mktree"], `100644 blob ${hi}\tpwned.txt\n`)).toString().trim();
    const top = (await repo.git(["mktree"], `040000 tree ${inner}\t..\n100644 blob ${hi}\tok.txt\n`)).toString().trim();
    const commit = (await repo.git(["commit-tree", top, "-m", "hostile"])).toString().trim();
    const sandbox = await mkdtemp(join(parent, "sandbox-"));
    const r = await exportAtPin({ repoDir: repo.dir, pin: commit, parentDir: sandbox, labels: LABELS });
    try {
      expect([...(await walk(r.dir)).files.keys()]).toEqual(["ok.txt"]);
      expect(r.excluded.hidden).toBe(1);
      expect((await readdir(sandbox)).filter((n) => !n.startsWith("study-runner-export-"))).toEqual([]);
      expect(existsSync(join(sandbox, "pwned.txt"))).toBe(false);
    } finally {
      await removeExport(r.dir);
    }
    // The writer checks paths itself too, in case a caller bypasses the filter.
    const target = await mkdtemp(join(sandbox, "study-runner-export-0-"));
    for (const path of ["../pwned.txt", join(sandbox, "pwned.txt"), "a/../../pwned.txt"]) {
      await expect(writeExport(target, repo.dir, [{ path, oid: hi, size: 8, mode: "100644" }])).rejects.toThrow(/refusing|leaves/);
    }
    expect(await readdir(target)).toEqual([]);
    expect(existsSync(join(sandbox, "pwned.txt"))).toBe(false);
    await rm(sandbox, { recursive: true, force: true });
  });

  it("fails closed on a crafted tree whose file and folder share a name, and removes the partial export", async () => {
    const hi = (await repo.git(["hash-object", "-w", "--stdin"], "x\n")).toString().trim();
    const inner = (await repo.git(["mktree"], `100644 blob ${hi}\tb.txt\n`)).toString().trim();
    const top = (await repo.git(["mktree"], `100644 blob ${hi}\ta\n040000 tree ${inner}\ta\n`)).toString().trim();
    const commit = (await repo.git(["commit-tree", top, "-m", "clash"])).toString().trim();
    const sandbox = await mkdtemp(join(parent, "sandbox-"));
    await expect(exportAtPin({ repoDir: repo.dir, pin: commit, parentDir: sandbox, labels: LABELS })).rejects.toThrow();
    expect(await readdir(sandbox)).toEqual([]);
    await rm(sandbox, { recursive: true, force: true });
  });
});

describe("removeExport", () => {
  it("removes a read-only export completely and is quiet when it is already gone", async () => {
    const repo = await makeGitRepo(PUBLIC);
    try {
      const r = await exportAtPin({ repoDir: repo.dir, pin: repo.commit, labels: LABELS });
      expect(existsSync(join(r.dir, "src/nested/deep/leaf.ts"))).toBe(true);
      await removeExport(r.dir);
      expect(existsSync(r.dir)).toBe(false);
      await expect(removeExport(r.dir)).resolves.toBeUndefined();
    } finally {
      await repo.remove();
    }
  });

  it("refuses a folder that is not an export, leaving it intact", async () => {
    const repo = await makeGitRepo(PUBLIC);
    try {
      await expect(removeExport(repo.dir)).rejects.toThrow(/not an export folder/);
      expect(existsSync(join(repo.dir, ".git"))).toBe(true);
    } finally {
      await repo.remove();
    }
  });
});

describe("reapOrphanExports", () => {
  it("removes a folder whose runner pid is dead and keeps one whose pid is alive", async () => {
    const parent = await mkdtemp(join(tmpdir(), "reap-test-"));
    try {
      const child = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
      const deadPid = child.pid!;
      await new Promise((r) => child.on("close", r));

      const dead = join(parent, `study-runner-export-${deadPid}-AbC123`);
      const live = join(parent, `study-runner-export-${process.pid}-XyZ789`);
      const unrelated = join(parent, "something-else");
      for (const d of [dead, live, unrelated]) {
        await mkdir(join(d, "sub"), { recursive: true });
        await writeFile(join(d, "sub", "f.txt"), "x", { mode: 0o444 });
        await chmod(join(d, "sub"), 0o555);
        await chmod(d, 0o555);
      }

      expect(await reapOrphanExports(parent)).toEqual([dead]);
      expect(existsSync(dead)).toBe(false);
      expect(existsSync(join(live, "sub", "f.txt"))).toBe(true);
      expect(existsSync(join(unrelated, "sub", "f.txt"))).toBe(true);
      expect(await reapOrphanExports(join(parent, "missing"))).toEqual([]);
    } finally {
      await removeTree(parent);
    }
  });
});

describe("readBlobs", () => {
  it("returns a multi-megabyte blob byte for byte and fails on an unknown object", async () => {
    const big = binary(3 * 1024 * 1024 + 17, 5);
    const repo = await makeGitRepo([
      { path: "huge.bin", content: big },
      { path: "small.txt", content: "s\n" },
    ]);
    try {
      const oid = (await repo.git(["rev-parse", `${repo.commit}:huge.bin`])).toString().trim();
      const small = (await repo.git(["rev-parse", `${repo.commit}:small.txt`])).toString().trim();
      const got: Buffer[] = [];
      await readBlobs(repo.dir, [oid, small, oid], (i, data) => void (got[i] = data));
      expect(got.map((b) => b.length)).toEqual([big.length, 2, big.length]);
      expect(got[0]!.equals(big) && got[2]!.equals(big) && got[1]!.toString() === "s\n").toBe(true);
      await expect(readBlobs(repo.dir, [small, "e".repeat(40)], () => {})).rejects.toThrow(/not readable/);
    } finally {
      await repo.remove();
    }
  });
});

describe("exportCommand", () => {
  let repo: GitFixture;
  let work: string;
  const manifestFor = (pin: string) => ({
    version: 1,
    repetitions: 1,
    scenarios: ["repository-only", "doc-bridge"],
    repositories: { corpus: pin },
    tasks: [{ id: "t1", repository: "corpus", category: "lookup", question: "What is x?", sources: ["src/index.ts"], expected: ["x is 1"] }],
    answerKeys: { corpus: ["answers", "key.md"] },
  });

  beforeAll(async () => {
    repo = await makeGitRepo([...PUBLIC, ...EXCLUDED]);
    // The manifest cannot hold the commit that holds it, so the pinned tree has an older
    // draft at the same path; the command must still keep that path out.
    await writeFile(join(repo.dir, "study/manifest.json"), JSON.stringify(manifestFor(repo.commit)));
    work = await mkdtemp(join(tmpdir(), "export-cmd-"));
  });
  afterAll(async () => {
    await repo?.remove();
    if (work) await removeTree(work);
  });

  it("writes into --out exactly what an attempt sees and returns counts and the hash, never contents", async () => {
    const out = join(work, "view");
    const summary = await exportCommand({ manifest: join(repo.dir, "study/manifest.json"), roots: { corpus: repo.dir }, repository: "corpus", out });
    const attempt = await exportAtPin({ repoDir: repo.dir, pin: repo.commit, ...FILTER, labels: LABELS });
    try {
      expect(summary.exportHash).toBe(attempt.exportHash);
      expect(summary).toMatchObject({ repository: "corpus", pin: repo.commit, out, files: EXPECTED_PATHS.length });
      expect(summary.excluded).toEqual(attempt.excluded);
      expect(summary.excluded.manifest).toBe(1);
      expect(summary.excluded["answer-key"]).toBe(3);
      expect(summary.bytes).toBe(attempt.files.reduce((n, f) => n + f.size, 0));
      const tree = await walk(out);
      expect([...tree.files.keys()].sort()).toEqual(EXPECTED_PATHS);
      expect(tree.dirs.get("")?.toString(8)).toBe("555");
      expect(JSON.stringify(summary)).not.toContain(ANSWER_TEXT);
    } finally {
      await removeExport(attempt.dir);
    }
  });

  it("rejects an unknown repository, a missing --root, a non-git root and an existing --out", async () => {
    const manifest = join(repo.dir, "study/manifest.json");
    const roots = { corpus: repo.dir };
    await expect(exportCommand({ manifest, roots, repository: "nope", out: join(work, "a") })).rejects.toThrow(/not pinned/);
    await expect(exportCommand({ manifest, roots: {}, repository: "corpus", out: join(work, "b") })).rejects.toThrow(/--root corpus=PATH/);
    const notGit = await mkdtemp(join(tmpdir(), "not-git-"));
    await expect(exportCommand({ manifest, roots: { corpus: notGit }, repository: "corpus", out: join(work, "c") })).rejects.toBeInstanceOf(UsageError);
    await rm(notGit, { recursive: true });
    await mkdir(join(work, "exists"));
    await expect(exportCommand({ manifest, roots, repository: "corpus", out: join(work, "exists") })).rejects.toThrow(/already exists/);
    await expect(exportCommand({ manifest, roots, repository: "corpus", out: join(work, "no/such/parent") })).rejects.toThrow(/parent/);
    // A refused command leaves no folder behind.
    for (const name of ["a", "b", "c"]) expect(existsSync(join(work, name)), name).toBe(false);
  });
});
