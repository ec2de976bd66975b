import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawn } from "node:child_process";
import { runCli, runnerEntry } from "../support/cli.ts";
import { ANSWER, baseEvents, toText } from "../unit/transcript-fixtures.ts";

let work: string;
beforeAll(async () => (work = await mkdtemp(join(tmpdir(), "sr-cmd-"))));
afterAll(() => rm(work, { recursive: true, force: true }));

describe("study-runner classify", () => {
  it("re-checks a saved transcript with the runner's rules and withholds the answer", async () => {
    const file = join(work, "mcp.jsonl");
    await writeFile(file, toText(baseEvents("mcp")));
    const r = await runCli(["classify", file, "--arm", "mcp", "--model", "claude-haiku-5-5", "--cli-version", "2.1.296"]);
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.status).toBe("completed");
    expect(out.facts.toolCallsByName).toEqual({ "mcp__doc-bridge__doc_search": 1, "mcp__doc-bridge__doc_get": 1 });
    expect(out.facts.answer).toBe(`(withheld: ${ANSWER.length} characters)`);
    expect(r.stdout + r.stderr).not.toContain("SECRET-ANSWER");
  });

  it("gives the same verdict the runner would for a broken rule and a non-zero exit", async () => {
    const file = join(work, "repo.jsonl");
    await writeFile(file, toText(baseEvents("repository")));
    const wrongArm = JSON.parse((await runCli(["classify", file, "--arm", "mcp", "--model", "claude-haiku-5-5"])).stdout);
    expect(wrongArm.status).toBe("invalid-setup");
    const exited = JSON.parse((await runCli(["classify", file, "--arm", "repository", "--model", "claude-haiku-5-5", "--exit-code", "1"])).stdout);
    expect(exited.status).toBe("failed");
  });

  it("requires the arm and the model", async () => {
    const r = await runCli(["classify", join(work, "x.jsonl"), "--model", "m"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--arm/);
  });
});

describe("study-runner plan", () => {
  it("prints the run order for a person, and as JSON", async () => {
    const table = await runCli(["plan", "--pilot"]);
    expect(table.stdout.split("\n").filter(Boolean)).toEqual([
      expect.stringMatching(/^#\s+task\s+scenario\s+rep\s+repository\s+pin$/),
      expect.stringMatching(/^1\s+ledgerlite-rounding\s+repository-only\s+1\s+ledgerlite\s+e2ff563dc35b$/),
      expect.stringMatching(/^2\s+ledgerlite-rounding\s+doc-bridge\s+1\s+ledgerlite\s+e2ff563dc35b$/),
    ]);
    const json = JSON.parse((await runCli(["plan", "--json"])).stdout);
    expect(json).toHaveLength(36);
    expect(json[2]).toMatchObject({ taskId: "ledgerlite-rounding", scenario: "doc-bridge", repetition: 2 });
  });
});

describe("study-runner image build", () => {
  it("names the version it was asked for in the install it suggests, so copying the hint installs that version", async () => {
    const cache = join(work, "empty-cache");
    const r = await runCli(["image", "build", "--version", "2.1.300"], { env: { STUDY_RUNNER_CACHE: cache } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/no Claude Code 2\.1\.300 binary found; run `study-runner image build --install --version 2\.1\.300`/);
  });
});

describe("study-runner with its output piped into a reader that has gone", () => {
  // `study-runner --help | head -3`: head exits after three lines and the pipe's read end closes.
  // The runner's write then fails with EPIPE, which ended it with a stack trace and exit 1.
  it.each(["--help", "run --help", "ledger verify --help"])("study-runner %s: no crash and no trace, exit 0", async (line) => {
    const entry = await runnerEntry();
    const child = spawn(process.execPath, [entry, ...line.split(" ")], { stdio: ["ignore", "pipe", "pipe"], env: { PATH: process.env.PATH, HOME: process.env.HOME } });
    // The read end is closed before the runner has started, so its first write meets no reader.
    child.stdout.destroy();
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
    expect(stderr).toBe("");
    expect(code).toBe(0);
  });
});
