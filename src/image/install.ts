import { runChild } from "../process/child.ts";
import { join } from "node:path";
import { CLAUDE_CODE_VERSION } from "../claude/version.ts";
import { defaultCacheDir, findClaudeBinary, type FoundClaudeBinary } from "./specs.ts";
import { RefusalError } from "../util/errors.ts";

export const NATIVE_PACKAGE = "@anthropic-ai/claude-code-linux-x64";

/**
 * Installs the pinned native binary from the npm registry into the cache folder that
 * `findClaudeBinary()` searches (exact version, no package.json of ours touched, no
 * install scripts), unless it is already there.
 */
export async function ensureClaudeBinary(opts: { version?: string; cacheDir?: string } = {}): Promise<FoundClaudeBinary> {
  const version = opts.version ?? CLAUDE_CODE_VERSION;
  const cacheDir = opts.cacheDir ?? defaultCacheDir();
  const found = await findClaudeBinary({ version, cacheDir });
  if (found) return found;
  const prefix = join(cacheDir, `claude-code-${version}`);
  try {
    await runChild("npm", ["install", "--no-save", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", prefix, `${NATIVE_PACKAGE}@${version}`], {
      // The binary is about 257 MB: allow a slow registry mirror.
      timeoutMs: 20 * 60_000,
      maxOutputBytes: 16 * 1024 * 1024,
    });
  } catch (err) {
    throw new RefusalError(`npm install ${NATIVE_PACKAGE}@${version} into ${prefix} failed: ${(err as Error).message.split("\n")[0]}`);
  }
  const installed = await findClaudeBinary({ version, cacheDir, roots: [] });
  if (!installed) throw new RefusalError(`npm installed ${NATIVE_PACKAGE}@${version} but no binary was found under ${prefix}`);
  return installed;
}
