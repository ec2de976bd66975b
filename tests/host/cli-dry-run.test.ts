import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { runCli } from "../support/cli.ts";

let work: string;
let corpus: Record<string, { dir: string; commit: string }>;
const rootArgs = (names = Object.keys(corpus)) => names.flatMap((n) => ["--root", `${n}=${corpus[n]!.dir}`]);
const gitIn = (dir: string, ...args: string[]) => execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t.invalid", "-c", "commit.gpgsign=false", ...args], { cwd: dir });

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-cli-"));
  corpus = await makeDemoCorpus(join(work, "corpus"));
});
afterAll(() => rm(work, { recursive: true, force: true }));

describe("study-runner --dry-run", () => {
  it("the demo corpus reproduces the pins of the bundled manifest", async () => {
    const r = await runCli(["--dry-run", "--run", ...rootArgs()]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out).toMatchObject({ attempts: 36, mode: "full", networkCalls: 0, claudeProcesses: 0, scenarios: ["repository-only", "doc-bridge"] });
    // Measured, not a literal: git read three checkouts (status, ls-tree, cat-file and more per root).
    expect(Object.keys(out.childProcesses)).toEqual(["git"]);
    expect(out.childProcesses.git).toBeGreaterThanOrEqual(3 * 3);
    expect(out.network).toEqual({ inetConnects: 0, unixSocketConnects: 0, fetchCalls: 0, udpSends: 0, dnsLookups: 0 });
    expect(out.protocolHash).toMatch(/^[0-9a-f]{64}$/);
    expect(out.repositories.every((r: any) => r.checked && r.sourcesChecked > 0)).toBe(true);
  });

  // Needs root for `unshare --net`, as CI and the engine's sandbox do: not skipped elsewhere, it fails saying so.
  it("succeeds in a network namespace without interfaces (unshare --net, as root)", async () => {
    expect(process.getuid?.(), "unshare --net needs root").toBe(0);
    const { execFile } = await import("node:child_process");
    const run = (args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
        execFile("unshare", ["--net", ...args], { cwd: process.cwd(), env: { PATH: process.env.PATH, HOME: process.env.HOME, TMPDIR: process.env.TMPDIR } }, (err, stdout, stderr) =>
          resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
        ),
      );
    // The namespace has the loopback device alone, and it is down: nothing can be reached.
    const devices = await run(["cat", "/proc/self/net/dev"]);
    expect(
      devices.stdout
        .split("\n")
        .slice(2)
        .filter(Boolean)
        .map((l) => l.trim().split(":")[0]),
    ).toEqual(["lo"]);
    const r = await run([process.execPath, "bin/study-runner.mjs", "--dry-run", "--run", "--transport", "cli", ...rootArgs()]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out).toMatchObject({ networkCalls: 0, claudeProcesses: 0 });
    expect(Object.keys(out.childProcesses)).toEqual(["git"]);
  });

  it("--pilot reports 2 attempts, and the transport defaults to http", async () => {
    const out = JSON.parse((await runCli(["--dry-run", "--pilot"])).stdout);
    expect(out).toMatchObject({ attempts: 2, mode: "pilot", transport: "http" });
  });

  it("refuses a dirty checkout, naming the repository and the change", async () => {
    const dir = corpus.queuekit!.dir;
    await writeFile(join(dir, "docs", "retries.md"), "changed\n");
    try {
      const r = await runCli(["--dry-run", "--run", ...rootArgs()]);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).toMatch(/root 'queuekit' .*checkout is not clean \(1 change: M docs\/retries\.md\)/);
    } finally {
      gitIn(dir, "checkout", "--", "docs/retries.md");
    }
  });

  it("refuses an untracked file too", async () => {
    const dir = corpus.routekit!.dir;
    await writeFile(join(dir, "notes.txt"), "scratch\n");
    try {
      const r = await runCli(["--dry-run", "--run", ...rootArgs()]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/root 'routekit' .*not clean .*notes\.txt/);
    } finally {
      await rm(join(dir, "notes.txt"));
    }
  });

  it("refuses a HEAD off the pin, naming both commits", async () => {
    const dir = corpus.ledgerlite!.dir;
    gitIn(dir, "commit", "-q", "--allow-empty", "-m", "later");
    try {
      const r = await runCli(["--dry-run", "--pilot", ...rootArgs(["ledgerlite"])]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(new RegExp(`root 'ledgerlite' .*HEAD is [0-9a-f]{40}, not the pin ${corpus.ledgerlite!.commit}`));
    } finally {
      gitIn(dir, "reset", "-q", "--hard", corpus.ledgerlite!.commit);
    }
  });

  it("refuses a task source missing at the pin, and one that is not public", async () => {
    const manifest = JSON.parse(execFileSync("cat", ["study/demo/manifest.json"]).toString());
    manifest.tasks[0].sources = ["docs/nope.md", "docs/latest.md", "data/fixtures.csv"];
    const path = join(work, "m.json");
    await writeFile(path, JSON.stringify(manifest));
    const r = await runCli(["--dry-run", "--pilot", "--manifest", path, ...rootArgs(["ledgerlite"])]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/tasks\[0\]\.sources\[0\] 'docs\/nope\.md' does not exist at the pin/);
    expect(r.stderr).toMatch(/tasks\[0\]\.sources\[1\] 'docs\/latest\.md' is not a public file at the pin \(not-a-regular-file\)/);
    expect(r.stderr).toMatch(/tasks\[0\]\.sources\[2\] 'data\/fixtures\.csv' is not a public file at the pin \(too-large\)/);
  });

  it("refuses a root for a repository the manifest does not know", async () => {
    const r = await runCli(["--dry-run", "--root", `elsewhere=${work}`]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/'elsewhere' is not a repository of the manifest/);
  });

  it("refuses an invalid manifest with exit code 2, naming the field", async () => {
    const path = join(work, "bad.json");
    const manifest = JSON.parse(execFileSync("cat", ["study/demo/manifest.json"]).toString());
    manifest.repetitions = 0;
    await writeFile(path, JSON.stringify(manifest));
    const r = await runCli(["--dry-run", "--manifest", path]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/repetitions: must be at least 1/);
  });

  // contract: R189
  it("echoes a refused name, path or flag value with its control and bidirectional characters escaped, one message a line", async () => {
    const path = join(work, "hostile-names.json");
    const manifest = JSON.parse(execFileSync("cat", ["study/demo/manifest.json"]).toString());
    manifest.repositories["evil\u202eeman"] = Object.values(manifest.repositories)[0];
    manifest.tasks[0].sources[0] = "a/\nstudy-runner: all good\u202e/../x";
    await writeFile(path, JSON.stringify(manifest));
    const bad = await runCli(["--dry-run", "--manifest", path]);
    const flag = await runCli(["--dry-run", "--root", `x\u202ey\u0007\u009b=${work}`]);
    for (const r of [bad, flag]) {
      expect(r.code).toBe(2);
      expect(r.stderr).not.toMatch(RAW_UNSAFE);
      for (const line of r.stderr.trimEnd().split("\n")) expect(line).toMatch(/^study-runner: /);
    }
    expect(bad.stderr).toContain('repositories["evil\\u202eeman"]');
    expect(flag.stderr).toContain("'x\\u202ey\\u0007\\u009b' is not a repository of the manifest");
  });
});

/** A character that may not reach the terminal raw: any control but the line break, the line and paragraph separators, a bidirectional control. */
const RAW_UNSAFE = /(?!\n)[\p{Cc}\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/u;

describe("study-runner execution refusals", () => {
  it("lists everything missing at once, with exit code 2 and nothing on stdout", async () => {
    const r = await runCli(["--transport", "cli"], { env: { STUDY_MODEL: undefined, STUDY_BUDGET_USD: undefined } });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    for (const missing of [
      /--pilot .* or --run/,
      /--approve-budget is required/,
      /STUDY_MODEL is not set/,
      /STUDY_BUDGET_USD is not set/,
      /--root ledgerlite=<path> is missing/,
      /--output PATH is required/,
    ]) {
      expect(r.stderr).toMatch(missing);
    }
  });

  it("refuses a cap that is not positive and an http run without a key or prices", async () => {
    const r = await runCli(["--pilot", "--approve-budget", ...rootArgs(["ledgerlite"]), "--output", join(work, "l.json")], {
      env: { STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "0", ANTHROPIC_API_KEY: undefined },
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/STUDY_BUDGET_USD must be greater than 0, such as 0.10/);
    expect(r.stderr).toMatch(/ANTHROPIC_API_KEY is not set/);
    expect(r.stderr).toMatch(/upper input price/);
  });

  it("refuses a model the runner cannot price before anything is written or started, naming the priced models", async () => {
    const output = join(work, "unpriced.json");
    const r = await runCli(["--pilot", "--approve-budget", "--transport", "cli", ...rootArgs(["ledgerlite"]), "--output", output, "--image", "study-runner/claude-code:0.0.0-never-built"], {
      env: { STUDY_MODEL: "claude-unpriced-9", STUDY_BUDGET_USD: "1" },
    });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/STUDY_MODEL=claude-unpriced-9 has no row in the runner's price table \(CLI_PRICES\).*set STUDY_MODEL to a model the runner can price: .*claude-haiku-5-5/);
    await expect(stat(output)).rejects.toThrow(/ENOENT/);

    const dry = await runCli(["--dry-run", "--pilot", "--transport", "cli", ...rootArgs(["ledgerlite"])], { env: { STUDY_MODEL: "claude-unpriced-9" } });
    expect(dry.code).toBe(2);
    expect(dry.stdout).toBe("");
    expect(dry.stderr).toMatch(/STUDY_MODEL=claude-unpriced-9 has no row .*claude-haiku-5-5/);
    const priced = await runCli(["--dry-run", "--pilot", "--transport", "cli", ...rootArgs(["ledgerlite"])], { env: { STUDY_MODEL: "claude-haiku-5-5" } });
    expect(priced.code).toBe(0);
  });

  it("refuses an output path inside a checkout and one that exists", async () => {
    const env = { STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" };
    const base = ["--pilot", "--approve-budget", "--transport", "cli", ...rootArgs(["ledgerlite"])];
    const inside = await runCli([...base, "--output", join(corpus.ledgerlite!.dir, "ledger.json")], { env });
    expect(inside.code).toBe(2);
    expect(inside.stderr).toMatch(/inside the checkout/);
    const existing = join(work, "exists.json");
    await writeFile(existing, "{}");
    const exists = await runCli([...base, "--output", existing], { env });
    expect(exists.code).toBe(2);
    expect(exists.stderr).toMatch(/exists/);
  });
});
