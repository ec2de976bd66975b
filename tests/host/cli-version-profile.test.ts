import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { activeProfile, cachedProfilePath, profileText, sealProfile } from "../../src/profile/load.ts";
import { runCli } from "../support/cli.ts";

/**
 * `--cli-version V` of a version without a calibration profile, through the shipped launcher: each
 * run kind refuses with exit 2 naming how to measure V's profile and the pinned version, before anything is
 * probed (this tier has no Docker engine), reserved or written.
 */
let work: string;
beforeAll(async () => (work = await mkdtemp(join(tmpdir(), "sr-cli-version-"))));
afterAll(() => rm(work, { recursive: true, force: true }));

const env = () => ({ STUDY_RUNNER_CACHE: join(work, "cache"), STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" });
const REFUSAL =
  /^study-runner: Claude Code 2\.1\.999 has no calibration profile \(neither bundled nor in .*\/cache\/profiles\).*; measure Claude Code 2\.1\.999's profile with `study-runner calibrate --cli-version 2\.1\.999` \(docs\/pilot\.md, "Another Claude Code version"\), or study the pinned version with --cli-version 2\.1\.296$/m;

describe("--cli-version of a version without a calibration profile (contract R221)", () => {
  // contract: R221
  it("run --transport cli: exit 2 naming how to measure a profile, no ledger written", async () => {
    const out = join(work, "run");
    const r = await runCli(["run", "--pilot", "--approve-budget", "--transport", "cli", "--cli-version", "2.1.999", "--output", join(out, "pilot.json")], { env: env() });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(REFUSAL);
    expect(await readdir(work)).not.toContain("run");
  });

  // contract: R221
  it("sessions start: exit 2 naming how to measure a profile, no session ledger written", async () => {
    const output = join(work, "sessions.json");
    const r = await runCli(["sessions", "start", "--manifest", DEMO_MANIFEST, "--image", "study-runner/claude-code:2.1.999", "--cap-usd", "1", "--cli-version", "2.1.999", "--output", output], {
      env: env(),
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(REFUSAL);
    expect(await readdir(work)).not.toContain("sessions.json");
  });

  // contract: R225
  it("demo --real-cli --cli-version: exit 2 naming how to measure a profile, before the demo makes anything", async () => {
    const workdir = join(work, "demo");
    const r = await runCli(["demo", "--pilot", "--real-cli", "--cli-version", "2.1.999", "--workdir", workdir], { env: env() });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(REFUSAL);
    expect(await readdir(work)).not.toContain("demo");
    const fake = await runCli(["demo", "--pilot", "--cli-version", "2.1.296", "--workdir", workdir], { env: env() });
    expect(fake.code).toBe(2);
    expect(fake.stderr).toBe("study-runner: --cli-version needs --real-cli: the fake image stands in for the pinned version only; add --real-cli, or drop --cli-version\n");
  });

  // contract: R221
  it("the pin needs no calibration: its profile is bundled, so the run gets past the profile to its next check", async () => {
    const r = await runCli(["run", "--pilot", "--approve-budget", "--transport", "cli", "--output", join(work, "pin", "pilot.json")], { env: env() });
    expect(r.stderr).not.toMatch(/calibration profile/);
  });
});

describe("--cli-version of a version whose measured behaviour a run kind cannot use (contract R265)", () => {
  // contract: R265
  it("sessions start on a version whose resume reports a per-call cost: exit 2 naming why, no session ledger written", async () => {
    const { sha256: _s, ...body } = structuredClone(activeProfile());
    const profile = sealProfile({ ...body, cliVersion: "2.1.914", resume: { ...body.resume, cost: "per-call" } });
    const cache = join(work, "cache");
    await mkdir(join(cache, "profiles"), { recursive: true });
    await writeFile(cachedProfilePath("2.1.914", cache), profileText(profile));
    const output = join(work, "sessions-914.json");
    const r = await runCli(["sessions", "start", "--manifest", DEMO_MANIFEST, "--image", "study-runner/claude-code:2.1.914", "--cap-usd", "1", "--cli-version", "2.1.914", "--output", output], {
      env: env(),
    });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^study-runner: Claude Code 2\.1\.914's resumed call reports a per-call total_cost_usd \(measured by its calibration\).*nothing was reserved/m);
    expect(await readdir(work)).not.toContain("sessions-914.json");
  });
});

describe("calibrate --help", () => {
  // contract: R263
  it("names every behaviour a calibration measures into the profile, and the refusals that follow from them", async () => {
    const r = await runCli(["calibrate", "--help"]);
    expect(r.code).toBe(0);
    const help = r.stdout.replace(/\s+/g, " ");
    for (const measured of ["`claude --help`", "price table", "init event", "request shape", "`@` imports", "--restricted", "structured output", "resume in a fresh container", "429", "529"]) {
      expect(help, measured).toContain(measured);
    }
    expect(help).toContain("retry events are not where the runner's backoff reads them");
    expect(help).toMatch(/without structured output or a cumulative resume is refused later by `adjudicate` or `sessions`/);
  });
});
