/**
 * The exports of one run (a study, an adjudication) are planned once per source: the pin checked,
 * the tree listed, the filter applied. Every export still reads each blob anew, checks it against
 * its id and hashes what it wrote. Real repositories made by the test; the git processes are the
 * runner's own count (src/process/child.ts).
 */
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { deflateSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exportAtPin, removeExport, RunExports, type ExportOptions, type ExportResult } from "../../src/export/export.ts";
import { childProcessCounts } from "../../src/process/child.ts";
import { makeGitRepo, type GitFixture } from "../support/git-fixture.ts";

const ANSWERS = "EXPECTED: the window closes at 17:30 on Fridays\n";
const LABELS = { run: "r", attempt: "a" };

let work: string;
const repos: GitFixture[] = [];
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-export-run-"));
});
afterAll(async () => {
  for (const r of repos) await r.remove();
  if (work) await rm(work, { recursive: true, force: true });
});

/** A corpus with an answer key reached through a committed symlink and a copy of it: every pass of the filter runs. */
async function corpus(): Promise<{ r: GitFixture; source: ExportOptions }> {
  const r = await makeGitRepo([
    { path: "README.md", content: "Public readme.\n" },
    { path: "src/a.ts", content: "export const a = 1;\n" },
    { path: "keys/answers.md", content: ANSWERS },
    { path: "answers-link", symlink: "keys" },
    { path: "docs/copy.md", content: ANSWERS.replace("\n", "\r\n") },
  ]);
  repos.push(r);
  return { r, source: { repoDir: r.dir, pin: r.commit, parentDir: work, answerKeys: ["answers-link"], labels: LABELS } };
}

const gitStarted = () => childProcessCounts().git ?? 0;

async function exported(e: ExportResult): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const f of e.files) out[f.path] = await readFile(join(e.dir, f.path), "utf8");
  return out;
}

async function leftExports(): Promise<string[]> {
  return (await readdir(work)).filter((n) => n.startsWith("study-runner-export-"));
}

describe("a run's exports", () => {
  // contract: R284
  it("plan each source once: every later export starts one git process and writes the same files and exportHash", async () => {
    const { source } = await corpus();
    let before = gitStarted();
    const alone = await exportAtPin(source);
    const perExportAlone = gitStarted() - before;
    await removeExport(alone.dir);

    const run = new RunExports();
    const first = await run.exportAtPin(source);
    const later: ExportResult[] = [];
    before = gitStarted();
    for (let i = 0; i < 3; i++) later.push(await run.exportAtPin({ ...source, labels: { run: "r", attempt: `a${i}` } }));
    const perLaterExport = (gitStarted() - before) / later.length;
    try {
      // The pin check, the listing and the filter's reads are the plan's; the blob read is each export's.
      expect(perLaterExport).toBe(1);
      expect(perExportAlone).toBeGreaterThanOrEqual(5);
      expect(Object.keys(await exported(first)).sort()).toEqual(["README.md", "src/a.ts"]);
      for (const e of later) {
        expect(e.dir).not.toBe(first.dir);
        expect(e.exportHash).toBe(alone.exportHash);
        expect(e.files).toEqual(alone.files);
        expect(e.answerKeys).toEqual(alone.answerKeys);
        expect(await exported(e)).toEqual(await exported(first));
      }
      expect(first.answerKeys[0]!.byContent).toEqual(["docs/copy.md"]);
    } finally {
      for (const e of [first, ...later]) await removeExport(e.dir);
    }
  });

  // contract: R285
  it("a tree object rewritten under the run changes no later export of it; a new run lists the rewritten tree", async () => {
    const { r, source } = await corpus();
    const run = new RunExports();
    const first = await run.exportAtPin(source);
    // Another src/ tree, one file more, written over the loose object of the pin's src/ tree: git
    // reads a tree below the root by its id without checking its bytes against it.
    const pinTree = (await r.git(["rev-parse", `${source.pin}:src`])).toString().trim();
    await r.commitEntries([{ path: "src/injected.ts", content: "not at the pin\n" }]);
    const other = await r.git(["cat-file", "tree", `${r.commit}:src`]);
    const file = join(r.dir, ".git", "objects", pinTree.slice(0, 2), pinTree.slice(2));
    await chmod(file, 0o644);
    await writeFile(file, deflateSync(Buffer.concat([Buffer.from(`tree ${other.length}\0`), other])));

    const second = await run.exportAtPin(source);
    const fresh = await new RunExports().exportAtPin(source);
    try {
      expect(second.exportHash).toBe(first.exportHash);
      expect(await exported(second)).toEqual(await exported(first));
      // Without the run's plan the export lists what the object store now says.
      expect(fresh.files.map((f) => f.path)).toContain("src/injected.ts");
      expect(fresh.exportHash).not.toBe(first.exportHash);
    } finally {
      for (const e of [first, second, fresh]) await removeExport(e.dir);
    }
  });

  // contract: R285
  it("an alternates file that appears under the run: later exports hold the pinned bytes, the next run refuses the checkout", async () => {
    const { r, source } = await corpus();
    const run = new RunExports();
    const first = await run.exportAtPin(source);
    const borrowed = await mkdtemp(join(work, "borrowed-"));
    await mkdir(join(r.dir, ".git", "objects", "info"), { recursive: true });
    await writeFile(join(r.dir, ".git", "objects", "info", "alternates"), `${borrowed}\n`);
    const second = await run.exportAtPin(source);
    try {
      expect(second.exportHash).toBe(first.exportHash);
      expect(await exported(second)).toEqual(await exported(first));
      const err = await new RunExports().exportAtPin(source).catch((e: Error) => e);
      expect(String(err)).toMatch(/objects\/info\/alternates.*git repack -a -d/);
    } finally {
      for (const e of [first, second]) await removeExport(e.dir);
    }
  });

  // contract: R285
  it("each export still checks every blob it reads: one forged under the run is refused, nothing is left, and the plan is kept", async () => {
    const { r, source } = await corpus();
    const run = new RunExports();
    const first = await run.exportAtPin(source);
    await removeExport(first.dir);
    const blob = (await r.git(["rev-parse", `${source.pin}:README.md`])).toString().trim();
    const file = join(r.dir, ".git", "objects", blob.slice(0, 2), blob.slice(2));
    const clean = await readFile(file);
    const forged = Buffer.from("Public README.\n");
    await chmod(file, 0o644);
    await writeFile(file, deflateSync(Buffer.concat([Buffer.from(`blob ${forged.length}\0`), forged])));
    const err = await run.exportAtPin(source).catch((e: Error) => e);
    expect(String(err)).toMatch(new RegExp(`bytes read for blob ${blob} do not hash to its id`));
    expect(await leftExports()).toEqual([]);

    await writeFile(file, clean);
    const before = gitStarted();
    const again = await run.exportAtPin(source);
    try {
      expect(gitStarted() - before).toBe(1);
      expect(again.exportHash).toBe(first.exportHash);
    } finally {
      await removeExport(again.dir);
    }
  });

  // contract: R284
  it("a source the run cannot plan is refused at each export, and planned once it can be", async () => {
    const { r, source } = await corpus();
    const elsewhere = await makeGitRepo([{ path: "README.md", content: "Fetched later.\n" }]);
    repos.push(elsewhere);
    const run = new RunExports();
    const later = { ...source, pin: elsewhere.commit };
    for (let i = 0; i < 2; i++) {
      const err = await run.exportAtPin(later).catch((e: Error) => e);
      expect(String(err)).toMatch(new RegExp(`commit ${elsewhere.commit} is not in the repository at .*; fetch it first`));
    }
    // A tree over the limit is refused by every export of the run too.
    for (let i = 0; i < 2; i++) {
      const over = await run.exportAtPin({ ...source, limits: { maxFiles: 1, maxBytes: 1_000_000 } }).catch((e: Error) => e);
      expect(String(over)).toMatch(/more than the limit of 1; raise it with --max-export-files/);
    }
    expect(await leftExports()).toEqual([]);
    await r.git(["fetch", "-q", elsewhere.dir, elsewhere.commit]);
    const fetched = await run.exportAtPin(later);
    try {
      expect(await exported(fetched)).toEqual({ "README.md": "Fetched later.\n" });
    } finally {
      await removeExport(fetched.dir);
    }
  });
});
