/**
 * The real image of the pinned Claude Code binary for the tests that run the real CLI: the
 * binary is installed from the npm registry (the exact pinned version) into the cache when
 * missing, and the image is built offline, cached by its context digest. Test files run in
 * parallel workers, so install and build are serialised by a lock in the cache folder: a second
 * worker finds the binary installed and the image carrying the same digest.
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { lock } from "proper-lockfile";
import { buildImage } from "../../src/image/build.ts";
import { ensureClaudeBinary } from "../../src/image/install.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { claudeCodeImageSpec, defaultCacheDir } from "../../src/image/specs.ts";
import type { ContainerRuntime } from "../../src/sandbox/port.ts";

let imagePromise: Promise<{ tag: string; id: string }> | undefined;

export function realClaudeImage(runtime: ContainerRuntime): Promise<{ tag: string; id: string }> {
  imagePromise ??= (async () => {
    const cache = defaultCacheDir();
    await mkdir(cache, { recursive: true });
    const release = await lock(join(cache, "real-claude-image"), {
      realpath: false,
      stale: 60_000,
      retries: { retries: 600, minTimeout: 500, maxTimeout: 1_000 },
    });
    try {
      const binary = await ensureClaudeBinary({ version: CLAUDE_CODE_VERSION });
      const built = await buildImage(runtime, await claudeCodeImageSpec({ claudeBinary: binary.path }));
      return { tag: built.tag, id: built.id };
    } finally {
      await release();
    }
  })();
  return imagePromise;
}
