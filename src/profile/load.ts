import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { canonicalJson } from "../util/canonical-json.ts";
import { RefusalError } from "../util/errors.ts";
import { parseJsonAs } from "../util/json-file.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { defaultCacheDir } from "../util/cache-dir.ts";
import { CLAUDE_CODE_VERSION } from "./pin.ts";
import { ProfileSchema, type Profile } from "./schema.ts";

/**
 * Finding, reading and checking calibration profiles (contract R220, R221). A profile is found in
 * the package (bundled: src/profile/claude-code-V.json, shipped with src/) or in the runner's
 * cache folder (calibrated on this machine: `profiles/claude-code-V.json`).
 * A profile whose own sha256 does not match its content is refused, whoever edited it.
 */

export type ProfileSource = "bundled" | "calibrated on this machine" | "given" | "being calibrated";

export interface FoundProfile {
  profile: Profile;
  source: ProfileSource;
  path: string;
}

/** The profile's sha256: over the canonical JSON (keys sorted, no whitespace) of its body without `sha256`. */
export function profileSha256(body: Omit<Profile, "sha256"> & { sha256?: string }): string {
  const { sha256: _own, ...rest } = body;
  return createHash("sha256").update(canonicalJson(rest)).digest("hex");
}

/** The body with its sha256 set. */
export function sealProfile(body: Omit<Profile, "sha256">): Profile {
  return { ...body, sha256: profileSha256(body) };
}

/** The file text a profile is written as: two-space JSON, keys in the schema's order, a final newline. */
export function profileText(profile: Profile): string {
  const ordered = Object.fromEntries(Object.keys(ProfileSchema.shape).flatMap((k) => (k in profile ? [[k, profile[k as keyof Profile]]] : [])));
  return `${JSON.stringify(ordered, null, 2)}\n`;
}

/** The fix a missing or refused profile names: the command that measures it, or the pinned version a run can use. */
export const profileFix = (version: string) =>
  `measure Claude Code ${version}'s profile with \`study-runner calibrate --cli-version ${version}\` (docs/pilot.md, "Another Claude Code version"), or study the pinned version with --cli-version ${CLAUDE_CODE_VERSION}`;

/** Where the package bundles the profile of `version`. */
export function bundledProfilePath(version: string): string {
  return resolve(PROJECT_ROOT, "src", "profile", `claude-code-${version}.json`);
}

/** Where `calibrate` writes the profile of `version` on this machine. */
export function cachedProfilePath(version: string, cacheDir: string = defaultCacheDir()): string {
  return join(cacheDir, "profiles", `claude-code-${version}.json`);
}

/**
 * The profile in `text`, checked: valid JSON of the schema, its sha256 that of its content, and
 * (when `version` is given) of that CLI version. Otherwise a RefusalError naming the file and the fix.
 */
export function parseProfile(text: string, path: string, version?: string): Profile {
  const fix = profileFix(version ?? "V");
  let profile: Profile;
  try {
    profile = parseJsonAs(text, ProfileSchema, {
      name: `the calibration profile ${path}`,
      readFix: fix,
      mismatch: `is not a calibration profile (${fix})`,
      written: "by-hand",
    });
  } catch (err) {
    throw new RefusalError((err as Error).message);
  }
  const actual = profileSha256(profile);
  if (actual !== profile.sha256) {
    throw new RefusalError(
      `the calibration profile ${path} records sha256 ${profile.sha256} but its content hashes to ${actual}: it was changed after it was measured, so its guards cannot be trusted; ${profileFix(profile.cliVersion)}`,
    );
  }
  if (version !== undefined && profile.cliVersion !== version) {
    throw new RefusalError(`the calibration profile ${path} is of Claude Code ${profile.cliVersion}, not ${version}; ${profileFix(version)}`);
  }
  return profile;
}

/**
 * The profiles already checked, by path and version, with the text they were checked from: a run
 * finds its profile at the command's start and again in the preflight, and parsing and hashing
 * the same text twice would only repeat the work. A file whose text changed is checked again.
 */
const checked = new Map<string, { text: string; profile: Profile }>();

/** The profile file at `path`, checked (parseProfile). */
export function readProfileFile(path: string, version?: string): Profile {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new RefusalError(`cannot read the calibration profile ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}; pass the profile's path, or ${profileFix(version ?? "V")}`);
  }
  const key = `${path}\u0000${version ?? ""}`;
  const seen = checked.get(key);
  if (seen?.text === text) return seen.profile;
  const profile = parseProfile(text, path, version);
  checked.set(key, { text, profile });
  return profile;
}

/**
 * The profile of `version`: the bundled one when the package has it, else the one calibrated on
 * this machine; null when neither exists. A file that exists but is refused throws.
 */
export function findProfile(version: string, opts: { cacheDir?: string } = {}): FoundProfile | null {
  if (draft?.profile.cliVersion === version) return draft;
  const bundled = bundledProfilePath(version);
  if (existsSync(bundled)) return { profile: readProfileFile(bundled, version), source: "bundled", path: bundled };
  const cached = cachedProfilePath(version, opts.cacheDir);
  if (existsSync(cached)) return { profile: readProfileFile(cached, version), source: "calibrated on this machine", path: cached };
  return null;
}

/** The profile of `version`, or a RefusalError (exit 2) naming how to measure one (contract R221). */
export function requireProfile(version: string, opts: { cacheDir?: string } = {}): FoundProfile {
  const found = findProfile(version, opts);
  if (found) return found;
  throw new RefusalError(
    `Claude Code ${version} has no calibration profile (neither bundled nor in ${join(opts.cacheDir ?? defaultCacheDir(), "profiles")}): its init events, request shapes and prices are unmeasured, so no run of it can be checked; ${profileFix(version)}`,
  );
}

let active: FoundProfile | undefined;
let draft: FoundProfile | undefined;

/**
 * The profile a calibration is measuring (contract R223): while it is set, this process finds it
 * for its version before the bundled and the cached one, so the calibration's runs go through the
 * runner's own guards with what has been measured so far. Only `calibrate` sets it, and clears it
 * (undefined) when it ends; nothing of it reaches a file until the profile is whole and sealed.
 */
export function useCalibrationDraft(profile: Profile | undefined): void {
  draft = profile ? { profile, source: "being calibrated", path: `(the profile of Claude Code ${profile.cliVersion} being calibrated)` } : undefined;
  if (active?.source === "being calibrated") active = draft;
}

/**
 * The profile this process's guards compare with: the one `useProfile` set (the run's
 * `--cli-version`), else the bundled profile of the pin. One process runs one CLI version.
 */
export function activeProfile(): Profile {
  active ??= requireProfile(CLAUDE_CODE_VERSION);
  return active.profile;
}

/** Makes `found` the profile every guard of this process reads; returns the one it replaces (tests restore it). */
export function useProfile(found: FoundProfile | undefined): FoundProfile | undefined {
  const before = active;
  active = found;
  return before;
}

/** What a run kind needs of a version's measured behaviour (contract R265). */
export type ProfileUse = "adjudicator" | "sessions";

/**
 * Why the profile's version cannot serve `use`, or null (contract R265): the adjudicator reads its
 * verdict from the result's `structured_output`; a session reads a call's cost as the growth of a
 * cumulative `total_cost_usd` and relies on a resume in a fresh container carrying the history.
 */
export function profileUseProblem(profile: Profile, use: ProfileUse): string | null {
  if (use === "adjudicator") {
    const so = profile.structuredOutput;
    if (!so.resultField)
      return `with --json-schema, Claude Code ${profile.cliVersion}'s result carries no structured_output (measured by its calibration), and the adjudicator reads its verdict there`;
    return null;
  }
  const r = profile.resume;
  if (!r.completed || !r.historySent)
    return `Claude Code ${profile.cliVersion}'s --resume in a fresh container did not ${r.completed ? "send the first call's turns" : "complete"} when it was calibrated, and a session resumes that way`;
  if (r.cost !== "cumulative")
    return `Claude Code ${profile.cliVersion}'s resumed call reports a ${r.cost} total_cost_usd (measured by its calibration), and a session reads each call's cost as the growth of a cumulative one`;
  return null;
}

/** The profile of `version` (requireProfile), refused with exit 2 when its measured behaviour cannot serve `use` (contract R265). */
export function requireProfileFor(version: string, use: ProfileUse, opts: { cacheDir?: string } = {}): FoundProfile {
  const found = requireProfile(version, opts);
  const problem = profileUseProblem(found.profile, use);
  if (problem) {
    throw new RefusalError(`${problem}; nothing was reserved. Study a version whose calibration shows it (${found.path}, ${found.source}), e.g. the pinned ${CLAUDE_CODE_VERSION}`);
  }
  return found;
}
