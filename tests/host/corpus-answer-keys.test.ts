/**
 * Answer keys are matched on their normalized form and by content: a hostile (or careless)
 * corpus that commits a case, Unicode or invisible-character variant of a key, or a copy of
 * it under another name, still keeps it out of every export; a key that names nothing at the
 * pin refuses the dry run and the run before anything starts.
 */
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { planExport } from "../../src/export/export.ts";
import { makeGitRepo, type GitFixture } from "../support/git-fixture.ts";
import { runCli } from "../support/cli.ts";

const KEY_TEXT = "EXPECTED: roundMinor rounds half to even\n";
const VARIANTS = [
  "Answers.md", // case
  "ANSWERS.MD",
  "answers\u200b.md", // zero-width space
  "answers.md\ufeff", // BOM
  " answers.md", // surrounding whitespace
  "sub/answers.md", // the same name in another folder is another path, not a variant
];
let repo: GitFixture;
let work: string;

beforeAll(async () => {
  repo = await makeGitRepo([
    { path: "src/index.ts", content: "export const x = 1;\n" },
    { path: "answers.md", content: KEY_TEXT },
    ...VARIANTS.map((path, i) => ({ path, content: `${KEY_TEXT}variant ${i}\n` })),
    // Unicode normalization: the key is written NFC (é), the tree holds NFD (e + combining acute).
    { path: "r\u0065\u0301ponses/q1.md", content: "key in NFD folder\n" },
    // Copies of the key's bytes under innocent names.
    { path: "docs/notes.txt", content: KEY_TEXT },
    { path: "src/fixtures/expected.md", content: KEY_TEXT },
    // Empty files share one blob; an empty key file must not take them all out.
    { path: "empty-key.md", content: "" },
    { path: "src/__init__.py", content: "" },
  ]);
  work = await mkdtemp(join(tmpdir(), "sr-answer-keys-"));
});
afterAll(async () => {
  await repo?.remove();
  if (work) await rm(work, { recursive: true, force: true });
});

async function manifest(answerKeys: string[]): Promise<string> {
  const path = join(work, `manifest-${Math.random().toString(36).slice(2)}.json`);
  await writeFile(
    path,
    JSON.stringify({
      version: 1,
      repetitions: 1,
      scenarios: ["repository-only", "doc-bridge"],
      repositories: { corpus: repo.commit },
      tasks: [{ id: "t1", repository: "corpus", category: "c", question: "q?", sources: ["src/index.ts"], expected: ["x"] }],
      answerKeys: { corpus: answerKeys },
    }),
  );
  return path;
}

describe("answer keys", () => {
  it("keep out case, Unicode and invisible-character variants and every copy of the key's content", async () => {
    const plan = await planExport({ repoDir: repo.dir, pin: repo.commit, answerKeys: ["answers.md", "réponses", "empty-key.md"] });
    const paths = plan.files.map((f) => f.path).sort();
    expect(paths).toEqual(["src/__init__.py", "src/index.ts", "sub/answers.md"]);
    const [key, folder, empty] = plan.answerKeys;
    expect(key!.byName.sort()).toEqual(["ANSWERS.MD", "Answers.md", " answers.md", "answers.md", "answers.md\ufeff", "answers\u200b.md"].sort());
    expect(key!.byContent.sort()).toEqual(["docs/notes.txt", "src/fixtures/expected.md"]);
    expect(folder!.byName).toEqual(["r\u0065\u0301ponses/q1.md"]);
    expect(empty!.byName).toEqual(["empty-key.md"]);
    expect(empty!.byContent).toEqual([]);
    expect(plan.excluded["answer-key"]).toBe(10);
  });

  it("the dry run lists per repository what was kept out as an answer key", async () => {
    const r = await runCli(["--dry-run", "--pilot", "--manifest", await manifest(["answers.md"]), "--root", `corpus=${repo.dir}`]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    const [match] = out.repositories[0].excludedAsAnswerKeys;
    expect(match.key).toBe("answers.md");
    expect(match.byName).toContain("Answers.md");
    expect(match.byContent.sort()).toEqual(["docs/notes.txt", "src/fixtures/expected.md"]);
    expect(r.stdout).not.toContain("roundMinor");
  });

  it("a key that matches no entry at the pin refuses the dry run and the run (exit 2), naming the key and the repository", async () => {
    const path = await manifest(["answers.md", "answer-key.md"]);
    const dry = await runCli(["--dry-run", "--pilot", "--manifest", path, "--root", `corpus=${repo.dir}`]);
    expect(dry.code).toBe(2);
    expect(dry.stdout).toBe("");
    expect(dry.stderr).toMatch(/root 'corpus' .*answerKeys\.corpus\[1\] 'answer-key\.md' matches no entry at the pin/);
    const run = await runCli(["--pilot", "--approve-budget", "--transport", "cli", "--manifest", path, "--root", `corpus=${repo.dir}`, "--output", join(work, "ledger.json")], {
      env: { STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" },
    });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/answerKeys\.corpus\[1\] 'answer-key\.md' matches no entry at the pin/);
  });

  // contract: R190
  it("export refuses a key that matches no entry at the pin the same way (exit 2), and writes nothing", async () => {
    const path = await manifest(["answers.md", "answer-key.md"]);
    const out = join(work, "export-unmatched");
    const r = await runCli(["export", "--manifest", path, "--root", `corpus=${repo.dir}`, "--repository", "corpus", "--out", out]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/answerKeys\.corpus\[1\] 'answer-key\.md' matches no entry at the pin/);
    await expect(stat(out)).rejects.toMatchObject({ code: "ENOENT" });
    // The same keys, all matching, export.
    const ok = await runCli(["export", "--manifest", await manifest(["answers.md"]), "--root", `corpus=${repo.dir}`, "--repository", "corpus", "--out", out]);
    expect(ok.code, ok.stderr).toBe(0);
  });
});
