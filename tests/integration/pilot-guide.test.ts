import { execFile, spawn } from "node:child_process";
import { access, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { DEMO_MANIFEST, PROJECT_ROOT } from "../../src/util/paths.ts";

/**
 * docs/pilot.md, executed: every ```sh block of the guide runs in order in one bash, as a
 * person pasting them into one shell would, against the demo corpus. The test changes only:
 *
 * - the values of the first block's variables: the project as $RUNNER, the demo manifest,
 *   the demo corpus as $CORPUS_URL, the fake image, offline isolation (the test engine has no
 *   bridge network), the bundled reference engine, a full-run cap; and a temporary $HOME;
 * - four stand-ins, each for one block whose text must still be in the guide exactly:
 *   `npm ci` -> `npm ls` (no reinstall into the shared checkout, no registry);
 *   `image build --install` -> `image build --fake` (the real one downloads 257 MB);
 *   the interactive login -> a test login that authenticates nothing;
 *   and the model call itself: the fake image answers instead of the real CLI.
 */

const execFileP = promisify(execFile);
const GUIDE = join(PROJECT_ROOT, "docs", "pilot.md");
const PINS = {
  ledgerlite: "e2ff563dc35b3da1d8b11ab55f4447489db3f3e5",
  queuekit: "f3fc2be2e76bce2cff15c0710203b09b30ad3aad",
  routekit: "e4dabcdb9fee2fb5f93f52da0959bd4ada05f262",
};

const sq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The ```sh blocks of a Markdown text, in order. */
function shellBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1]!.trimEnd());
}

let work: string;
let home: string;
let staged: string;
let blocks: string[];
let result: { code: number | null; stdout: string[]; stderr: string[] };

/** Variables of the first block: replaced by the test's values, or kept as the guide has them. */
function testVariables(): Record<string, string> {
  return {
    RUNNER: PROJECT_ROOT,
    MANIFEST: DEMO_MANIFEST,
    CORPUS_URL: join(work, "upstream"),
    IMAGE: "study-runner/fake-claude:2.1.296",
    ISOLATION: "offline",
    FULL_RUN_BUDGET_USD: "4",
  };
}
// The doc-bridge engine is the guide's own: the bundled reference server and its index command, run as written.
const KEPT = ["STUDY_HOME", "study-runner", "doc_bridge_index"];

function substituteVariables(block: string, values: Record<string, string>, kept: readonly string[] = KEPT): string {
  const seen = new Set<string>();
  const out = block.split("\n").map((line) => {
    const exported = /^export ([A-Z_]+)=/.exec(line);
    const fn = /^([\w-]+)\(\) \{/.exec(line);
    const name = exported?.[1] ?? fn?.[1];
    if (!name) return line;
    seen.add(name);
    if (kept.includes(name)) return line;
    const value = values[name];
    if (value === undefined) throw new Error(`the guide's first block sets ${name}, which this test does not know: give it a test value or keep it`);
    return `export ${name}=${sq(value)}`;
  });
  const expected = [...Object.keys(values), ...kept].sort();
  expect([...seen].sort()).toEqual(expected);
  return out.join("\n");
}

function standIns(): Map<string, string> {
  return new Map([
    [`cd "$RUNNER" && npm ci`, `cd "$RUNNER" && npm ls --depth=0 >/dev/null`],
    [`study-runner image build --install`, `study-runner image build --fake`],
    [
      `"$HOME/.cache/study-runner/claude-code-2.1.296/node_modules/@anthropic-ai/claude-code-linux-x64/claude"`,
      `mkdir -p -m 700 "$HOME/.claude" && cp ${sq(join(staged, ".credentials.json"))} "$HOME/.claude/.credentials.json"`,
    ],
  ]);
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-guide-"));
  home = join(work, "home");
  staged = join(work, "staged-login");
  await makeDemoCorpus(join(work, "upstream"));
  await writeTestLogin(staged);
  await execFileP("mkdir", ["-p", home]);

  blocks = shellBlocks(await readFile(GUIDE, "utf8"));
  const replacements = standIns();
  for (const key of replacements.keys())
    expect(
      blocks.filter((b) => b === key),
      `the guide no longer has the block:\n${key}`,
    ).toHaveLength(1);
  const script = [
    "set -euo pipefail",
    ...blocks.map((block, i) => {
      const body = i === 0 ? substituteVariables(block, testVariables()) : (replacements.get(block) ?? block);
      return `printf '\\n@@block ${i}@@\\n'; printf '\\n@@block ${i}@@\\n' >&2\n${body}`;
    }),
  ].join("\n");

  result = await runBash(script);
}, 900_000);
afterAll(() => rm(work, { recursive: true, force: true }));

function runBash(script: string): Promise<{ code: number | null; stdout: string[]; stderr: string[] }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["-c", script], {
      cwd: work,
      env: { PATH: process.env.PATH, HOME: home, TMPDIR: process.env.TMPDIR, DOCKER_HOST: process.env.DOCKER_HOST, LANG: "C.UTF-8" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => (err += d.toString("utf8")));
    child.on("error", reject);
    const split = (text: string) => text.split(/\n@@block \d+@@\n/).slice(1);
    child.on("close", (code) => resolve({ code, stdout: split(out), stderr: split(err) }));
  });
}

/** The stdout and stderr of the block whose text contains `marker`. */
function step(marker: string): { stdout: string; stderr: string } {
  const i = blocks.findIndex((b) => b.includes(marker));
  expect(i, `no block contains ${marker}`).toBeGreaterThanOrEqual(0);
  return { stdout: result.stdout[i] ?? "", stderr: result.stderr[i] ?? "" };
}

describe("docs/pilot.md, run in order on the demo corpus", () => {
  it("runs every block to the end", () => {
    expect(blocks.length).toBeGreaterThanOrEqual(10);
    expect(result.stderr.join("\n@@\n"), `the guide's script failed with ${result.code}`).not.toMatch(/study-runner: internal error/);
    expect(result.code).toBe(0);
    expect(result.stdout).toHaveLength(blocks.length);
  });

  it("builds the image and loads a saved copy", () => {
    expect(JSON.parse(step("image build").stdout)).toMatchObject({ tag: "study-runner/fake-claude:2.1.296", version: "2.1.296" });
    expect(step("docker load").stdout).toMatch(/Loaded image: study-runner\/fake-claude:2\.1\.296/);
  });

  it("clones the three checkouts at their pins and indexes each", async () => {
    for (const [name, pin] of Object.entries(PINS)) {
      const dir = join(home, "study", name);
      expect((await execFileP("git", ["-C", dir, "rev-parse", "HEAD"])).stdout.trim()).toBe(pin);
      expect((await execFileP("git", ["-C", dir, "status", "--porcelain"])).stdout).toBe("");
      // The index lives in the runner's folder under $HOME, keyed by repository and pin, never in the checkout.
      const root = (await execFileP("git", ["-C", dir, "rev-list", "--max-parents=0", pin])).stdout.trim().split("\n").sort()[0]!;
      expect((await readdir(join(home, ".cache", "study-runner", "doc-bridge-index", root, pin))).filter((f) => f.endsWith(".json"))).toHaveLength(1);
      await expect(access(join(dir, ".doc-bridge"))).rejects.toThrow();
    }
  });

  it("the doctor passes every check for the pilot", () => {
    const { stdout } = step("study-runner doctor --pilot");
    const lines = stdout.trimEnd().split("\n");
    expect(lines.at(-1)).toBe("the pilot (--transport cli) could start with these flags and this environment");
    expect(lines.slice(0, -1).filter((l) => !l.startsWith("ok "))).toEqual([]);
    expect(stdout).toMatch(/^ok\s+login\s+.*\/home\/\.claude\/\.credentials\.json \(from ~\/\.claude\)/m);
    // The guide names no engine command, so the engine checked (and each attempt's) is the runner's bundle, not the sources through tsx.
    expect(stdout).toMatch(/^ok\s+doc-bridge\s+the bundled reference engine answers doc\.search/m);
    expect(stdout).not.toContain("test-access-token");
  });

  it("the dry run checks all three checkouts without a Claude process", () => {
    const dry = JSON.parse(step("--dry-run").stdout);
    expect(dry).toMatchObject({ dryRun: true, mode: "full", attempts: 36, claudeProcesses: 0, networkCalls: 0 });
    expect(dry.repositories.map((r: { name: string; checked: boolean }) => [r.name, r.checked])).toEqual([
      ["ledgerlite", true],
      ["queuekit", true],
      ["routekit", true],
    ]);
  });

  it("the pilot spends under its 1 USD cap and ends awaiting adjudication, with progress on stderr", async () => {
    const summary = JSON.parse(await readFile(join(home, "study", "pilot-summary.json"), "utf8"));
    expect(summary).toMatchObject({ status: "awaiting-adjudication", mode: "pilot", capUsd: 1, attempts: { planned: 2, run: 2, byStatus: { completed: 2 } } });
    expect(summary.spentUsd).toBeGreaterThan(0);
    expect(summary.spentUsd).toBeLessThanOrEqual(1);
    expect(summary.extrapolatedFullRunUsd).toBeGreaterThan(0);
    const pilot = step("study-runner --pilot");
    expect(pilot.stdout).toBe("");
    expect(pilot.stderr.split("\n").filter((l) => l.startsWith("study-runner: ["))).toHaveLength(4);
  });

  it("shows the summary and a report without answers", async () => {
    const { stdout } = step(`study-runner report --ledger "$STUDY_HOME/ledgers/pilot.json"`);
    const summaryText = await readFile(join(home, "study", "pilot-summary.json"), "utf8");
    expect(stdout.startsWith(summaryText)).toBe(true);
    expect(stdout).toMatch(/^# Study report: run-/m);
    expect(stdout).toMatch(/\| 1 \| ledgerlite-rounding \| repository-only \| 1 \| completed \|/);
    const ledger = JSON.parse(await readFile(join(home, "study", "ledgers", "pilot.json"), "utf8"));
    for (const o of ledger.observations) expect(stdout).not.toContain(o.answer);
  });

  it("the full run, with its own approved cap, runs all 36 attempts into a new ledger", async () => {
    const full = step("study-runner doctor --run");
    expect(full.stdout).toMatch(/^the full run \(--transport cli\) could start with these flags and this environment$/m);
    expect(full.stdout).toMatch(/^ok\s+budget\s+STUDY_BUDGET_USD=4:/m);
    const summary = JSON.parse(await readFile(join(home, "study", "full-summary.json"), "utf8"));
    expect(summary).toMatchObject({ status: "awaiting-adjudication", mode: "full", capUsd: 4, attempts: { planned: 36, run: 36, byStatus: { completed: 36 } } });
    expect(full.stdout).toMatch(/\| 36 \| routekit-/);
  });
});

describe("the guide as written, before anyone fills in the full run's budget", () => {
  it("refuses the full run: FULL_RUN_BUDGET_USD is empty, so the doctor fails the budget and the run never starts", async () => {
    const { FULL_RUN_BUDGET_USD: _kept, ...values } = testVariables();
    const last = blocks.at(-1)!;
    expect(last).toMatch(/^export STUDY_BUDGET_USD="\$FULL_RUN_BUDGET_USD"$/m);
    const script = ["set -euo pipefail", substituteVariables(blocks[0]!, values, [...KEPT, "FULL_RUN_BUDGET_USD"]), "printf '\\n@@block 0@@\\n'", last].join("\n");
    const before = await readFile(join(home, "study", "full-summary.json"), "utf8");
    const refused = await runBash(script);
    expect(refused.code).toBe(2);
    expect(refused.stdout[0]).toMatch(/^FAIL\s+budget\s+STUDY_BUDGET_USD must be a positive decimal number/m);
    expect(await readFile(join(home, "study", "full-summary.json"), "utf8")).toBe(before);
  });
});
