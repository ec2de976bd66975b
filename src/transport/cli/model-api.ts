import { lstat, readdir } from "node:fs/promises";
import { basename, dirname, isAbsolute } from "node:path";
import { RefusalError } from "../../util/errors.ts";

/**
 * Preflight of `StudyConfig.modelApi`: the Messages API reached through a unix socket whose
 * folder is bind-mounted into every attempt container (src/transport/cli/spec.ts). The agent can
 * read that folder, so it must hold the socket and nothing else; a missing socket would only
 * show up as an API error inside the first attempt, after its reservation.
 */
export async function assertModelApiSocket(socketPath: string): Promise<void> {
  if (!isAbsolute(socketPath)) throw new RefusalError(`the model API socket ${socketPath} must be an absolute path`);
  const info = await lstat(socketPath).catch(() => undefined);
  if (!info?.isSocket()) throw new RefusalError(`the model API socket ${socketPath} does not exist or is not a unix socket; start the API first`);
  const entries = await readdir(dirname(socketPath));
  const others = entries.filter((name) => name !== basename(socketPath));
  if (others.length > 0) {
    throw new RefusalError(
      `the folder of the model API socket ${socketPath} also holds ${others.slice(0, 5).join(", ")}${others.length > 5 ? ", …" : ""}; ` +
        "it is mounted into every attempt container, so give the socket a folder of its own",
    );
  }
}
