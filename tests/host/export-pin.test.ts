/**
 * The export is a function of the pinned commit's bytes alone: nothing of the checkout's local
 * git state (replace refs, grafts, alternates, attributes) changes it, answer keys are resolved
 * through committed symlinks and matched by normalized content, every corpus property is refused
 * before anything is reserved, leftovers never stop a later run, the manifest is parsed strictly
 * and one pin rule holds everywhere. Every repository here is a real one made by the test.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { git as runnerGit } from "../../src/corpus/git.ts";
import { exportAtPin, planExport, removeExport, removeTree } from "../../src/export/export.ts";
import { exportSourceFor } from "../../src/export/options.ts";
import { parseManifest } from "../../src/manifest/load.ts";
import { prepareEngineSandbox } from "../../src/mcp/engine-sandbox.ts";
import { repositoryKey } from "../../src/mcp/index-store.ts";
import { buildIndex } from "../../src/mcp/reference-server.ts";
import { reapOrphanFolders } from "../../src/util/orphans.ts";
import { verifyExportHashes } from "../../src/verify/export-hash.ts";
import { completedObservation, sampleLedger } from "../support/ledger-sample.ts";
import { runCli } from "../support/cli.ts";
import { makeGitRepo, type GitFixture } from "../support/git-fixture.ts";

const PUBLIC = "Public readme: nothing to see.\n";
const ANSWERS = "EXPECTED: the window closes at 17:30 on Fridays\nSECOND LINE of the key\n";
const LABELS = { run: "r", attempt: "a" };

let work: string;
const repos: GitFixture[] = [];
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-export-pin-"));
});
afterAll(async () => {
  for (const r of repos) await r.remove();
  if (work) await rm(work, { recursive: true, force: true });
});

async function repo(entries: Parameters<typeof makeGitRepo>[0]): Promise<GitFixture> {
  const r = await makeGitRepo(entries);
  repos.push(r);
  return r;
}

let seq = 0;
async function manifestFor(pin: string, answerKeys: string[], extra: Record<string, unknown> = {}): Promise<string> {
  const path = join(work, `manifest-${seq++}.json`);
  await writeFile(
    path,
    JSON.stringify({
      version: 1,
      repetitions: 1,
      scenarios: ["repository-only", "doc-bridge"],
      repositories: { corpus: pin },
      tasks: [{ id: "t1", repository: "corpus", category: "c", question: "When?", sources: ["README.md"], expected: ["17:30"] }],
      answerKeys: { corpus: answerKeys },
      ...extra,
    }),
  );
  return path;
}

/** Every file of an export folder with its bytes. */
async function readTree(dir: string, rel = ""): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const e of await readdir(join(dir, rel), { withFileTypes: true })) {
    const p = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) for (const [k, v] of await readTree(dir, p)) out.set(k, v);
    else out.set(p, await readFile(join(dir, p), "utf8"));
  }
  return out;
}

async function exportOf(dir: string, pin: string, answerKeys: string[] = []) {
  const result = await exportAtPin({ repoDir: dir, pin, answerKeys, parentDir: work, labels: LABELS });
  try {
    return { files: await readTree(result.dir), exportHash: result.exportHash };
  } finally {
    await removeExport(result.dir);
  }
}

/** A pid that was alive a moment ago and is not any more. */
function deadPid(): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn("true");
    child.on("error", reject);
    child.on("exit", () => resolve(child.pid!));
  });
}

describe("git reads see the commit, nothing else", () => {
  // contract: R117
  it("a replace ref, a graft and an alternates file in the checkout do not change the export or its hash", async () => {
    const clean = await repo([
      { path: "README.md", content: PUBLIC },
      { path: "src/a.ts", content: "export const a = 1;\n" },
    ]);
    const base = await exportOf(clean.dir, clean.commit);
    expect(base.files.get("README.md")).toBe(PUBLIC);

    // replace: README's blob swapped for one holding the answers (what `git fetch origin 'refs/replace/*:refs/replace/*'` brings).
    const replaced = await repo([
      { path: "README.md", content: PUBLIC },
      { path: "src/a.ts", content: "export const a = 1;\n" },
    ]);
    const readmeBlob = (await replaced.git(["rev-parse", `${replaced.commit}:README.md`])).toString().trim();
    const answersBlob = (await replaced.git(["hash-object", "-w", "--stdin"], ANSWERS)).toString().trim();
    await replaced.git(["replace", readmeBlob, answersBlob]);
    expect((await replaced.git(["cat-file", "blob", readmeBlob])).toString()).toBe(ANSWERS); // git itself now reads the answers
    const afterReplace = await exportOf(replaced.dir, replaced.commit);
    expect(afterReplace.files.get("README.md")).toBe(PUBLIC);
    expect(afterReplace.exportHash).toBe(base.exportHash);

    // graft: the pin made a root commit, which would change the repository's identity (its doc-bridge index key).
    const grafted = await repo([{ path: "README.md", content: PUBLIC }]);
    const root = grafted.commit;
    const pin = await grafted.commitEntries([{ path: "src/a.ts", content: "export const a = 1;\n" }]);
    await writeFile(join(grafted.dir, ".git", "info", "grafts"), `${pin}\n`);
    expect(await repositoryKey(grafted.dir, pin)).toBe(root);
    expect((await exportOf(grafted.dir, pin)).exportHash).toBe(base.exportHash);

    // alternates: a checkout that borrows the pin's objects from another store is refused, naming the file.
    const borrower = join(work, "borrower");
    await clean.git(["clone", "-q", "--shared", "--no-checkout", clean.dir, borrower]);
    const err = await exportAtPin({ repoDir: borrower, pin: clean.commit, parentDir: work, labels: LABELS }).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).name).toBe("UsageError");
    expect((err as Error).message).toMatch(/objects\/info\/alternates.*git repack -a -d/);
  });

  // contract: R117
  it("the caller's GIT_* variables and the tree's .gitattributes reach no git read and no checkout the runner makes", async () => {
    const r = await repo([
      { path: "README.md", content: PUBLIC },
      { path: "notes.txt", content: "line one\nline two\n" },
      { path: ".gitattributes", content: "*.txt eol=crlf\n" },
    ]);
    const other = await repo([{ path: "README.md", content: ANSWERS }]);
    const saved = process.env.GIT_DIR;
    process.env.GIT_DIR = join(other.dir, ".git");
    try {
      expect((await runnerGit(r.dir, ["rev-parse", "HEAD"])).toString().trim()).toBe(r.commit);
    } finally {
      if (saved === undefined) delete process.env.GIT_DIR;
      else process.env.GIT_DIR = saved;
    }
    // The doc-bridge engine's clone holds the committed bytes, not CRLF ones.
    const sandbox = await prepareEngineSandbox({ command: ["true"], checkout: r.dir, pin: r.commit, indexRoot: join(work, "no-index") });
    try {
      expect(await readFile(join(sandbox.cwd, "notes.txt"), "utf8")).toBe("line one\nline two\n");
    } finally {
      await sandbox.remove();
    }
  });

  /** Rewrites README's loose object with other bytes of the same length under the same id, then exports. */
  async function exportForged(keys: { answerKeys?: string[] }): Promise<{ blob: string; err: unknown }> {
    const r = await repo([
      { path: "README.md", content: PUBLIC },
      { path: "src/a.ts", content: "export const a = 1;\n" },
      { path: "answers.md", content: ANSWERS },
    ]);
    const blob = (await r.git(["rev-parse", `${r.commit}:README.md`])).toString().trim();
    const { deflateSync } = await import("node:zlib");
    const forged = Buffer.from(PUBLIC.replace("nothing", "ANSWERS"));
    expect(forged.length).toBe(Buffer.byteLength(PUBLIC));
    const file = join(r.dir, ".git", "objects", blob.slice(0, 2), blob.slice(2));
    await chmod(file, 0o644);
    await writeFile(file, deflateSync(Buffer.concat([Buffer.from(`blob ${forged.length}\0`), forged])));
    const err = await exportAtPin({ repoDir: r.dir, pin: r.commit, parentDir: work, labels: LABELS, ...keys }).catch((e: Error) => e);
    return { blob, err };
  }

  // contract: R118
  it("exportHash covers the bytes written: a forged object under a blob's id is refused, not exported under the clean hash", async () => {
    const { blob, err } = await exportForged({});
    expect(String(err)).toMatch(new RegExp(`bytes read for blob ${blob} do not hash to its id`));
    expect((await readdir(work)).filter((n) => n.startsWith("study-runner-export-"))).toEqual([]);
  });

  // contract: R118
  it("with answer keys too, the one read that compares a blob with the keys and writes it refuses a forged object", async () => {
    const { blob, err } = await exportForged({ answerKeys: ["answers.md"] });
    expect(String(err)).toMatch(new RegExp(`bytes read for blob ${blob} do not hash to its id`));
    expect((await readdir(work)).filter((n) => n.startsWith("study-runner-export-"))).toEqual([]);
  });
});

describe("ledger verify recomputes exportHash", () => {
  // contract: R118
  it("ledger verify recomputes each observation's exportHash from the pin and names one that differs or cannot be recomputed", async () => {
    const r = await repo([
      { path: "README.md", content: PUBLIC },
      { path: "answers.md", content: ANSWERS },
    ]);
    const manifest = await manifestFor(r.commit, ["answers.md"]);
    const bytes = await readFile(manifest);
    const written = await exportAtPin({ ...(await exportSourceFor(parseManifest(bytes, manifest), "corpus", r.dir)), parentDir: work, labels: LABELS });
    await removeExport(written.dir);
    const forged = "0".repeat(64);
    const ledger = sampleLedger({
      protocol: { manifestPath: manifest, protocolHash: createHash("sha256").update(bytes).digest("hex") },
      corpus: [{ repository: "corpus", pin: r.commit, root: r.dir }],
      observations: [
        completedObservation(0, 0.002, { repository: "corpus", pin: r.commit, exportHash: written.exportHash }),
        completedObservation(1, 0.002, { repository: "corpus", pin: r.commit, exportHash: forged }),
      ],
    });
    expect(await verifyExportHashes(ledger)).toEqual([`observations[1] (t1, repository-only, repetition 1).exportHash: ledger ${forged}, the export at the pin hashes to ${written.exportHash}`]);
    await writeFile(manifest, Buffer.concat([bytes, Buffer.from("\n")]));
    expect(await verifyExportHashes(ledger)).toEqual([expect.stringMatching(/exportHash: cannot be recomputed: the manifest .* has changed since the run/)]);
  });
});

describe("answer keys are resolved, not matched by name", () => {
  // contract: R119
  it("a symlinked key file and a symlinked key folder keep their targets out of the export and of the doc-bridge index; the dry run lists them", async () => {
    const r = await repo([
      { path: "README.md", content: PUBLIC },
      { path: "doc-bridge.config.json", content: JSON.stringify({ docs: ["**/*.md"] }) },
      { path: "docs/appendix.md", content: ANSWERS },
      { path: "answers.md", symlink: "docs/appendix.md" },
      { path: "keys-real/k.md", content: "KEY FOLDER: answer two\n" },
      { path: "keys", symlink: "keys-real" },
      { path: "docs/guide.md", content: "a guide\n" },
    ]);
    const keys = ["answers.md", "keys"];
    const exported = await exportOf(r.dir, r.commit, keys);
    expect([...exported.files.keys()].sort()).toEqual(["README.md", "doc-bridge.config.json", "docs/guide.md"]);

    const manifest = await manifestFor(r.commit, keys);
    const dry = await runCli(["--dry-run", "--pilot", "--manifest", manifest, "--root", `corpus=${r.dir}`]);
    expect(dry.code, dry.stderr).toBe(0);
    const listed = JSON.parse(dry.stdout).repositories[0].excludedAsAnswerKeys;
    expect(listed).toEqual([
      { key: "answers.md", resolvedTo: ["docs/appendix.md"], byName: ["answers.md", "docs/appendix.md"], byContent: [] },
      { key: "keys", resolvedTo: ["keys-real"], byName: ["keys", "keys-real/k.md"], byContent: [] },
    ]);

    const { index } = await buildIndex(r.dir, { indexRoot: join(work, "index-symlinks"), exclude: { answerKeys: keys } });
    expect(index.docs.map((d) => d.path).sort()).toEqual(["README.md", "docs/guide.md"]);
  });

  // contract: R119
  it("a key symlink that leaves the repository or loops is refused with exit 2 naming it", async () => {
    for (const [entries, pattern] of [
      [[{ path: "answers.md", symlink: "../outside/answers.md" }], /answer key 'answers\.md' resolves through '\.\.' above the repository's root/],
      [[{ path: "answers.md", symlink: "/etc/passwd" }], /answer key 'answers\.md': the symlink 'answers\.md' points to the absolute path '\/etc\/passwd'/],
      [
        [
          { path: "answers.md", symlink: "b.md" },
          { path: "b.md", symlink: "answers.md" },
        ],
        /answer key 'answers\.md' loops/,
      ],
      [[{ path: "keys/inner.md", symlink: "../../up.md" }], /answer key 'keys' \(its symlink 'keys\/inner\.md'\) resolves through '\.\.'/],
    ] as const) {
      const r = await repo([{ path: "README.md", content: PUBLIC }, ...entries]);
      const key = entries[0]!.path === "keys/inner.md" ? "keys" : "answers.md";
      const manifest = await manifestFor(r.commit, [key]);
      const dry = await runCli(["--dry-run", "--pilot", "--manifest", manifest, "--root", `corpus=${r.dir}`]);
      expect(dry.code, dry.stderr).toBe(2);
      expect(dry.stderr).toMatch(pattern);
      const out = join(work, `out-${seq++}`);
      const exported = await runCli(["export", "--manifest", manifest, "--root", `corpus=${r.dir}`, "--repository", "corpus", "--out", out]);
      expect(exported.code, exported.stderr).toBe(2);
      expect(exported.stderr).toMatch(pattern);
    }
  });

  // contract: R120
  it("copies differing only by CRLF, trailing whitespace, final newlines, a BOM or Unicode normal form are kept out and listed by content", async () => {
    const key = "Résumé of the EXPECTED answers\nline two: 17:30\n";
    const near = {
      "copies/crlf.md": key.replace(/\n/g, "\r\n"),
      "copies/trailing.md": key.replace(/\n/g, "  \t\n"),
      "copies/newlines.md": `${key}\n\n`,
      "copies/bom.md": `\ufeff${key}`,
      "copies/nfd.md": key.normalize("NFD"),
    };
    const r = await repo([
      { path: "README.md", content: PUBLIC },
      { path: "answers.md", content: key },
      ...Object.entries(near).map(([path, content]) => ({ path, content })),
      { path: "copies/different.md", content: key.replace("17:30", "18:00") },
    ]);
    const exported = await exportOf(r.dir, r.commit, ["answers.md"]);
    expect([...exported.files.keys()].sort()).toEqual(["README.md", "copies/different.md"]);
    const plan = await planExport({ repoDir: r.dir, pin: r.commit, answerKeys: ["answers.md"] });
    expect(plan.answerKeys[0]!.byContent.sort()).toEqual(Object.keys(near).sort());
    expect(plan.excluded["answer-key"]).toBe(6);
  });
});

describe("every corpus property is checked before anything is reserved", () => {
  const longPath = `${Array.from({ length: 16 }, (_, i) => `${String(i).padStart(2, "0")}${"d".repeat(248)}`).join("/")}/${"f".repeat(61)}`;

  /** A repository whose tree holds `path` (index only: no file system could write it) with a clean checkout. */
  async function repoWithIndexOnly(path: string): Promise<GitFixture> {
    const r = await repo([{ path: "README.md", content: PUBLIC }]);
    const oid = (await r.git(["hash-object", "-w", "--stdin"], "deep\n")).toString().trim();
    await r.git(["update-index", "--add", "-z", "--index-info"], Buffer.concat([Buffer.from(`100644 ${oid}\t${path}`), Buffer.from([0])]));
    await r.git(["commit", "-q", "-m", "long"]);
    r.commit = (await r.git(["rev-parse", "HEAD"])).toString().trim();
    await r.git(["update-index", "--skip-worktree", "-z", "--stdin"], Buffer.from(`${path}\0`));
    return r;
  }

  // contract: R121
  it("a 4,077-byte path: the dry run and a --pilot run exit 2 naming the path and the limit, nothing reserved, nothing left in the temp folder", async () => {
    expect(Buffer.byteLength(longPath)).toBe(4077);
    const r = await repoWithIndexOnly(longPath);
    const manifest = await manifestFor(r.commit, []);
    const tmp = await mkdtemp(join(work, "tmp-"));
    // tsx (the launcher) keeps its compile cache in the temp folder unless told not to; the runner's own folders are what is counted.
    const env = { TMPDIR: tmp, TSX_DISABLE_CACHE: "1", STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" };
    const dry = await runCli(["--dry-run", "--pilot", "--manifest", manifest, "--root", `corpus=${r.dir}`], { env });
    expect(dry.code, dry.stderr).toBe(2);
    expect(dry.stderr).toMatch(/the path '00d{58}…' \(4077 bytes\), longer than the \d+-byte path limit that PATH_MAX \(4095\) leaves/);
    expect(await readdir(tmp)).toEqual([]);

    const output = join(work, `ledger-${seq++}.json`);
    const run = await runCli(["--pilot", "--approve-budget", "--transport", "cli", "--manifest", manifest, "--root", `corpus=${r.dir}`, "--output", output, "--quiet"], { env });
    expect(run.code, run.stderr).toBe(2);
    expect(run.stderr).toMatch(/4077 bytes\), longer than the \d+-byte path limit/);
    expect(run.stderr).not.toMatch(/internal error/);
    await expect(readFile(output)).rejects.toMatchObject({ code: "ENOENT" }); // no ledger: nothing reserved
    expect(await readdir(tmp)).toEqual([]);
  });

  // contract: R121
  it("a name over 255 bytes, more files or more bytes than the limits: exit 2 naming the limit; the flags raise the counts", async () => {
    const tmp = await mkdtemp(join(work, "tmp-"));
    const env = { TMPDIR: tmp, TSX_DISABLE_CACHE: "1" };
    const longName = await repoWithIndexOnly(`docs/${"n".repeat(256)}.md`);
    const dry = await runCli(["--dry-run", "--pilot", "--manifest", await manifestFor(longName.commit, []), "--root", `corpus=${longName.dir}`], { env });
    expect(dry.code, dry.stderr).toBe(2);
    expect(dry.stderr).toMatch(/whose name 'n{60}…' \(259 bytes\) is over the 255-byte limit of a file name/);

    const many = await repo(Array.from({ length: 6 }, (_, i) => ({ path: i === 0 ? "README.md" : `f${i}.md`, content: `file ${i} ${"x".repeat(100)}\n` })));
    const manifest = await manifestFor(many.commit, []);
    const files = await runCli(["--dry-run", "--pilot", "--manifest", manifest, "--root", `corpus=${many.dir}`, "--max-export-files", "5"], { env });
    expect(files.code, files.stderr).toBe(2);
    expect(files.stderr).toMatch(/holds 6 files, more than the limit of 5; raise it with --max-export-files/);
    const bytes = await runCli(["export", "--manifest", manifest, "--root", `corpus=${many.dir}`, "--repository", "corpus", "--out", join(work, `out-${seq++}`), "--max-export-bytes", "500"], {
      env,
    });
    expect(bytes.code, bytes.stderr).toBe(2);
    expect(bytes.stderr).toMatch(/holds \d+ bytes, more than the limit of 500; raise it with --max-export-bytes/);
    const raised = await runCli(["--dry-run", "--pilot", "--manifest", manifest, "--root", `corpus=${many.dir}`, "--max-export-files", "6"], { env });
    expect(raised.code, raised.stderr).toBe(0);
    expect(JSON.parse(raised.stdout).repositories[0].export).toMatchObject({ files: 6, limits: { maxFiles: 6 } });
    expect(await readdir(tmp)).toEqual([]);
  });

  // contract: R122
  it("a leftover engine folder holding a 4,077-byte path is removed and does not stop a later run; one that cannot be removed is a warning", async () => {
    const tmp = await mkdtemp(join(work, "tmp-"));
    // The engine's uid must reach its sandbox under the temp folder (else it goes to /tmp).
    await chmod(work, 0o711);
    await chmod(tmp, 0o755);
    const leftover = join(tmp, `study-runner-engine-${await deadPid()}-AbCdEf`);
    await mkdir(leftover, { mode: 0o700 });
    // Built relative to the shell's working folder, the only way to write past PATH_MAX.
    const parts = longPath.split("/");
    const script = `set -e; cd "$1"; ${parts
      .slice(0, -1)
      .map((p) => `mkdir ${p}; cd ${p}`)
      .join("; ")}; echo deep > ${parts.at(-1)}; chmod 444 ${parts.at(-1)}; for i in $(seq ${parts.length - 1}); do chmod 555 .; cd ..; done`;
    await new Promise<void>((resolve, reject) => {
      const child = spawn("sh", ["-c", script, "sh", leftover], { stdio: "ignore" });
      child.on("error", reject);
      child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`sh exited ${code}`))));
    });
    expect(Buffer.byteLength(join(leftover, longPath))).toBeGreaterThan(4095);

    const r = await repo([{ path: "README.md", content: PUBLIC }]);
    const saved = process.env.TMPDIR;
    process.env.TMPDIR = tmp;
    try {
      // The doc-bridge preflight's sandbox: its reaper meets the leftover first.
      const sandbox = await prepareEngineSandbox({ command: ["true"], checkout: r.dir, pin: r.commit, indexRoot: join(work, "no-index") });
      await sandbox.remove();
    } finally {
      if (saved === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = saved;
    }
    expect(await readdir(tmp)).toEqual([]);

    // Best effort: a folder the remover cannot take is named in a warning and skipped.
    const stuck = join(tmp, `study-runner-engine-${await deadPid()}-GhIjKl`);
    await mkdir(stuck);
    const warnings: string[] = [];
    const removed = await reapOrphanFolders(
      "engine",
      async () => {
        throw Object.assign(new Error("refused"), { code: "EPERM" });
      },
      tmp,
      (w) => warnings.push(w),
    );
    expect(removed).toEqual([]);
    expect(warnings).toEqual([expect.stringMatching(new RegExp(`cannot remove ${stuck}.*\\(EPERM\\); skipped`))]);
    await removeTree(stuck);
  });
});

describe("the manifest is parsed strictly, and one pin rule holds", () => {
  // contract: R123
  it("a duplicate key at any depth is refused with exit 2 by the dry run and the export, naming the key and its lines", async () => {
    const r = await repo([
      { path: "README.md", content: PUBLIC },
      { path: "answers.md", content: ANSWERS },
    ]);
    const body = JSON.stringify(
      {
        version: 1,
        repetitions: 1,
        scenarios: ["repository-only", "doc-bridge"],
        repositories: { corpus: r.commit },
        tasks: [{ id: "t1", repository: "corpus", category: "c", question: "When?", sources: ["README.md"], expected: ["17:30"] }],
        answerKeys: { corpus: ["answers.md"] },
      },
      null,
      2,
    );
    /** 1-based lines of every line of `text` that holds `needle`. */
    const linesOf = (text: string, needle: string) => text.split("\n").flatMap((l, i) => (l.includes(needle) ? [i + 1] : []));
    const topText = body.replace(/\n}$/, ',\n  "answerKeys": { "corpus": [] }\n}');
    const topLevel = join(work, "dup-top.json");
    await writeFile(topLevel, topText);
    const nestedText = body.replace('"category": "c",', '"category": "c",\n      "category": "d",');
    const nested = join(work, "dup-nested.json");
    await writeFile(nested, nestedText);
    const [top1, top2] = linesOf(topText, '"answerKeys"');
    const [cat1, cat2] = linesOf(nestedText, '"category"');
    for (const [path, pattern] of [
      [topLevel, new RegExp(`the key "answerKeys" at the top level appears twice \\(line ${top1} and line ${top2}\\)`)],
      [nested, new RegExp(`the key "category" in tasks\\[0\\] appears twice \\(line ${cat1} and line ${cat2}\\)`)],
    ] as const) {
      const dry = await runCli(["--dry-run", "--pilot", "--manifest", path, "--root", `corpus=${r.dir}`]);
      expect(dry.code, dry.stderr).toBe(2);
      expect(dry.stderr).toMatch(pattern);
      const exported = await runCli(["export", "--manifest", path, "--root", `corpus=${r.dir}`, "--repository", "corpus", "--out", join(work, `out-${seq++}`)]);
      expect(exported.code, exported.stderr).toBe(2);
      expect(exported.stderr).toMatch(pattern);
    }
  });

  // contract: R124
  it("an annotated tag's id is refused as a pin by the dry run, the export and planExport alike", async () => {
    const r = await repo([{ path: "README.md", content: PUBLIC }]);
    await r.git(["tag", "-a", "v1", "-m", "release"]);
    const tag = (await r.git(["rev-parse", "v1"])).toString().trim();
    expect(tag).not.toBe(r.commit);
    const manifest = await manifestFor(tag, []);
    const pattern = new RegExp(`pin ${tag} is an annotated tag, not a commit; pin the commit it points to \\(${r.commit}\\)`);
    const dry = await runCli(["--dry-run", "--pilot", "--manifest", manifest, "--root", `corpus=${r.dir}`]);
    expect(dry.code, dry.stderr).toBe(2);
    expect(dry.stderr).toMatch(pattern);
    const exported = await runCli(["export", "--manifest", manifest, "--root", `corpus=${r.dir}`, "--repository", "corpus", "--out", join(work, `out-${seq++}`)]);
    expect(exported.code, exported.stderr).toBe(2);
    expect(exported.stderr).toMatch(pattern);
    await expect(planExport({ repoDir: r.dir, pin: tag })).rejects.toThrow(pattern);
  });
});
