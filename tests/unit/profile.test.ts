import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkFlags, runnerCommandLines } from "../../src/calibrate/flags.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { cliPrices, pricesFor } from "../../src/cost/prices.ts";
import { headerProblem } from "../../src/gateway/request-shape.ts";
import {
  activeProfile,
  bundledProfilePath,
  cachedProfilePath,
  findProfile,
  parseProfile,
  profileFix,
  profileSha256,
  profileText,
  readProfileFile,
  requireProfile,
  requireProfileFor,
  sealProfile,
  useProfile,
} from "../../src/profile/load.ts";
import { ProfileSchema } from "../../src/profile/schema.ts";
import { canonicalJson } from "../../src/util/canonical-json.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

const HELP_2_1_296 = join(PROJECT_ROOT, "tests", "fixtures", "claude-2.1.296-help.txt");
let cache: string;

beforeAll(async () => {
  cache = await mkdtemp(join(tmpdir(), "sr-profile-"));
});
afterAll(async () => {
  await rm(cache, { recursive: true, force: true });
});

/** A profile of `version` calibrated "on this machine": the bundled data under another version, sealed. */
async function calibratedProfile(version: string, change: (p: ReturnType<typeof activeProfile>) => void = () => {}): Promise<string> {
  const { sha256: _s, ...body } = structuredClone(activeProfile());
  const changed = { ...body, cliVersion: version };
  change(changed as ReturnType<typeof activeProfile>);
  const path = cachedProfilePath(version, cache);
  await mkdir(join(cache, "profiles"), { recursive: true });
  await writeFile(path, profileText(sealProfile(changed)));
  return path;
}

/** The flags of one command line (before `--`), in order. */
function flagsOf(argv: readonly string[]): string[] {
  const end = argv.indexOf("--");
  return argv.slice(0, end < 0 ? argv.length : end).filter((a) => a.startsWith("-"));
}

/** Every flag the runner passes, sorted. */
function runnerFlags(): string[] {
  return [...new Set(Object.values(runnerCommandLines()).flatMap(flagsOf))].sort();
}

describe("the calibration profile (contract R220)", () => {
  // contract: R220
  it("the pin's profile is bundled with the package and every guard reads it: prices, request shapes, init events", async () => {
    const path = bundledProfilePath(CLAUDE_CODE_VERSION);
    expect(path.startsWith(join(PROJECT_ROOT, "src"))).toBe(true);
    const pkg = JSON.parse(await readFile(join(PROJECT_ROOT, "package.json"), "utf8")) as { files: string[] };
    expect(pkg.files).toContain("src/");
    const profile = readProfileFile(path, CLAUDE_CODE_VERSION);
    expect(ProfileSchema.parse(profile)).toEqual(profile);
    expect(profile.cliVersion).toBe(CLAUDE_CODE_VERSION);
    expect(profile.binarySha256).toMatch(/^[0-9a-f]{64}$/);
    expect(profile.sha256).toBe(profileSha256(profile));
    expect(activeProfile()).toEqual(profile);
    expect(Object.keys(cliPrices()).sort()).toEqual(Object.keys(profile.prices.models).sort());
    expect(Object.keys(profile.initEvents.kinds).sort()).toEqual(["adjudicator", "attempt-mcp", "attempt-repository", "session-resume", "session-start"]);
    expect(profile.requestShapes.headers).toContain("anthropic-beta");
  });

  // contract: R220
  it("its sha256 is over the canonical body without the sha256 field, so key order and white space do not change it", () => {
    const profile = activeProfile();
    const { sha256: _s, ...body } = profile;
    expect(profileSha256(profile)).toBe(createHash("sha256").update(canonicalJson(body)).digest("hex"));
    const reordered = JSON.stringify(Object.fromEntries(Object.entries(profile).reverse()));
    expect(parseProfile(reordered, "reordered.json").sha256).toBe(profile.sha256);
  });

  // contract: R220
  it("refuses a profile edited by hand (one extra allowed header), naming both hashes and the command that measures it again", () => {
    const edited = structuredClone(activeProfile());
    edited.requestShapes.headers.push("x-smuggled");
    const actual = profileSha256(edited);
    expect(() => parseProfile(JSON.stringify(edited), "/tmp/edited.json")).toThrow(
      `the calibration profile /tmp/edited.json records sha256 ${edited.sha256} but its content hashes to ${actual}: it was changed after it was measured, so its guards cannot be trusted; ${profileFix(CLAUDE_CODE_VERSION)}`,
    );
    // Sealed, the same header would pass the gateway: the seal is what keeps it out.
    expect(headerProblem(edited.requestShapes, ["x-smuggled", "1"])).toBeNull();
    expect(headerProblem(activeProfile().requestShapes, ["x-smuggled", "1"])).toMatch(/x-smuggled/);
  });

  // contract: R220
  it("refuses a file that is not a profile, naming the field", () => {
    const { flags: _f, ...noFlags } = activeProfile();
    expect(() => parseProfile(JSON.stringify(noFlags), "/tmp/p.json")).toThrow(/calibration profile \/tmp\/p\.json is not a calibration profile .*flags/s);
  });
});

describe("the profile of a run's version (contract R221)", () => {
  // contract: R221
  it("a version without a profile is refused, naming how to measure one and the version a run can use", () => {
    expect(findProfile("2.1.999", { cacheDir: cache })).toBeNull();
    expect(() => requireProfile("2.1.999", { cacheDir: cache })).toThrow(
      /Claude Code 2\.1\.999 has no calibration profile .*measure Claude Code 2\.1\.999's profile with `study-runner calibrate --cli-version 2\.1\.999` .*--cli-version 2\.1\.296$/,
    );
  });

  // contract: R221
  it("a profile calibrated on this machine is found in the cache and, when active, its prices are the ones the runner uses", async () => {
    await calibratedProfile("2.1.900", (p) => {
      p.prices.models["claude-calibrated-1"] = { tier1: { input: 1, output: 2, cacheRead: 0.1, cacheWrite5m: 1.25, cacheWrite1h: 2 }, tier2: null, tier1MaxPromptTokens: null };
    });
    const found = findProfile("2.1.900", { cacheDir: cache })!;
    expect(found.source).toBe("calibrated on this machine");
    expect(findProfile(CLAUDE_CODE_VERSION, { cacheDir: cache })!.source).toBe("bundled");
    expect(pricesFor("claude-calibrated-1")).toBeUndefined();
    const before = useProfile(found);
    try {
      expect(pricesFor("claude-calibrated-1")?.tier1.output).toBe(2);
    } finally {
      useProfile(before);
    }
    expect(pricesFor("claude-calibrated-1")).toBeUndefined();
  });

  // contract: R221
  it("a profile in the cache under another version's name is refused", async () => {
    const path = await calibratedProfile("2.1.901");
    await writeFile(cachedProfilePath("2.1.902", cache), await readFile(path));
    expect(() => findProfile("2.1.902", { cacheDir: cache })).toThrow(/is of Claude Code 2\.1\.901, not 2\.1\.902; measure Claude Code 2\.1\.902's profile/);
  });
});

describe("the runner's flags in a version's --help (contract R222)", () => {
  // contract: R222
  it("every flag the runner passes is in 2.1.296's help as the bundled profile records it", async () => {
    const { flags, problems } = checkFlags(await readFile(HELP_2_1_296, "utf8"));
    expect(problems).toEqual([]);
    expect(Object.keys(flags)).toEqual(runnerFlags());
    expect(flags).toEqual(activeProfile().flags);
    expect(flags["--resume"]).toEqual({ takesValue: false, optionalValue: true, variadic: false });
  });

  // contract: R222
  it("a help without a flag the runner needs, or that takes a value where the runner passes none, is a problem naming the flag", async () => {
    const help = await readFile(HELP_2_1_296, "utf8");
    const gone = help.replace(/^ {2}--permission-prompts .*$/m, "");
    expect(checkFlags(gone).problems).toContain("--permission-prompts (attempt-repository) is not in claude --help: the runner needs it");
    const valued = help.replace(/^ {2}--strict-mcp-config/m, "  --strict-mcp-config <mode>");
    expect(checkFlags(valued).problems).toContain("--strict-mcp-config (attempt-repository) takes a value in claude --help, and the runner passes none");
  });
});

describe("what a run kind needs of its version's measured behaviour (contract R265)", () => {
  // contract: R265
  it("the adjudicator is refused on a version whose result carries no structured_output, sessions on one whose resume is not cumulative or lost the history", async () => {
    expect(requireProfileFor(CLAUDE_CODE_VERSION, "adjudicator", { cacheDir: cache }).source).toBe("bundled");
    expect(requireProfileFor(CLAUDE_CODE_VERSION, "sessions", { cacheDir: cache }).source).toBe("bundled");
    await calibratedProfile("2.1.910", (p) => (p.structuredOutput.resultField = false));
    expect(() => requireProfileFor("2.1.910", "adjudicator", { cacheDir: cache })).toThrow(
      /^with --json-schema, Claude Code 2\.1\.910's result carries no structured_output \(measured by its calibration\), and the adjudicator reads its verdict there; nothing was reserved\. Study a version whose calibration shows it \(.*claude-code-2\.1\.910\.json, calibrated on this machine\), e\.g\. the pinned 2\.1\.296$/,
    );
    expect(requireProfileFor("2.1.910", "sessions", { cacheDir: cache }).profile.cliVersion).toBe("2.1.910");
    await calibratedProfile("2.1.911", (p) => (p.resume.cost = "per-call"));
    expect(() => requireProfileFor("2.1.911", "sessions", { cacheDir: cache })).toThrow(
      /^Claude Code 2\.1\.911's resumed call reports a per-call total_cost_usd \(measured by its calibration\), and a session reads each call's cost as the growth of a cumulative one; nothing was reserved/,
    );
    await calibratedProfile("2.1.912", (p) => (p.resume.historySent = false));
    expect(() => requireProfileFor("2.1.912", "sessions", { cacheDir: cache })).toThrow(
      /^Claude Code 2\.1\.912's --resume in a fresh container did not send the first call's turns when it was calibrated/,
    );
    expect(() => requireProfileFor("2.1.913", "sessions", { cacheDir: cache })).toThrow(/has no calibration profile/);
  });
});
