/**
 * The suite's temporary folder (tests/support/suite-tmpdir.ts): where /dev/shm is a tmpfs with
 * room, /dev/shm itself, which vitest.config.ts makes every worker's TMPDIR; elsewhere TMPDIR is
 * left as it is.
 */
import { statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { MIN_FREE_BYTES, SHM, suiteTmpdir, TMPFS_MAGIC } from "../support/suite-tmpdir.ts";

describe("the suite's temporary folder", () => {
  it("is /dev/shm, and every worker's TMPDIR, where /dev/shm is a tmpfs with room", () => {
    const shm = statfsSync(SHM);
    expect(shm.type, "this machine's /dev/shm is no tmpfs").toBe(TMPFS_MAGIC);
    expect(shm.bavail * shm.bsize).toBeGreaterThanOrEqual(MIN_FREE_BYTES);
    expect(suiteTmpdir()).toBe(SHM);
    expect(tmpdir()).toBe(SHM);
  });

  it("leaves TMPDIR alone where the folder is no tmpfs, or is missing", () => {
    expect(statfsSync(PROJECT_ROOT).type).not.toBe(TMPFS_MAGIC);
    expect(suiteTmpdir(PROJECT_ROOT)).toBeUndefined();
    expect(suiteTmpdir(join(PROJECT_ROOT, "no-such-folder"))).toBeUndefined();
  });
});
