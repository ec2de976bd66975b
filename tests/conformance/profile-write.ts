import { writeFile } from "node:fs/promises";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { fileSha256 } from "../../src/image/context.ts";
import { ensureClaudeBinary } from "../../src/image/install.ts";
import { bundledProfilePath, profileText, readProfileFile, sealProfile } from "../../src/profile/load.ts";
import type { Profile } from "../../src/profile/schema.ts";
import { runnerVersion } from "../../src/util/paths.ts";

/**
 * Replaces one measured part of the pinned version's bundled calibration profile
 * (src/profile/claude-code-<pin>.json) and seals it again (its sha256 over the new content):
 * what the measure-*.ts scripts do with --write. The file's version, binary sha256 (of the pin's
 * installed binary), runner version and date are set to the measurement's, so a profile copied
 * from the previous pin becomes the new pin's part by part (docs/conformance.md, "Moving the pin").
 * Returns the path written.
 */
export async function writeBundledProfilePart(part: Partial<Pick<Profile, "initEvents" | "requestShapes" | "prices" | "flags">>): Promise<string> {
  const path = bundledProfilePath(CLAUDE_CODE_VERSION);
  const { sha256: _old, ...body } = readProfileFile(path);
  const binary = await ensureClaudeBinary({ version: CLAUDE_CODE_VERSION });
  const measured = {
    cliVersion: CLAUDE_CODE_VERSION,
    binarySha256: await fileSha256(binary.path),
    runnerVersion: runnerVersion(),
    measuredOn: new Date().toISOString().slice(0, 10),
  };
  await writeFile(path, profileText(sealProfile({ ...body, ...part, ...measured })));
  return path;
}
