import { commandEnvironment } from "../../src/cli/config/flags.ts";
import { cliPrices } from "../../src/cost/prices.ts";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import {
  attemptsWithinCap,
  checkClaudeVersion,
  checkDocker,
  checkGit,
  checkImage,
  checkLogin,
  checkNode,
  checkOutput,
  checkSettings,
  checkTransport,
  type Check,
  type FindBinary,
} from "../../src/doctor/checks.ts";
import { formatReport, runDoctor, type DoctorInput } from "../../src/doctor/doctor.ts";
import { findClaudeBinary, IMAGE_LABELS } from "../../src/image/specs.ts";
import { FakeRuntime, type FakeProgram } from "../support/fake-runtime.ts";
import type { ContainerRuntime } from "../../src/sandbox/port.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { activeProfile, cachedProfilePath, profileText, sealProfile } from "../../src/profile/load.ts";

const CLI_PRICES = cliPrices();

const ACCESS = "test-ACCESS-TOKEN-NEVER-PRINTED";
const REFRESH = "test-REFRESH-TOKEN-NEVER-PRINTED";
const SHA = "b".repeat(64);
const FAKE_TAG = "study-runner/fake-claude:2.1.296";
const REAL_TAG = "study-runner/claude-code:2.1.296";
const NOW = Date.parse("2026-12-01T00:00:00Z");

let work: string;
beforeAll(async () => (work = await mkdtemp(join(tmpdir(), "sr-doctor-unit-"))));
afterAll(() => rm(work, { recursive: true, force: true }));

const prints =
  (text: string): FakeProgram =>
  ({ stdout }) => {
    stdout.write(text);
    return 0;
  };

function runtimeWith(version = "2.1.296", labels: Record<string, string> = { [IMAGE_LABELS.claudeSha256]: SHA, [IMAGE_LABELS.kind]: "fake-claude" }) {
  const runtime = new FakeRuntime({ program: prints(`${version} (Claude Code)\n`) });
  runtime.addImage(FAKE_TAG, labels);
  return runtime;
}

/** The real findClaudeBinary, pointed at a folder of our own instead of the user's cache. */
function findIn(cacheDir: string): FindBinary {
  return (opts = {}) => findClaudeBinary({ ...opts, cacheDir, roots: [] });
}

async function cachedBinary(cacheDir: string, version = "2.1.296"): Promise<string> {
  const dir = join(cacheDir, `claude-code-${version}`, "node_modules", "@anthropic-ai", "claude-code-linux-x64");
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "package.json"), JSON.stringify({ name: "@anthropic-ai/claude-code-linux-x64", version }));
  await writeFile(join(dir, "claude"), Buffer.concat([Buffer.from([0x7f, 0x45, 0x4c, 0x46]), Buffer.alloc(60)]), { mode: 0o755 });
  return join(dir, "claude");
}

async function login(dir: string, body: string): Promise<string> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, ".credentials.json"), body, { mode: 0o600 });
  return dir;
}
const credentials = (expiresAt: number) => JSON.stringify({ claudeAiOauth: { accessToken: ACCESS, refreshToken: REFRESH, expiresAt, scopes: ["user:inference"], subscriptionType: "pro" } });

function expectPass(c: Check, name: string) {
  expect(c, c.detail).toMatchObject({ name, ok: true, skipped: false, fix: null });
}
function expectFail(c: Check, name: string, fix: RegExp) {
  expect(c.name).toBe(name);
  expect(c.ok).toBe(false);
  expect(c.skipped).toBe(false);
  expect(c.fix).toMatch(fix);
}

/** The doctor's variables as its entry parses them. */
const doctorEnv = (source: Record<string, string>) => commandEnvironment("doctor", source);

describe("node and git", () => {
  it("passes on Node 20 or newer and fails older with the fix", () => {
    expectPass(checkNode("20.20.2"), "node");
    expectPass(checkNode("22.1.0"), "node");
    const old = checkNode("18.19.0");
    expectFail(old, "node", /install Node 20 or newer/);
    expect(old.detail).toContain("18.19.0");
  });

  it("passes when git runs and fails when it is not on PATH", async () => {
    const ok = await checkGit();
    expectPass(ok, "git");
    expect(ok.detail).toMatch(/^git version /);
    expectFail(await checkGit(join(work, "no-such-git")), "git", /install git/);
  });
});

describe("docker", () => {
  it("names the engine it reached and whether DOCKER_HOST chose it", async () => {
    const runtime = new FakeRuntime({ program: () => 0, info: { serverVersion: "27.1.0", endpoint: "unix:///run/user/1000/docker.sock" } });
    const byDefault = await checkDocker(() => runtime, undefined);
    expectPass(byDefault.check, "docker");
    expect(byDefault.check.detail).toBe("Docker 27.1.0 (API 1.41) at unix:///run/user/1000/docker.sock, the default socket");
    expect(byDefault.runtime).toBe(runtime);
    const byEnv = await checkDocker(() => runtime, "unix:///run/user/1000/docker.sock");
    expect(byEnv.check.detail).toMatch(/, from DOCKER_HOST$/);
  });

  // contract: R244
  it("names the engine's OS and architecture when the engine says them", async () => {
    const runtime = new FakeRuntime({ program: () => 0, info: { serverVersion: "27.1.0", endpoint: "tcp+tls://127.0.0.1:2376", os: "linux", arch: "arm64" } });
    const checked = await checkDocker(() => runtime, "tcp://127.0.0.1:2376");
    expect(checked.check.detail).toBe("Docker 27.1.0 (API 1.41) on linux/arm64 at tcp+tls://127.0.0.1:2376, from DOCKER_HOST");
  });

  it("fails with the fix when the engine does not answer, cannot be built or hangs", async () => {
    const refusing = { ping: () => Promise.reject(new Error("connect ECONNREFUSED /var/run/docker.sock")) } as unknown as ContainerRuntime;
    const down = await checkDocker(() => refusing, undefined);
    expectFail(down.check, "docker", /start the Docker engine/);
    expect(down.check.detail).toMatch(/the default socket .*ECONNREFUSED/);
    expect(down.runtime).toBeUndefined();

    const badHost = await checkDocker(() => {
      throw new Error("unsupported protocol");
    }, "bogus://x");
    expectFail(badHost.check, "docker", /correct DOCKER_HOST/);
    expect(badHost.check.detail).toContain("DOCKER_HOST=bogus://x");

    const hanging = { ping: () => new Promise(() => {}) } as unknown as ContainerRuntime;
    const slow = await checkDocker(() => hanging, "tcp://10.255.255.1:2376", 50);
    expectFail(slow.check, "docker", /DOCKER_HOST/);
    expect(slow.check.detail).toMatch(/no answer within 50 ms/);
  });
});

describe("image", () => {
  it("passes when the image is in the engine", async () => {
    const c = await checkImage(runtimeWith(), FAKE_TAG, "2.1.296");
    expectPass(c, "image");
    expect(c.detail).toMatch(/^study-runner\/fake-claude:2\.1\.296 is present \(sha256:[0-9a-f]{12}, fake-claude\)$/);
  });

  it("fails with the build that makes it: the fake, the offline build of a binary at hand, or the install", async () => {
    const empty = new FakeRuntime({ program: () => 0 });
    const nothing = join(work, "empty-cache");
    expectFail(await checkImage(empty, FAKE_TAG, "2.1.296", findIn(nothing)), "image", /^study-runner image build --fake \(/);

    const install = await checkImage(empty, REAL_TAG, "2.1.296", findIn(nothing));
    expectFail(install, "image", /^study-runner image build --install \(downloads @anthropic-ai\/claude-code-linux-x64@2\.1\.296, about 257 MB/);
    expect(install.fix).toMatch(/--claude-binary PATH/);
    expect(install.fix).toMatch(/docker load/);
    expect(install.fix).toMatch(/docker\/claude-code\/Dockerfile/);
    expect(install.detail).toBe(`${REAL_TAG} is not in the Docker engine`);

    const cache = join(work, "cache");
    const binary = await cachedBinary(cache);
    const offline = await checkImage(empty, REAL_TAG, "2.1.296", findIn(cache));
    expectFail(offline, "image", new RegExp(`^study-runner image build \\(offline: it uses the binary at ${binary}\\)$`));

    // Another tag than the one `image build` makes: build, then point --image at it.
    const other = await checkImage(empty, "registry.example/claude:pinned", "2.1.296", findIn(cache));
    expect(other.fix).toMatch(/; then pass --image study-runner\/claude-code:2\.1\.296$/);
    // Another pinned version: the build is told the version.
    const v = await checkImage(empty, "study-runner/claude-code:2.1.297", "2.1.297", findIn(nothing));
    expect(v.fix).toMatch(/^study-runner image build --install --version 2\.1\.297 /);
  });

  it("fails on a wrong binary in the cache, naming why it cannot be used", async () => {
    const cache = join(work, "wrong-cache");
    await cachedBinary(cache, "2.1.296");
    await writeFile(join(cache, "claude-code-2.1.296", "node_modules", "@anthropic-ai", "claude-code-linux-x64", "claude"), "#!/bin/sh\n");
    const c = await checkImage(new FakeRuntime({ program: () => 0 }), REAL_TAG, "2.1.296", findIn(cache));
    expectFail(c, "image", /not an ELF executable; remove what is there, then run study-runner image build --install/);
  });
});

describe("claude-version", () => {
  const labels = { "study-runner.run": "doctor-test", "study-runner.attempt": "probe" };
  it("passes when the image's claude --version is the pin, probing in a throwaway labelled container", async () => {
    const runtime = runtimeWith("2.1.296");
    const c = await checkClaudeVersion(runtime, FAKE_TAG, "2.1.296", labels);
    expectPass(c, "claude-version");
    expect(c.detail).toContain("prints 2.1.296 (Claude Code)");
    expect(runtime.created).toHaveLength(1);
    expect(runtime.created[0]).toMatchObject({ cmd: ["--version"], networkMode: "none", labels });
    expect(await runtime.listByLabel({ "study-runner.run": "doctor-test" })).toEqual([]);
  });

  // contract: R221
  it("says where the version's calibration profile comes from: bundled for the pin, calibrated on this machine for another, never pinned", async () => {
    const pin = await checkClaudeVersion(runtimeWith("2.1.296"), FAKE_TAG, "2.1.296", labels);
    expect(pin.detail).toMatch(/prints 2\.1\.296 \(Claude Code\), the pinned version, its calibration profile bundled \(sha256 [0-9a-f]{12}…\)/);
    const cache = await mkdtemp(join(tmpdir(), "sr-doctor-profile-"));
    const before = process.env.STUDY_RUNNER_CACHE;
    process.env.STUDY_RUNNER_CACHE = cache;
    try {
      const none = await checkClaudeVersion(runtimeWith("2.1.300"), FAKE_TAG, "2.1.300", labels);
      expectFail(none, "claude-version", /^measure Claude Code 2\.1\.300's profile with `study-runner calibrate --cli-version 2\.1\.300` .*--cli-version 2\.1\.296$/);
      expect(none.detail).toMatch(/^Claude Code 2\.1\.300 has no calibration profile/);
      const { sha256: _s, ...body } = activeProfile();
      await mkdir(join(cache, "profiles"));
      await writeFile(cachedProfilePath("2.1.300"), profileText(sealProfile({ ...body, cliVersion: "2.1.300" })));
      const calibrated = await checkClaudeVersion(runtimeWith("2.1.300"), FAKE_TAG, "2.1.300", labels);
      expectPass(calibrated, "claude-version");
      expect(calibrated.detail).not.toContain("pinned");
      expect(calibrated.detail).toContain(`the version --cli-version asks for, not the project's pin ${CLAUDE_CODE_VERSION}, its calibration profile calibrated on this machine`);
    } finally {
      if (before === undefined) delete process.env.STUDY_RUNNER_CACHE;
      else process.env.STUDY_RUNNER_CACHE = before;
      await rm(cache, { recursive: true, force: true });
    }
  });

  it("fails on another version, and on an image whose binary cannot be identified", async () => {
    const other = await checkClaudeVersion(runtimeWith("2.1.295"), FAKE_TAG, "2.1.296", labels);
    expectFail(other, "claude-version", /rebuild the image .*--cli-version only when the protocol moves the pin/);
    expect(other.detail).toBe(`claude --version in ${FAKE_TAG} prints 2.1.295; the run expects 2.1.296 (--cli-version)`);
    const unlabelled = await checkClaudeVersion(runtimeWith("2.1.296", {}), FAKE_TAG, "2.1.296", labels);
    expectFail(unlabelled, "claude-version", /rebuild the image/);
    expect(unlabelled.detail).toMatch(/claude-sha256/);
  });
});

describe("login", () => {
  it("passes on a parseable login that expires in the future, showing facts and never the token", async () => {
    const dir = await login(join(work, "login-ok"), credentials(NOW + 3 * 24 * 3_600_000));
    const c = await checkLogin({ configDir: dir, env: {}, now: NOW });
    expectPass(c, "login");
    expect(c.detail).toBe(`${join(dir, ".credentials.json")} (from --claude-config-dir): OAuth login valid until 2026-12-04T00:00:00.000Z (3 days from now), with a refresh token, pro subscription`);
    const viaEnv = await checkLogin({ env: { CLAUDE_CONFIG_DIR: dir }, now: NOW });
    expect(viaEnv.detail).toContain("(from CLAUDE_CONFIG_DIR)");
    const viaHome = await checkLogin({ env: {}, homeDir: join(work, "home-with-login"), now: NOW });
    expect(viaHome.detail).toContain(join(work, "home-with-login", ".claude", ".credentials.json"));
    expect(viaHome.detail).toContain("(the folder comes from ~/.claude)");
  });

  it("fails on a missing, unparseable or expired login, with the fix and without the token", async () => {
    const missing = await checkLogin({ configDir: join(work, "no-login"), env: {}, now: NOW });
    expectFail(missing, "login", /run `claude` on this machine and log in.*--claude-config-dir DIR or CLAUDE_CONFIG_DIR=DIR/);
    expect(missing.detail).toMatch(/^no Claude login at .*no-login\/\.credentials\.json \(ENOENT\) \(the folder comes from --claude-config-dir\)$/);

    const broken = await checkLogin({ configDir: await login(join(work, "login-broken"), `{"claudeAiOauth":{"accessToken":"${ACCESS}"`), env: {}, now: NOW });
    expectFail(broken, "login", /log in/);
    expect(broken.detail).toMatch(/is not valid JSON/);

    const expired = await checkLogin({ configDir: await login(join(work, "login-expired"), credentials(NOW - 60_000)), env: {}, now: NOW });
    expectFail(expired, "login", /log in/);
    expect(expired.detail).toMatch(/expired at 2026-11-30T23:59:00\.000Z/);

    for (const c of [missing, broken, expired]) {
      expect(JSON.stringify(c)).not.toContain("TOKEN-NEVER-PRINTED");
      // The problem and its fix are apart: the fix is not repeated in the detail.
      expect(c.detail).not.toContain("log in");
    }
  });
});

describe("output", () => {
  it("passes on a new file in an existing folder outside the checkouts and the project", async () => {
    const c = await checkOutput(join(work, "ledger.json"), new Map(), "/work/main");
    expectPass(c, "output");
    expect(c.detail).toContain(join(work, "ledger.json"));
  });

  it("fails when missing, existing, in a missing folder, inside a checkout or inside the project", async () => {
    expectFail(await checkOutput(undefined, new Map(), "/work/main"), "output", /pass --output with a new file/);
    await writeFile(join(work, "taken.json"), "{}");
    const taken = await checkOutput(join(work, "taken.json"), new Map(), "/work/main");
    expectFail(taken, "output", /choose a new file name/);
    expect(taken.detail).toMatch(/already exists/);
    expect((await checkOutput(join(work, "nope", "l.json"), new Map(), "/work/main")).detail).toMatch(/does not exist/);
    const checkout = join(work, "checkout");
    await mkdir(checkout);
    expect((await checkOutput(join(checkout, "l.json"), new Map([["ledgerlite", checkout]]), "/work/main")).detail).toMatch(/inside the checkout .*root 'ledgerlite'/);
    expect((await checkOutput(join(work, "l.json"), new Map(), work)).detail).toMatch(/inside the project/);
  });
});

describe("transport and settings", () => {
  // contract: R196
  it("passes the cli transport; http passes only with a key and both upper prices, never showing the key", () => {
    expectPass(checkTransport("cli", doctorEnv({})), "transport");
    // Which transport was checked, and how to check the other (contract R196).
    expectFail(checkTransport("http", doctorEnv({})), "transport", /check the other transport with doctor --transport cli/);
    expect(checkTransport("http", doctorEnv({})).detail).toMatch(/^http \(the Messages API, the default --transport; this checked it\)/);
    expect(checkTransport("cli", doctorEnv({})).detail).toMatch(/doctor --transport http checks the other transport$/);
    const key = "test-key-not-real-0123456789";
    const noPrices = checkTransport("http", doctorEnv({ ANTHROPIC_API_KEY: key }));
    expectFail(noPrices, "transport", /upper prices/);
    expect(JSON.stringify(noPrices)).not.toContain(key);
    const ok = checkTransport("http", doctorEnv({ ANTHROPIC_API_KEY: key, STUDY_INPUT_PRICE_USD_PER_MTOK: "1", STUDY_OUTPUT_PRICE_USD_PER_MTOK: "5" }));
    expectPass(ok, "transport");
    expect(JSON.stringify(ok)).not.toContain(key);
  });

  it("passes the model, the cap and the attempts when they are set, and counts what the cap holds", () => {
    const checks = checkSettings({ flags: {}, env: doctorEnv({ STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" }), mode: "pilot", planned: 2 });
    expect(checks.map((c) => c.name)).toEqual(["model", "budget", "attempts"]);
    for (const c of checks) expect(c.ok, c.detail).toBe(true);
    expect(checks[0]!.detail).toMatch(/^STUDY_MODEL=claude-haiku-5-5/);
    expect(checks[1]!.detail).toMatch(/^STUDY_BUDGET_USD=1: /);
    expect(checks[2]!.detail).toBe("--attempt-budget-usd 0.1 (reserved per attempt, passed as --max-budget-usd): the cap holds 10 attempts even if each is charged its full limit; the pilot plans 2");
    const full = checkSettings({ flags: { attemptBudgetUsd: "0.3" }, env: doctorEnv({ STUDY_MODEL: "m", STUDY_BUDGET_USD: "1" }), mode: "full", planned: 36 });
    expect(full[2]!.ok).toBe(true);
    expect(full[2]!.detail).toMatch(/the cap holds 3 attempts .*the full study plans 36; the run ends blocked when the next limit no longer fits/);
  });

  // contract: R215
  it("fails each missing or invalid setting with its fix, and skips the count without a cap", () => {
    const [model, budget, attempts] = checkSettings({ flags: {}, env: doctorEnv({}), mode: "pilot", planned: 2 });
    expectFail(model!, "model", /^export the model decided in the protocol, e.g. STUDY_MODEL=claude-haiku-5-5$/);
    expect(model!.detail).toBe("STUDY_MODEL is not set");
    expectFail(budget!, "budget", /^export the approved cumulative cap in USD/);
    expect(attempts).toMatchObject({ name: "attempts", ok: false, skipped: true });

    const [, badCap, badLimit] = checkSettings({ flags: { attemptBudgetUsd: "ten cents" }, env: doctorEnv({ STUDY_MODEL: "m", STUDY_BUDGET_USD: "-1" }), mode: "pilot", planned: 2 });
    expectFail(badCap!, "budget", /STUDY_BUDGET_USD=/);
    expect(badCap!.detail).toMatch(/STUDY_BUDGET_USD must be a positive decimal number/);
    expectFail(badLimit!, "attempts", /--attempt-budget-usd/);

    const [, , tooBig] = checkSettings({ flags: { attemptBudgetUsd: "0.1" }, env: doctorEnv({ STUDY_MODEL: "m", STUDY_BUDGET_USD: "0.05" }), mode: "pilot", planned: 2 });
    expectFail(tooBig!, "attempts", /lower --attempt-budget-usd, or have a larger cap approved/);
    expect(tooBig!.detail).toMatch(/the first attempt would be refused/);
  });

  it("fails a model without a row in the price table for the cli transport, naming the priced ones", () => {
    const [model] = checkSettings({ flags: {}, env: doctorEnv({ STUDY_MODEL: "claude-unpriced-9", STUDY_BUDGET_USD: "1" }), mode: "pilot", planned: 2 });
    expectFail(model!, "model", new RegExp(`^set STUDY_MODEL to a model the runner can price: ${Object.keys(CLI_PRICES).sort().join(", ")}$`));
    expect(model!.detail).toMatch(/^STUDY_MODEL=claude-unpriced-9 has no row in the runner's price table/);
    // A key named like an Object prototype member is not a price row.
    expect(checkSettings({ flags: {}, env: doctorEnv({ STUDY_MODEL: "constructor", STUDY_BUDGET_USD: "1" }), mode: "pilot", planned: 2 })[0]!.ok).toBe(false);
    // The http transport prices with the protocol's upper prices, so any model can be priced there.
    expect(checkSettings({ flags: {}, env: doctorEnv({ STUDY_MODEL: "claude-unpriced-9", STUDY_BUDGET_USD: "1" }), mode: "pilot", planned: 2, transport: "http" })[0]!.ok).toBe(true);
  });

  it("counts attempts with the budget's own reservation rule", () => {
    expect(attemptsWithinCap(1, 0.1)).toBe(10);
    expect(attemptsWithinCap(1, 0.3)).toBe(3);
    expect(attemptsWithinCap(0.05, 0.1)).toBe(0);
    // Reservations are rounded down to 6 decimals, as --max-budget-usd is.
    expect(attemptsWithinCap(0.000003, 0.0000019)).toBe(3);
  });
});

describe("runDoctor", () => {
  const base = (over: Partial<DoctorInput> = {}): DoctorInput => ({
    manifest: DEMO_MANIFEST,
    mode: "pilot",
    transport: "cli",
    roots: new Map(),
    image: FAKE_TAG,
    expectedCliVersion: "2.1.296",
    claudeConfigDir: join(work, "no-login"),
    ...over,
  });

  it("skips what depends on a failed check and fails overall", async () => {
    const down = { ping: () => Promise.reject(new Error("ECONNREFUSED")) } as unknown as ContainerRuntime;
    const report = await runDoctor(base(), { connect: () => down, env: doctorEnv({}), now: NOW, findBinary: findIn(join(work, "empty-cache")) });
    const byName = Object.fromEntries(report.checks.map((c) => [c.name, c]));
    expect(report.ok).toBe(false);
    expect(byName.docker!.ok).toBe(false);
    expect(byName.image).toMatchObject({ skipped: true, detail: "needs the Docker engine" });
    expect(byName["claude-version"]).toMatchObject({ skipped: true });
    expect(byName["engine-files"]).toMatchObject({ skipped: true, detail: "needs the Docker engine" });
    expect(byName["root:ledgerlite"]).toMatchObject({ ok: false, skipped: false });
    expect(byName["doc-bridge"]).toMatchObject({ skipped: true });
    expect(report.checks.map((c) => c.name)).toEqual([
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
    expect(byName["model-api"]).toMatchObject({ skipped: true, detail: "needs the image" });

    const missingImage = await runDoctor(base({ image: "study-runner/fake-claude:0.0.0-none" }), { connect: () => runtimeWith(), env: doctorEnv({}), now: NOW });
    const image = missingImage.checks.find((c) => c.name === "image")!;
    expect(image.ok).toBe(false);
    expect(missingImage.checks.find((c) => c.name === "claude-version")).toMatchObject({ skipped: true, detail: "needs the image" });
  });

  it("reports a manifest it cannot load and skips the checkouts", async () => {
    const report = await runDoctor(base({ manifest: join(work, "none.json") }), { connect: () => runtimeWith(), env: doctorEnv({}), now: NOW });
    const byName = Object.fromEntries(report.checks.map((c) => [c.name, c]));
    expect(byName.manifest!.ok).toBe(false);
    expect(byName.manifest!.fix).toMatch(/--manifest/);
    expect(byName.roots).toMatchObject({ skipped: true });
    expect(report.attempts).toBeNull();
  });

  it("prints one line per check with its state, the fix on failed lines only, then the verdict", async () => {
    const report = await runDoctor(base(), { connect: () => runtimeWith(), env: doctorEnv({}), now: NOW });
    const lines = formatReport(report).trimEnd().split("\n");
    expect(lines).toHaveLength(report.checks.length + 1);
    report.checks.forEach((c, i) => {
      const line = lines[i]!;
      expect(line.startsWith(c.ok ? "ok    " : c.skipped ? "skip  " : "FAIL  ")).toBe(true);
      expect(line).toContain(c.name);
      expect(line.includes("-> fix: ")).toBe(!c.ok && !c.skipped);
    });
    const failed = report.checks.filter((c) => !c.ok && !c.skipped).length;
    const skipped = report.checks.filter((c) => c.skipped).map((c) => c.name);
    expect(skipped).toEqual(["doc-bridge", "attempts"]);
    expect(lines.at(-1)).toBe(`${failed} checks failed, 2 skipped: the pilot (--transport cli) would be refused`);
  });
});
