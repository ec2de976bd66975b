/**
 * The context digest of a spec is hashed as the tar streams by (src/image/context.ts): the same
 * bytes as the tar packed in memory for a build, so an image built from the packed context is
 * recognised later from the streamed digest, and nothing of a large context stays in memory.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { contextDigest, packContext, type ImageSpec } from "../../src/image/context.ts";

let work: string;
let spec: ImageSpec;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-context-"));
  // Larger than a stream's chunk, and not a multiple of the tar block, so padding is exercised.
  await writeFile(join(work, "big.bin"), Buffer.alloc(3 * 65536 + 123, 7));
  await writeFile(join(work, "small.txt"), "hello\n");
  spec = {
    tag: "study-runner-test/context:stream",
    files: [
      { path: "/opt/big.bin", mode: 0o755, source: { hostPath: join(work, "big.bin") } },
      { path: "/opt/small.txt", mode: 0o644, source: { hostPath: join(work, "small.txt") } },
      { path: "/etc/literal", mode: 0o644, source: { content: "literal\n" } },
    ],
    dirs: [{ path: "/home/agent", mode: 0o700, userOwned: true }],
    user: "1000:1000",
    env: { A: "b" },
    entrypoint: ["/opt/big.bin"],
    labels: { "study-runner.test": "stream" },
  };
});
afterAll(() => rm(work, { recursive: true, force: true }));

describe("the streamed context digest", () => {
  it("is the sha256 of the very tar a build sends", async () => {
    const packed = await packContext(spec);
    expect(await contextDigest(spec)).toBe(`sha256:${createHash("sha256").update(packed).digest("hex")}`);
    expect(await contextDigest(spec)).toBe(await contextDigest(packed));
  });

  it("changes when a host file's bytes change", async () => {
    const before = await contextDigest(spec);
    await writeFile(join(work, "big.bin"), Buffer.alloc(3 * 65536 + 123, 8));
    expect(await contextDigest(spec)).not.toBe(before);
  });
});
