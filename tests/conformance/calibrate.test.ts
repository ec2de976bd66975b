/**
 * `study-runner calibrate` on a Claude Code version other than the pin, then the demos on it: the
 * path a researcher takes to study another version (docs/pilot.md, "Another Claude Code version").
 * 2.1.332 is named here (the registry's latest when the command was built), so the run stays
 * reproducible. The profile goes into a cache folder of this test's own (STUDY_RUNNER_CACHE); the
 * binary's install folder of the shared cache is linked into it, so nothing is downloaded twice.
 * The calibration itself runs the adjudicator (its structured output) and the sessions (start and
 * resume) through the gateway; the demos run the shipped commands on the profile it wrote, the
 * adjudicator's structured output runs again through the gateway on it, and the import and retry
 * probes run again against it (the drift test of 2.1.332's behaviour).
 */
import { mkdir, mkdtemp, readdir, readFile, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fileSha256 } from "../../src/image/context.ts";
import { ensureClaudeBinary } from "../../src/image/install.ts";
import { defaultCacheDir } from "../../src/image/specs.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { activeProfile, cachedProfilePath, readProfileFile } from "../../src/profile/load.ts";
import type { Profile } from "../../src/profile/schema.ts";
import { readSessionLedger } from "../../src/session/store.ts";
import { measureProbes } from "../../src/calibrate/behaviour.ts";
import { adjudicatorScenario, pilotScenario, type ScenarioContext } from "../../src/calibrate/scenarios.ts";
import { prepareCorpus } from "../../src/calibrate/env.ts";
import { useProfile } from "../../src/profile/load.ts";
import { runCli, type CliResult } from "../support/cli.ts";
import { runtime } from "./support.ts";

const VERSION = "2.1.332";
let work = "";
let cache = "";
let binarySha256 = "";
let calibrated: CliResult;
let profile: Profile;
const seconds: Record<string, number> = {};

async function timed<T>(name: string, f: () => Promise<T>): Promise<T> {
  const started = Date.now();
  try {
    return await f();
  } finally {
    seconds[name] = Math.round((Date.now() - started) / 1000);
  }
}

beforeAll(async () => {
  // Into the shared cache once (as `image build --install --version` would), then linked: the calibration finds it installed.
  const binary = await ensureClaudeBinary({ version: VERSION });
  binarySha256 = await fileSha256(binary.path);
  work = await mkdtemp(join(tmpdir(), "sr-conf-calibrate-"));
  cache = join(work, "cache");
  await mkdir(cache);
  await symlink(join(defaultCacheDir(), `claude-code-${VERSION}`), join(cache, `claude-code-${VERSION}`));
  calibrated = await timed("calibrate", () => runCli(["calibrate", "--cli-version", VERSION, "--quiet"], { env: { STUDY_RUNNER_CACHE: cache }, timeoutMs: 1_500_000 }));
  if (calibrated.code === 0) profile = readProfileFile(cachedProfilePath(VERSION, cache), VERSION);
}, 1_600_000);

afterAll(async () => {
  console.log(`calibrate conformance wall times (s): ${JSON.stringify(seconds)}`);
  if (work) await rm(work, { recursive: true, force: true });
});

describe(`study-runner calibrate --cli-version ${VERSION}`, () => {
  // contract: R223, R224
  it(`calibrates ${VERSION} on its own binary into the cache folder, sealed, with its tarball integrity and binary sha256`, async () => {
    expect(calibrated.code, calibrated.stderr).toBe(0);
    expect(calibrated.stderr).toBe("");
    expect(await readdir(join(cache, "profiles"))).toEqual([`claude-code-${VERSION}.json`]);
    expect(profile.cliVersion).toBe(VERSION);
    expect(profile.binarySha256).toBe(binarySha256);
    const lock = JSON.parse(await readFile(join(cache, `claude-code-${VERSION}`, "node_modules", ".package-lock.json"), "utf8"));
    expect(profile.npmIntegrity).toBe(lock.packages["node_modules/@anthropic-ai/claude-code-linux-x64"].integrity);
    // Every flag the runner passes is still there, read as the pin's help reads it.
    expect(profile.flags).toEqual(activeProfile().flags);
    for (const kind of Object.values(profile.initEvents.kinds)) expect(kind.fields.claude_code_version).toBe(VERSION);
    expect(profile.prices.models["claude-haiku-5-5"]).toEqual(activeProfile().prices.models["claude-haiku-5-5"]);

    const out = calibrated.stdout.split("\n");
    expect(out[0]).toMatch(
      new RegExp(
        `^Claude Code ${VERSION.replace(/\./g, "\\.")} calibrated in \\d+ s \\(install \\d+ s, image \\d+ s, help \\d+ s, prices \\d+ s, direct \\d+ s, gateway \\d+ s, probes \\d+ s\\): ${cachedProfilePath(VERSION, cache).replace(/[.+]/g, "\\$&")}$`,
      ),
    );
    expect(out[1]).toBe(`profile sha256 ${profile.sha256}; binary sha256 ${binarySha256}; npm integrity ${profile.npmIntegrity}`);
    expect(out[2]).toMatch(/^difference against the bundled profile of 2\.1\.296 \(\d+ lines\):$/);
    // The measured difference 2.1.296 → 2.1.332 (docs/conformance.md, "Moving the pin"), in part.
    expect(out).toContain('  init attempt-repository: claude_code_version: "2.1.296" → "2.1.332"');
    expect(out).toContain('  init session-resume: original_cwd added: "/workspace"');
    expect(out).toContain("  anthropic-beta values gone: mid-conversation-system-2026-04-07, prompt-caching-scope-2026-01-05");
    expect(out).toContain("  priced models added: claude-3-5-haiku-latest, claude-3-5-sonnet-20240620, claude-3-5-sonnet-latest, claude-3-7-sonnet-latest, claude-fable-5-2, claude-mythos-5-2");
    expect(out.filter((l) => l.startsWith("  flags"))).toEqual([]);
    // The behaviours measured beside them (contract R263): imports, --restricted, structured output and resume as the pin's; the 429's delay is longer than its retry-after.
    expect([profile.imports, profile.structuredOutput, profile.resume]).toEqual([activeProfile().imports, activeProfile().structuredOutput, activeProfile().resume]);
    expect(profile.imports.restricted.claudeMd).toBe(false);
    expect(profile.resume.cost).toBe("cumulative");
    expect(out.filter((l) => /^ {2}(imports|structured output|resume|retries) /.test(l))).toEqual(['  retries retryAfter: "exact" → "longer"']);
    expect(out.at(-2)).toBe(`a run uses it with --cli-version ${VERSION}`);
  });

  // contract: R225
  it(`runs the demo pilot on ${VERSION} through the gateway with that profile`, async () => {
    const demo = join(work, "demo");
    const r = await timed("demo --pilot", () =>
      runCli(["demo", "--pilot", "--real-cli", "--cli-version", VERSION, "--quiet", "--workdir", demo], { env: { STUDY_RUNNER_CACHE: cache }, timeoutMs: 600_000 }),
    );
    expect(r.code, r.stderr).toBe(0);
    const file = (await readdir(join(demo, "ledgers"))).find((f) => /^run-.*\.json$/.test(f) && !f.endsWith(".adjudication.json"))!;
    const ledger = await readLedger(join(demo, "ledgers", file));
    expect([ledger.cliVersion, ledger.expectedCliVersion, ledger.image?.ref, ledger.image?.binarySha256, ledger.profileSha256]).toEqual([
      VERSION,
      VERSION,
      `study-runner/claude-code:${VERSION}`,
      binarySha256,
      profile.sha256,
    ]);
    expect(ledger.credentials).toBe("gateway");
    expect(ledger.observations.map((o) => [o.arm, o.status, o.gateway?.requests.every((q) => q.refused === null && q.complete)])).toEqual([
      ["repository", "completed", true],
      ["mcp", "completed", true],
    ]);
  }, 700_000);

  // contract: R225
  it(`runs the demo sessions on ${VERSION}: start, answer, resume in a fresh container, through the gateway`, async () => {
    const demo = join(work, "sessions");
    const r = await timed("demo --sessions", () =>
      runCli(["demo", "--sessions", "--real-cli", "--cli-version", VERSION, "--quiet", "--workdir", demo], { env: { STUDY_RUNNER_CACHE: cache }, timeoutMs: 600_000 }),
    );
    expect(r.code, r.stderr).toBe(0);
    const file = (await readdir(join(demo, "ledgers"))).find((f) => f.endsWith(".json"))!;
    const ledger = await readSessionLedger(join(demo, "ledgers", file));
    expect([ledger.expectedCliVersion, ledger.image]).toEqual([VERSION, expect.stringMatching(/^sha256:/)]);
    expect(ledger.sessions.map((s) => s.calls.map((c) => `${c.mode}:${c.status}`))).toEqual([
      ["start:completed", "resume:completed"],
      ["start:completed", "resume:completed"],
    ]);
  }, 700_000);

  // contract: R263, R265
  it(`runs the adjudicator's structured output on ${VERSION} through the gateway, as its profile records it`, async () => {
    const before = process.env.STUDY_RUNNER_CACHE;
    process.env.STUDY_RUNNER_CACHE = cache;
    const active = useProfile(undefined);
    const corpus = await prepareCorpus("calibrate-adjudicator");
    try {
      const image = (await runtime.inspectImage(`study-runner/claude-code:${VERSION}`))!.id;
      const ctx: ScenarioContext = { runtime, image, cliVersion: VERSION, corpus };
      const adjudicator = await timed("structured output", async () => {
        const p = await pilotScenario(ctx, "gateway");
        expect(p.completed, p.detail).toBe(true);
        return adjudicatorScenario(ctx, "gateway", p.run);
      });
      expect(adjudicator.statuses).toEqual(["completed", "completed"]);
      // Every grader request reached the scripted API through the gateway and was answered with a StructuredOutput call.
      expect(adjudicator.requests.length).toBeGreaterThan(0);
      expect(adjudicator.requests.every((r) => r.answer.kind === "tool-calls" && r.auth.bearer && !r.auth.apiKey)).toBe(true);
      expect(adjudicator.structuredOutput).toEqual(profile.structuredOutput);
      expect(adjudicator.structuredOutput).toEqual({ initTool: true, resultField: true, equalsToolInput: true, resultTextIsJson: true });
    } finally {
      useProfile(active);
      if (before === undefined) delete process.env.STUDY_RUNNER_CACHE;
      else process.env.STUDY_RUNNER_CACHE = before;
      await corpus.cleanup();
    }
  }, 600_000);

  // contract: R263, R264
  it(`probes ${VERSION}'s imports and retries again: the binary still does what its profile records`, async () => {
    const corpus = await prepareCorpus("calibrate-probes");
    try {
      const image = (await runtime.inspectImage(`study-runner/claude-code:${VERSION}`))!.id;
      const probed = await timed("probes again", () => measureProbes({ runtime, image, loginDir: corpus.loginDir, work: corpus.work }));
      expect(probed.problems).toEqual([]);
      expect(probed.imports).toEqual(profile.imports);
      expect(probed.retries).toEqual(profile.retries);
    } finally {
      await corpus.cleanup();
    }
  }, 300_000);
});
