import { writeFile } from "node:fs/promises";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { bundledProfilePath, readProfileFile, sealProfile, profileText } from "../../src/profile/load.ts";
import type { Profile } from "../../src/profile/schema.ts";
import { runnerVersion } from "../../src/util/paths.ts";

/**
 * Replaces one measured part of the pinned version's bundled calibration profile
 * (src/profile/claude-code-<pin>.json) and seals it again (its sha256 over the new content):
 * what the measure-*.ts scripts do with --write. Returns the path written.
 */
export async function writeBundledProfilePart(part: Partial<Pick<Profile, "initEvents" | "requestShapes" | "prices" | "flags" | "measuredOn">>): Promise<string> {
  const path = bundledProfilePath(CLAUDE_CODE_VERSION);
  const { sha256: _old, ...body } = readProfileFile(path, CLAUDE_CODE_VERSION);
  await writeFile(path, profileText(sealProfile({ ...body, ...part, runnerVersion: runnerVersion() })));
  return path;
}
