import { mkdir, readFile, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { IMAGE_LABELS } from "../../src/image/specs.ts";
import { activeProfile, cachedProfilePath, profileFix, profileText, sealProfile, useProfile } from "../../src/profile/load.ts";
import { runStudy } from "../../src/study/run.ts";
import { verifyLedger } from "../../src/verify/verify.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { FakeRuntime } from "../support/fake-runtime.ts";
import { UNIT_IMAGE, unitStudyConfig, unitWorkspace } from "../support/unit-study.ts";
import { baseEvents, toText } from "./transcript-fixtures.ts";

/** The study's preflight picks the profile of --cli-version and holds the image's binary to it (contract R221). */
const ws = unitWorkspace("sr-unit-run-profile-");
let cache: string;
let loginDir: string;
const before = process.env.STUDY_RUNNER_CACHE;
const bundled = activeProfile();

beforeAll(async () => {
  cache = join(ws.work, "cache");
  process.env.STUDY_RUNNER_CACHE = cache;
  loginDir = join(ws.work, "login");
  await writeTestLogin(loginDir);
});
afterAll(() => {
  if (before === undefined) delete process.env.STUDY_RUNNER_CACHE;
  else process.env.STUDY_RUNNER_CACHE = before;
});
afterEach(() => useProfile(undefined));

/** An engine with one image: `claude --version` prints `version`; its labels say a real Claude Code image with binary `sha`. */
function realImageRuntime(version: string, sha: string): FakeRuntime {
  const runtime = new FakeRuntime({
    program: async (proc) => {
      if (proc.spec.cmd.includes("--version")) {
        proc.stdout.write(`${version} (Claude Code)\n`);
        return 0;
      }
      proc.stdout.write(toText(baseEvents("repository")));
      return 0;
    },
  });
  runtime.addImage(UNIT_IMAGE, { [IMAGE_LABELS.claudeSha256]: sha, [IMAGE_LABELS.kind]: "claude-code" });
  return runtime;
}

const io = { stdout: () => {}, stderr: process.stderr };

describe("a study run uses the profile of its CLI version (contract R221)", () => {
  // contract: R221
  it("refuses a real image whose binary is not the one its version's profile was measured on, before any ledger exists", async () => {
    const config = unitStudyConfig({ ...ws, loginDir, name: "other-binary", attempts: 1 });
    const other = "c".repeat(64);
    await expect(runStudy(config, { runtime: realImageRuntime(bundled.cliVersion, other), ...io })).rejects.toThrow(
      `image ${UNIT_IMAGE} holds a claude binary with sha256 ${other}, but the calibration profile ${join(PROJECT_ROOT, "src", "profile", `claude-code-${bundled.cliVersion}.json`)} (bundled) was measured on the binary with sha256 ${bundled.binarySha256}: it is the profile of another binary; ${profileFix(bundled.cliVersion)}`,
    );
    expect(existsSync(config.output)).toBe(false);
  });

  // contract: R221
  it("refuses a version without a profile before any ledger exists, naming how to measure its profile", async () => {
    const config = unitStudyConfig({ ...ws, loginDir, name: "no-profile", attempts: 1, overrides: { expectedCliVersion: "2.1.998" } });
    await expect(runStudy(config, { runtime: realImageRuntime("2.1.998", "d".repeat(64)), ...io })).rejects.toThrow(
      /no calibration profile.*measure Claude Code 2\.1\.998's profile .*--cli-version 2\.1\.296$/,
    );
    expect(existsSync(config.output)).toBe(false);
  });

  // contract: R221
  it("a version calibrated on this machine: its profile's prices go into the ledger and its sha256 into the header", async () => {
    const { sha256: _s, ...body } = structuredClone(bundled);
    body.cliVersion = "2.1.901";
    body.binarySha256 = "e".repeat(64);
    body.prices.models["claude-calibrated-2"] = { tier1: { input: 2, output: 9, cacheRead: 0.2, cacheWrite5m: 2.5, cacheWrite1h: 4 }, tier2: null, tier1MaxPromptTokens: null };
    const profile = sealProfile(body);
    await mkdir(join(cache, "profiles"), { recursive: true });
    await writeFile(cachedProfilePath("2.1.901"), profileText(profile));
    const config = unitStudyConfig({ ...ws, loginDir, name: "calibrated", attempts: 1, overrides: { expectedCliVersion: "2.1.901" } });
    await runStudy(config, { runtime: realImageRuntime("2.1.901", "e".repeat(64)), ...io });
    const ledger = JSON.parse(await readFile(config.output, "utf8"));
    expect(ledger.profileSha256).toBe(profile.sha256);
    expect(ledger.expectedCliVersion).toBe("2.1.901");
    expect(ledger.prices["claude-calibrated-2"].tier1.output).toBe(9);
    expect(bundled.prices.models["claude-calibrated-2"]).toBeUndefined();
    calibratedRun = { ledger: config.output, profile, body };
  });
});

let calibratedRun: { ledger: string; profile: ReturnType<typeof sealProfile>; body: Parameters<typeof sealProfile>[0] } | undefined;

describe("ledger verify uses the profile the run used (contract R221)", () => {
  // contract: R221
  it("verifies with the profile found for the ledger's version, or the same one given with --profile", async () => {
    const { ledger, profile } = calibratedRun!;
    const found = await verifyLedger(ledger);
    expect(found.observations).toBe(1);
    expect(activeProfile().sha256).toBe(profile.sha256);
    useProfile(undefined);
    const copy = join(ws.work, "copy-of-the-profile.json");
    await writeFile(copy, profileText(profile));
    expect((await verifyLedger(ledger, { profile: copy })).differences).toEqual(found.differences);
  });

  // contract: R221
  it("refuses a ledger made with one profile and verified with another, naming both hashes", async () => {
    const { ledger, profile, body } = calibratedRun!;
    const other = sealProfile({ ...body, measuredOn: "2026-12-31" });
    const file = join(ws.work, "another-profile.json");
    await writeFile(file, profileText(other));
    await expect(verifyLedger(ledger, { profile: file })).rejects.toThrow(
      `the ledger was run with the calibration profile sha256 ${profile.sha256}, but ${file} (given) has sha256 ${other.sha256}: a ledger is verified only with the profile it was run with; pass that profile with --profile FILE`,
    );
  });
});
