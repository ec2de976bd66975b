import { defaultIndexRoot } from "../../src/mcp/index-store.ts";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { prepareDemo, type DemoSetup } from "../../src/demo/setup.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { runCli, runLauncher, type CliResult } from "../support/cli.ts";
import { createServer } from "node:net";
import { startScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { makeTestCa } from "../support/test-ca.ts";

/**
 * `study-runner doctor` as a user runs it: real Docker, real git checkouts, the real doc-bridge
 * preflight, the shipped launcher. Unit tests cover each check's states with a fake engine.
 */

const execFileP = promisify(execFile);
const PINS = {
  ledgerlite: "e2ff563dc35b3da1d8b11ab55f4447489db3f3e5",
  queuekit: "f3fc2be2e76bce2cff15c0710203b09b30ad3aad",
  routekit: "e4dabcdb9fee2fb5f93f52da0959bd4ada05f262",
};
const MISSING_IMAGE = "study-runner/claude-code:0.0.0-doctor-absent";

let work: string;
let demo: DemoSetup;
let home: string;
let emptyCache: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-doctor-"));
  demo = await prepareDemo(join(work, "demo"), new DockerRuntime());
  home = join(work, "home");
  emptyCache = join(work, "cache");
  await mkdir(home);
  await mkdir(emptyCache);
  await mkdir(join(work, "ledgers"));
});
afterAll(() => rm(work, { recursive: true, force: true }));

/** A HOME without a login and a cache without a binary: a fresh host as far as the doctor can tell. */
function doctor(args: string[], env: Record<string, string | undefined> = {}, start: typeof runCli = runCli): Promise<CliResult> {
  // The demo's indexes were built into this process's index folder, not into the test HOME's.
  return start(["doctor", ...args], { env: { HOME: home, STUDY_RUNNER_CACHE: emptyCache, STUDY_RUNNER_DOC_INDEX: defaultIndexRoot(), ...env }, cwd: work });
}

/** name -> the whole line, from the doctor's plain output. */
function lines(stdout: string): Map<string, string> {
  const map = new Map<string, string>();
  for (const line of stdout.trimEnd().split("\n").slice(0, -1)) {
    const m = /^(ok|FAIL|skip)\s+(\S+)\s/.exec(line);
    expect(m, line).not.toBeNull();
    map.set(m![2]!, line);
  }
  return map;
}

const passingFlags = (over: { roots?: string[]; output?: string } = {}) => [
  "--transport",
  "cli",
  "--image",
  demo.image,
  "--claude-config-dir",
  demo.loginDir,
  ...(over.roots ?? [`ledgerlite=${demo.roots.ledgerlite}`]).flatMap((r) => ["--root", r]),
  "--output",
  over.output ?? join(work, "ledgers", "pilot.json"),
];
const STUDY_ENV = { STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" };

async function git(dir: string, ...args: string[]): Promise<string> {
  const env = {
    ...process.env,
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_AUTHOR_NAME: "t",
    GIT_AUTHOR_EMAIL: "t@example.invalid",
    GIT_COMMITTER_NAME: "t",
    GIT_COMMITTER_EMAIL: "t@example.invalid",
  };
  return (await execFileP("git", ["-C", dir, ...args], { env })).stdout.trim();
}

describe("study-runner doctor on a fresh host", () => {
  it("lists every missing piece with its fix and exits non-zero", async () => {
    const r = await doctor(["--transport", "cli", "--image", MISSING_IMAGE]);
    expect(r.code).toBe(2);
    const l = lines(r.stdout);
    expect(l.get("node")).toMatch(/^ok\s+node\s+Node \d+\./);
    expect(l.get("docker")).toMatch(/^ok\s+docker\s+Docker .* at unix:\/\/\/.*docker\.sock/);
    expect(l.get("image")).toMatch(
      new RegExp(
        `^FAIL\\s+image\\s+${MISSING_IMAGE} is not in the Docker engine  -> fix: study-runner image build --install \\(downloads @anthropic-ai/claude-code-linux-x64@2\\.1\\.296, about 257 MB, from the npm registry into ${emptyCache}\\).*then pass --image study-runner/claude-code:2\\.1\\.296$`,
      ),
    );
    expect(l.get("claude-version")).toMatch(/^skip\s+claude-version\s+needs the image$/);
    expect(l.get("login")).toMatch(new RegExp(`^FAIL\\s+login\\s+no Claude login at ${home}/\\.claude/\\.credentials\\.json \\(ENOENT\\).*-> fix: run \`claude\` on this machine and log in`));
    expect(l.get("root:ledgerlite")).toMatch(
      new RegExp(
        `^FAIL\\s+root:ledgerlite\\s+no --root ledgerlite=… given; the pilot needs a checkout of ledgerlite at ${PINS.ledgerlite}  -> fix: git clone <ledgerlite's repository> DIR && git -C DIR checkout --detach ${PINS.ledgerlite}, then pass --root ledgerlite=DIR$`,
      ),
    );
    expect(l.get("doc-bridge")).toMatch(/^skip\s+doc-bridge\s+needs clean checkouts at their pins \(root:ledgerlite\)$/);
    expect(l.get("output")).toMatch(/^FAIL\s+output\s.*-> fix: pass --output with a new file/);
    expect(l.get("transport")).toMatch(/^ok\s+transport\s+cli/);
    expect(l.get("model")).toMatch(/^FAIL\s+model\s+STUDY_MODEL is not set  -> fix: export the model decided in the protocol/);
    expect(l.get("budget")).toMatch(/^FAIL\s+budget\s+STUDY_BUDGET_USD is not set  -> fix: export the approved cumulative cap/);
    expect(l.get("attempts")).toMatch(/^skip\s+attempts\s/);
    expect(l.get("model-api")).toMatch(/^skip\s+model-api\s+needs the image$/);
    expect(l.get("engine-files")).toMatch(/^skip\s+engine-files\s+needs the image$/);
    expect(r.stdout.trimEnd().split("\n").at(-1)).toBe("6 checks failed, 5 skipped: the pilot (--transport cli) would be refused");
  });

  it("says which engine it tried when Docker is unreachable, and skips what needs it", async () => {
    const r = await doctor(["--transport", "cli"], { DOCKER_HOST: `unix://${join(work, "no-engine.sock")}` });
    expect(r.code).toBe(2);
    const l = lines(r.stdout);
    expect(l.get("docker")).toMatch(
      new RegExp(`^FAIL\\s+docker\\s+no Docker engine answers at DOCKER_HOST=unix://${work}/no-engine\\.sock: .*-> fix: start the engine DOCKER_HOST names, or correct DOCKER_HOST`),
    );
    expect(l.get("image")).toMatch(/^skip\s+image\s+needs the Docker engine$/);
    expect(l.get("claude-version")).toMatch(/^skip\s+claude-version\s+needs the Docker engine$/);
  });

  it("fails the default transport (http) without a key and upper prices, as run would refuse it", async () => {
    const r = await doctor(
      passingFlags().filter((f, i, all) => f !== "--transport" && all[i - 1] !== "--transport"),
      STUDY_ENV,
    );
    expect(r.code).toBe(2);
    expect(lines(r.stdout).get("transport")).toMatch(
      /^FAIL\s+transport\s+http \(the Messages API, the default --transport; this checked it\).*ANTHROPIC_API_KEY is not set.*-> fix: .*or check the other transport with doctor --transport cli/,
    );
  });
});

describe("study-runner doctor: the gateway's route to the model API", () => {
  // contract: R192
  it("fails the model-api check naming the host, the error and the fix when the upstream has no listener, and passes a scripted one", async () => {
    const ca = makeTestCa();
    const caFile = join(work, "gateway-ca.pem");
    await writeFile(caFile, ca.ca);
    const s = createServer();
    await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
    const port = (s.address() as { port: number }).port;
    await new Promise((resolve) => s.close(resolve));
    const refused = await doctor([...passingFlags(), "--test-gateway-upstream", `https://127.0.0.1:${port}`, "--test-gateway-ca", caFile], STUDY_ENV);
    expect(refused.code).toBe(2);
    expect(lines(refused.stdout).get("model-api")).toMatch(
      new RegExp(
        `^FAIL\\s+model-api\\s+the gateway cannot reach the model API at 127\\.0\\.0\\.1:${port} \\(ECONNREFUSED: .*\\)  -> fix: let this machine open HTTPS connections to 127\\.0\\.0\\.1:${port} .*or use --credentials login-copy`,
      ),
    );
    const api = await startScriptedApi({
      port: 0,
      tls: { key: ca.key, cert: ca.cert },
      script: { name: "s", turns: [{ answer: "ok", usage: { input_tokens: 1, output_tokens: 1 } }], neverEnd: false },
    });
    try {
      const host = new URL(api.url!).host;
      const ok = await doctor([...passingFlags(), "--test-gateway-upstream", `https://${host}`, "--test-gateway-ca", caFile], STUDY_ENV);
      expect(ok.code, ok.stdout).toBe(0);
      expect(lines(ok.stdout).get("model-api")).toBe(`ok    model-api        ${host}: the gateway's TLS handshake succeeded from this machine (nothing was sent)`);
      expect(api.requests).toEqual([]);
    } finally {
      await api.close();
    }
  });
});

describe("study-runner doctor after the demo's set-up", () => {
  it("passes every check for the pilot, without printing the token, and exits 0", async () => {
    const r = await doctor(passingFlags(), STUDY_ENV);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const l = lines(r.stdout);
    expect([...l.keys()]).toEqual([
      "node",
      "git",
      "docker",
      "image",
      "claude-version",
      "engine-files",
      "login",
      "manifest",
      "root:ledgerlite",
      "doc-bridge",
      "output",
      "transport",
      "model-api",
      "model",
      "budget",
      "attempts",
    ]);
    for (const [name, line] of l) expect(line, name).toMatch(/^ok\s/);
    expect(l.get("model-api")).toMatch(/^ok\s+model-api\s+not checked: the fake claude image sends no model request$/);
    expect(l.get("claude-version")).toMatch(/prints 2\.1\.296 \(Claude Code\), the pinned version/);
    expect(l.get("login")).toMatch(/valid until 2099-01-01T00:00:00\.000Z/);
    expect(l.get("root:ledgerlite")).toMatch(
      new RegExp(
        `clean, HEAD at the pin ${PINS.ledgerlite.slice(0, 12)}, 4 task sources public at the pin, export of \\d+ files / \\d+ bytes within the limits; answer keys kept out: 'eval/answer-key\\.md' → eval/answer-key\\.md \\(by name\\)$`,
      ),
    );
    expect(l.get("doc-bridge")).toMatch(/the bundled reference engine answers doc\.search from an index fresh at the pin in ledgerlite; .*denied to the agent: gate\.status, memory\.promoteDraft/);
    // Who the engine runs as (the tests run as root, so it is dropped), and the answer-key proof.
    expect(l.get("doc-bridge")).toMatch(/the engine runs as uid 65534 \(gid 65534, no supplementary groups, no capabilities, no new privileges\), with an empty HOME/);
    expect(l.get("doc-bridge")).toMatch(/serves none of the answer keys \(ledgerlite: 1 path refused by doc\.get and absent from doc\.search\)$/);
    expect(l.get("attempts")).toMatch(/the cap holds 10 attempts .*the pilot plans 2$/);
    expect(r.stdout.trimEnd().split("\n").at(-1)).toBe("the pilot (--transport cli) could start with these flags and this environment");
    expect(r.stdout).not.toContain("test-access-token");
    expect(r.stdout).not.toContain("test-refresh-token");
  });

  it("checks the full study with --run and reports as JSON for tools", async () => {
    const roots = Object.entries(demo.roots).map(([n, d]) => `${n}=${d}`);
    const r = await doctor([...passingFlags({ roots }), "--run", "--json"], { ...STUDY_ENV, STUDY_BUDGET_USD: "4" });
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ ok: true, mode: "full", transport: "cli", attempts: 36 });
    expect(report.checks.filter((c: { ok: boolean }) => !c.ok)).toEqual([]);
    expect(report.checks.map((c: { name: string }) => c.name)).toEqual(expect.arrayContaining(["root:ledgerlite", "root:queuekit", "root:routekit", "doc-bridge"]));
    expect(report.checks.find((c: { name: string }) => c.name === "attempts").detail).toMatch(/holds 40 attempts .*the full study plans 36$/);
  });
});

describe("study-runner doctor: each checkout and the doc-bridge index", () => {
  it("fails a dirty checkout, one off its pin and an unknown name; the doc-bridge check waits for clean checkouts", async () => {
    const dirty = join(work, "dirty");
    await execFileP("git", ["clone", "--quiet", demo.roots.ledgerlite!, dirty]);
    await writeFile(join(dirty, "notes.txt"), "scratch\n");
    const moved = join(work, "moved");
    await execFileP("git", ["clone", "--quiet", demo.roots.queuekit!, moved]);
    await git(moved, "commit", "--quiet", "--allow-empty", "-m", "local");
    const r = await doctor([...passingFlags({ roots: [`ledgerlite=${dirty}`, `queuekit=${moved}`, `nosuchrepo=${dirty}`] })], STUDY_ENV);
    expect(r.code).toBe(2);
    const l = lines(r.stdout);
    expect(l.get("root:ledgerlite")).toMatch(
      /^FAIL\s+root:ledgerlite\s+.*checkout is not clean \(1 change: \?\? notes\.txt\); commit, stash or remove them  -> fix: make .* a clean checkout of e2ff563dc35b/,
    );
    expect(l.get("root:queuekit")).toMatch(new RegExp(`^FAIL\\s+root:queuekit\\s+.*HEAD is [0-9a-f]{40}, not the pin ${PINS.queuekit}; run \`git checkout ${PINS.queuekit}\` there`));
    expect(l.get("root:nosuchrepo")).toMatch(
      /^FAIL\s+root:nosuchrepo\s+.*not a repository of the manifest  -> fix: give checkouts of the manifest's repositories only: ledgerlite, queuekit, routekit$/,
    );
    expect(l.get("doc-bridge")).toMatch(/^skip\s+doc-bridge\s+needs clean checkouts at their pins \(root:ledgerlite\)$/);
  });

  it("fails the doc-bridge check on a clean checkout without its index, naming the command that builds it", async () => {
    // A fresh clone with an index folder of its own that holds nothing yet.
    const fresh = join(work, "fresh");
    await execFileP("git", ["clone", "--quiet", demo.roots.ledgerlite!, fresh]);
    const indexEnv = { ...STUDY_ENV, STUDY_RUNNER_DOC_INDEX: join(work, "fresh-index") };
    // The launcher: the fix names the command of a person's clone (the sources through tsx).
    const r = await doctor(passingFlags({ roots: [`ledgerlite=${fresh}`] }), indexEnv, runLauncher);
    expect(r.code).toBe(2);
    const l = lines(r.stdout);
    expect(l.get("root:ledgerlite")).toMatch(/^ok\s/);
    expect(l.get("doc-bridge")).toMatch(
      /^FAIL\s+doc-bridge\s+doc-bridge preflight refused for checkout ledgerlite .*index.*-> fix: in each checkout, build the index at the pin with \S+ --import \S+ \S+\/src\/mcp\/reference-server\.ts index \(run in the checkout;/,
    );

    // The command the fix names really builds it: then the check passes.
    const fix = /build the index at the pin with (.*) \(run in the checkout;/.exec(l.get("doc-bridge")!)![1]!;
    await execFileP("sh", ["-c", fix], { cwd: fresh, env: { PATH: process.env.PATH ?? "", STUDY_RUNNER_DOC_INDEX: indexEnv.STUDY_RUNNER_DOC_INDEX } });
    const again = await doctor(passingFlags({ roots: [`ledgerlite=${fresh}`] }), indexEnv, runLauncher);
    expect(lines(again.stdout).get("doc-bridge")).toMatch(/^ok\s/);
    expect(again.code).toBe(0);
  });

  it("fails an engine that does not start", async () => {
    const r = await doctor([...passingFlags(), "--doc-bridge-command", JSON.stringify([join(work, "no-engine")])], STUDY_ENV);
    expect(r.code).toBe(2);
    expect(lines(r.stdout).get("doc-bridge")).toMatch(
      /^FAIL\s+doc-bridge\s+doc-bridge preflight refused .*the engine command exited \d+ before it answered .*no-engine.*-> fix: the engine did not start: correct --doc-bridge-command/,
    );
  });

  it("reports an engine command that exits at once as not started, with its exit and its error line, not as a missing index", async () => {
    const missing = join(work, "opt", "ak", "bin", "ak-docs.js");
    const r = await doctor([...passingFlags(), "--doc-bridge-command", JSON.stringify([process.execPath, missing, "mcp"])], STUDY_ENV);
    expect(r.code).toBe(2);
    const line = lines(r.stdout).get("doc-bridge");
    expect(line).toMatch(/the engine command exited 1 before it answered MCP's initialize; its stderr: Error: Cannot find module '.*ak-docs\.js'/);
    expect(line).toMatch(/-> fix: the engine did not start: correct --doc-bridge-command .*or leave it out to use the bundled reference engine$/);
    expect(line).not.toMatch(/build the index/);
  });
});

describe("study-runner doctor: image version, output path, budget", () => {
  it("fails an image whose claude is not the expected version", async () => {
    const r = await doctor([...passingFlags(), "--cli-version", "2.1.295"], STUDY_ENV);
    expect(r.code).toBe(2);
    expect(lines(r.stdout).get("claude-version")).toMatch(
      /^FAIL\s+claude-version\s+claude --version in study-runner\/fake-claude:2\.1\.296 prints 2\.1\.296; the run expects 2\.1\.295 \(--cli-version\)  -> fix: rebuild the image/,
    );
  });

  it("fails an output path inside a checkout, and an existing one", async () => {
    const inside = await doctor(passingFlags({ output: join(demo.roots.ledgerlite!, "ledger.json") }), STUDY_ENV);
    expect(inside.code).toBe(2);
    expect(lines(inside.stdout).get("output")).toMatch(/^FAIL\s+output\s+--output .* is inside the checkout .*root 'ledgerlite'/);
    const taken = join(work, "ledgers", "taken.json");
    await writeFile(taken, "{}");
    expect(lines((await doctor(passingFlags({ output: taken }), STUDY_ENV)).stdout).get("output")).toMatch(/^FAIL\s+output\s+.*already exists/);
  });

  it("fails a model the runner cannot price, naming the models it can, and everything else passes", async () => {
    const r = await doctor(passingFlags(), { ...STUDY_ENV, STUDY_MODEL: "claude-unpriced-9" });
    expect(r.code).toBe(2);
    const l = lines(r.stdout);
    expect(l.get("model")).toMatch(
      /^FAIL\s+model\s+STUDY_MODEL=claude-unpriced-9 has no row in the runner's price table \(CLI_PRICES\).*-> fix: set STUDY_MODEL to a model the runner can price: .*claude-haiku-5-5.*$/,
    );
    for (const [name, line] of l) if (name !== "model") expect(line, name).toMatch(/^ok\s/);
  });

  it("fails a per-attempt limit that does not fit under the cap", async () => {
    const r = await doctor([...passingFlags(), "--attempt-budget-usd", "2"], STUDY_ENV);
    expect(r.code).toBe(2);
    expect(lines(r.stdout).get("attempts")).toMatch(/^FAIL\s+attempts\s+--attempt-budget-usd 2 .*the first attempt would be refused  -> fix: lower --attempt-budget-usd/);
  });
});
