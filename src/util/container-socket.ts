import { chmod, chown, mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import type { Server } from "node:net";
import { join } from "node:path";

/** The user the images run as (src/image/specs.ts IMAGE_LAYOUT). */
export const CONTAINER_UID = 1000;
export const CONTAINER_GID = 1000;

export interface ContainerSocketOptions {
  /** Owner of the socket when the runner is root (default 1000:1000, the container user). */
  containerUid?: number;
  containerGid?: number;
}

/**
 * A unix socket the runner serves and only the container user can reach, in a fresh folder
 * that is bind-mounted into one attempt's container (the doc-bridge bridge, the egress proxy).
 * Root hands the folder (0700) and the socket (0600) over with chown; a runner that is the
 * container uid already owns them; anything else would need a world-accessible socket, so
 * `assertSocketOwner` refuses. `socketDir` must not exist: a fresh folder per attempt.
 */
export function assertSocketOwner(what: string, opts: ContainerSocketOptions = {}): void {
  const containerUid = opts.containerUid ?? CONTAINER_UID;
  const uid = process.getuid?.();
  if (uid !== 0 && uid !== containerUid) {
    throw new Error(`${what}: the runner must run as root or as uid ${containerUid} (the container user) to share the socket; it runs as uid ${uid}`);
  }
}

/** Where a unit's service (the gateway, the doc-bridge, the egress proxy) makes its socket folder inside the folder it was given. */
export const serviceSocketDir = (parent: string): string => join(parent, "socket");

/** Creates `socketDir` (it must not exist), or a fresh folder `<tmp>/<fallbackPrefix>XXXXXX`; mode 0700. */
export async function makeSocketDir(socketDir: string | undefined, fallbackPrefix: string): Promise<string> {
  const dir = socketDir ?? (await mkdtemp(join(tmpdir(), fallbackPrefix)));
  if (socketDir) await mkdir(socketDir, { mode: 0o700 }); // fails if it exists: a fresh folder per attempt
  await chmod(dir, 0o700);
  return dir;
}

/** The longest path a unix socket may have, its terminating NUL left out: 107 bytes on Linux, 103 on macOS and the BSDs. */
export const MAX_SOCKET_PATH_BYTES = process.platform === "linux" ? 107 : 103;

/** Why `path` cannot be a unix socket's path, or null. */
export function socketPathProblem(path: string): string | null {
  const bytes = Buffer.byteLength(path);
  if (bytes <= MAX_SOCKET_PATH_BYTES) return null;
  return `the socket path ${path} is ${bytes} bytes, over the ${MAX_SOCKET_PATH_BYTES} bytes a unix socket's path may have; set TMPDIR to a shorter folder (the runner makes its sockets' folders there)`;
}

/**
 * Listens on `<socketDir>/<name>` and hands the socket and its folder to the container user. A path
 * too long for a unix socket is refused before listening: Node would bind a truncated path instead.
 * On any failure the server is closed again.
 */
export async function listenForContainer(server: Server, socketDir: string, name: string, opts: ContainerSocketOptions = {}): Promise<string> {
  const socketPath = join(socketDir, name);
  const tooLong = socketPathProblem(socketPath);
  if (tooLong) throw new Error(tooLong);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socketPath, () => {
      server.off("error", reject);
      resolve();
    });
  });
  try {
    await chmod(socketPath, 0o600);
    if (process.getuid?.() === 0) {
      const uid = opts.containerUid ?? CONTAINER_UID;
      const gid = opts.containerGid ?? CONTAINER_GID;
      await chown(socketPath, uid, gid);
      await chown(socketDir, uid, gid);
    }
  } catch (err) {
    server.close();
    throw err;
  }
  return socketPath;
}
