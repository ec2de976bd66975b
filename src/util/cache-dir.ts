import { homedir } from "node:os";
import { join } from "node:path";

/**
 * The runner's cache folder: `$STUDY_RUNNER_CACHE`, else `$XDG_CACHE_HOME/study-runner`, else
 * `~/.cache/study-runner` (an empty variable counts as unset). The installed CLI, the calibration
 * profiles and the doc-bridge indexes live there. Its own module, so that the commands that read
 * these variables are the ones that import it (every such command declares them, contract R213).
 */
export function defaultCacheDir(env: Readonly<Record<string, string | undefined>> = process.env): string {
  return env.STUDY_RUNNER_CACHE || join(env.XDG_CACHE_HOME || join(env.HOME || homedir(), ".cache"), "study-runner");
}
