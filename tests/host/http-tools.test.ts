import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { makeGitRepo, type GitFixture } from "../support/git-fixture.ts";
import { openRepositoryTools, REPOSITORY_LIMITS, type RepositoryTools } from "../../src/transport/http/tools.ts";
import { exportAtPin, planExport, removeExport } from "../../src/export/export.ts";

// The http transport's repository tools over a real git repository: the pinned blobs that pass
// the export's public-path filter, and nothing else.

const SECRET = "ANSWER-KEY-TEXT-7731";
let repo: GitFixture;
let pin: string;
let tools: RepositoryTools;
const signal = new AbortController().signal;
const call = (name: string, input: Record<string, unknown>) => tools.call(name, input, signal);

beforeAll(async () => {
  const many = Array.from({ length: 530 }, (_, i) => ({ path: `gen/f${String(i).padStart(3, "0")}.txt`, content: `file ${i}\nneedle-in-${i}\n` }));
  repo = await makeGitRepo([
    { path: "README.md", content: "# Demo\nroundMinor lives in src/money.js\n" },
    { path: "src/money.js", content: Array.from({ length: 250 }, (_, i) => `line ${i + 1}${i === 149 ? " roundMinor(x)" : ""}`).join("\n") + "\n" },
    { path: "src/regex.js", content: "const re = /a.*b/;\n" },
    { path: "src/dup.txt", content: Array.from({ length: 40 }, () => "repeat repeat").join("\n") + "\n" },
    { path: "src/crlf.txt", content: "one\r\ntwo\r\n" },
    { path: "bin/blob.bin", content: Buffer.from([0x72, 0x6f, 0x75, 0x6e, 0x64, 0x00, 0x4d]) },
    { path: "eval/answer-key.md", content: `roundMinor ${SECRET}\n` },
    { path: ".env", content: `roundMinor ${SECRET}\n` },
    { path: "node_modules/x/index.js", content: `roundMinor ${SECRET}\n` },
    { path: "dist/out.js", content: `roundMinor ${SECRET}\n` },
    { path: "package-lock.json", content: `{"roundMinor":"${SECRET}"}\n` },
    { path: "big.txt", content: `roundMinor ${SECRET}\n` + "x".repeat(200_001) },
    { path: "link.md", symlink: "README.md" },
    ...many,
  ]);
  pin = repo.commit;
  // The work tree changes after the pin; the tools must never see it.
  await writeFile(join(repo.dir, "README.md"), `# Changed\nroundMinor ${SECRET}\n`);
  await writeFile(join(repo.dir, "untracked.md"), `roundMinor ${SECRET}\n`);
  tools = await openRepositoryTools({ repoDir: repo.dir, pin, answerKeys: ["eval"] });
}, 60_000);
afterAll(async () => {
  await tools?.close();
  await repo?.remove();
});

describe("repository tools over pinned blobs", () => {
  it("hold exactly the export's public file set and its export hash", async () => {
    const plan = await planExport({ repoDir: repo.dir, pin, answerKeys: ["eval"] });
    // The CLI attempt's hash over the bytes it writes: the same bytes, so the same hash.
    const written = await exportAtPin({ repoDir: repo.dir, pin, answerKeys: ["eval"], labels: { run: "r", attempt: "a" } });
    await removeExport(written.dir);
    expect(tools.exportHash).toBe(written.exportHash);
    expect(tools.files.map((f) => f.path).sort()).toEqual(plan.files.map((f) => f.path).sort());
    for (const hidden of ["eval/answer-key.md", ".env", "node_modules/x/index.js", "dist/out.js", "package-lock.json", "big.txt", "link.md", "untracked.md"]) {
      expect(tools.files.map((f) => f.path)).not.toContain(hidden);
    }
  });

  it("list at most 200 paths and say how many more there are", async () => {
    const all = await call("list_files", {});
    expect(all.isError).toBe(false);
    const lines = all.content.split("\n");
    expect(lines[0]).toBe(`${tools.files.length} files under the repository; the first 200 are shown (limit 200), ${tools.files.length - 200} more: narrow with directory`);
    expect(lines).toHaveLength(1 + REPOSITORY_LIMITS.listPaths);
    const src = await call("list_files", { directory: "./src/" });
    expect(src.content).toBe(["4 files under src/", "src/crlf.txt", "src/dup.txt", "src/money.js", "src/regex.js"].join("\n"));
    expect((await call("list_files", { directory: "eval" })).content).toBe("no files under eval/");
    expect((await call("list_files", { directory: "../etc" })).isError).toBe(true);
  });

  it("read at most 100 numbered lines from a start line, from the pin, never the work tree", async () => {
    const readme = await call("read_file", { path: "README.md" });
    expect(readme).toEqual({ isError: false, content: "README.md: lines 1-2 of 2\n     1\t# Demo\n     2\troundMinor lives in src/money.js" });
    const first = (await call("read_file", { path: "src/money.js" })).content.split("\n");
    expect(first[0]).toBe("src/money.js: lines 1-100 of 250");
    expect(first[1]).toBe("     1\tline 1");
    expect(first[100]).toBe("   100\tline 100");
    expect(first[101]).toBe("(lines 101-250 follow; call read_file with start_line 101)");
    expect(first).toHaveLength(102);
    const later = (await call("read_file", { path: "src/money.js", start_line: 150 })).content.split("\n");
    expect(later[0]).toBe("src/money.js: lines 150-249 of 250");
    expect(later[1]).toBe("   150\tline 150 roundMinor(x)");
    expect((await call("read_file", { path: "src/crlf.txt" })).content).toBe("src/crlf.txt: lines 1-2 of 2\n     1\tone\n     2\ttwo");
    expect(await call("read_file", { path: "src/money.js", start_line: 251 })).toEqual({ isError: true, content: "start_line 251 is past the end of src/money.js (250 lines)" });
  });

  it("answer a filtered-out path exactly like a missing one", async () => {
    for (const path of ["eval/answer-key.md", ".env", "big.txt", "link.md", "untracked.md", "package-lock.json"]) {
      expect(await call("read_file", { path })).toEqual({ isError: true, content: `no such file: ${path}` });
    }
    expect(await call("read_file", { path: "src" })).toEqual({ isError: true, content: "src is a folder; list it with list_files" });
    expect(await call("read_file", { path: "bin/blob.bin" })).toEqual({ isError: true, content: "bin/blob.bin is a binary file" });
  });

  it("search literally, case-sensitively, public files only", async () => {
    const r = await call("search_files", { query: "roundMinor" });
    expect(r.isError).toBe(false);
    expect(r.content).not.toContain(SECRET);
    // In path order gen/ (530 files) comes before src/, so src/ is past the 500-file limit here.
    const matches = (text: string) => text.split("\n").filter((l) => /^[^ ]+:\d+: /.test(l));
    expect(matches(r.content)).toEqual(["README.md:2: roundMinor lives in src/money.js"]);
    expect(r.content).toMatch(/the limit of 500 files was reached/);
    const src = await call("search_files", { query: "roundMinor", directory: "src" });
    expect(matches(src.content)).toEqual(["src/money.js:150: line 150 roundMinor(x)"]);
    expect(src.content.split("\n")[0]).toBe("1 matching lines in src/; searched 4 of 4 files");
    expect((await call("search_files", { query: "rOUNDminor", directory: "src" })).content).toMatch(/^0 matching lines/);
    const literal = await call("search_files", { query: "/a.*b/", directory: "src" });
    expect(literal.content).toContain("src/regex.js:1: const re = /a.*b/;");
    expect((await call("search_files", { query: "a.*b", directory: "src" })).content).toMatch(/^1 matching lines/);
    expect((await call("search_files", { query: SECRET, directory: "" })).content).toMatch(/^0 matching lines/);
  });

  it("stop at 30 matches and at the first 500 eligible files, and say so", async () => {
    const many = await call("search_files", { query: "repeat", directory: "src" });
    const lines = many.content.split("\n");
    expect(lines.filter((l) => l.startsWith("src/dup.txt:"))).toHaveLength(30);
    expect(lines[1]).toBe("stopped at the limit of 30 matches (in src/dup.txt); narrow the query or the directory");
    const gen = await call("search_files", { query: "needle-in-5", directory: "gen" });
    const head = gen.content.split("\n");
    expect(head[0]).toMatch(/^\d+ matching lines in gen\/; searched 500 of 530 files$/);
    expect(head[1]).toBe("the limit of 500 files was reached: 30 files after gen/f499.txt were not searched; narrow with directory");
    // needle-in-5xx live in files 500-529, which were not searched.
    expect(gen.content).not.toMatch(/gen\/f5\d\d\.txt/);
    expect(gen.content).toContain("gen/f005.txt:2: needle-in-5");
  });

  it("refuse bad input as a tool error, not a runner fault", async () => {
    expect((await call("read_file", {})).isError).toBe(true);
    expect((await call("read_file", { path: "README.md", start_line: 0 })).isError).toBe(true);
    expect((await call("search_files", { query: "" })).isError).toBe(true);
    expect((await call("list_files", { directory: "src", extra: 1 })).isError).toBe(true);
    expect(await call("Bash", { command: "ls" })).toEqual({ isError: true, content: "no tool named Bash" });
  });
});
