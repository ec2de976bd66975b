/**
 * The suite's temporary folder, read by vitest.config.ts when it loads: TMPDIR for vitest's own
 * process, its globalSetups, its workers and every process they start (the runner, git, the
 * doc-bridge engines; the containers' bind mounts come from it too).
 *
 * On Linux with a tmpfs /dev/shm that has room, /dev/shm itself (sticky and world-writable, as
 * /tmp): the suite makes and removes a great many files (git fixtures, exports, ledgers, attempt
 * folders), and on a disk each new inode costs the allocator a search that grows with what was
 * recently deleted (ext4's `recently_deleted`: about 5% of the host tier's CPU on this project's CI
 * machine, more the longer the machine has run; docs/performance.md, "The suite's files on a
 * tmpfs"). The folder itself, not one made in it: its path is as short as /tmp's (the runner's
 * socket paths under a test's TMPDIR are near the 107-byte limit, contract R288), and fixed, so the
 * second engine (tests/support/second-engine.ts) hides the same folder from run to run. Elsewhere
 * TMPDIR is left as it is.
 */
import { statfsSync } from "node:fs";

/** Where a tmpfs is looked for. */
export const SHM = "/dev/shm";
/** statfs(2)'s f_type of a tmpfs. */
export const TMPFS_MAGIC = 0x01021994;
/** Free room below which the suite keeps to the disk (a container's 64 MiB /dev/shm, a small machine). */
export const MIN_FREE_BYTES = 4 * 1024 ** 3;

/** The folder to make TMPDIR, or undefined to leave TMPDIR as it is (no tmpfs with room at `shm`). */
export function suiteTmpdir(shm = SHM): string | undefined {
  try {
    const fs = statfsSync(shm);
    return fs.type === TMPFS_MAGIC && fs.bavail * fs.bsize >= MIN_FREE_BYTES ? shm : undefined;
  } catch {
    return undefined;
  }
}
