import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { findClaudeBinary } from "../../src/image/specs.ts";
import { RefusalError } from "../../src/util/errors.ts";

const ELF = Buffer.concat([Buffer.from([0x7f, 0x45, 0x4c, 0x46]), Buffer.alloc(60)]);

async function nativePackage(root: string, version: string, body: Buffer = ELF, nested = false): Promise<string> {
  const dir = nested
    ? join(root, "node_modules", "@anthropic-ai", "claude-code", "node_modules", "@anthropic-ai", "claude-code-linux-x64")
    : join(root, "node_modules", "@anthropic-ai", "claude-code-linux-x64");
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "package.json"), JSON.stringify({ name: "@anthropic-ai/claude-code-linux-x64", version }));
  await writeFile(join(dir, "claude"), body, { mode: 0o755 });
  return dir;
}

const made: string[] = [];
const tmp = async (): Promise<string> => {
  const dir = await mkdtemp(join(tmpdir(), "find-claude-"));
  made.push(dir);
  return dir;
};
afterAll(async () => {
  for (const dir of made) await rm(dir, { recursive: true, force: true });
});

describe("findClaudeBinary", () => {
  it("finds the pinned native binary in a root's node_modules, also nested under the wrapper", async () => {
    const root = await tmp();
    const dir = await nativePackage(root, "2.1.296");
    expect(await findClaudeBinary({ roots: [root], cacheDir: join(root, "cache") })).toEqual({ path: join(dir, "claude"), version: "2.1.296", packageDir: dir });
    const nestedRoot = await tmp();
    const nested = await nativePackage(nestedRoot, "2.1.296", ELF, true);
    expect((await findClaudeBinary({ roots: [nestedRoot], cacheDir: join(nestedRoot, "cache") }))?.path).toBe(join(nested, "claude"));
  });

  it("finds it in the cache dir laid out by npm install --prefix <cache>/claude-code-<version>", async () => {
    const cache = await tmp();
    const dir = await nativePackage(join(cache, "claude-code-2.1.296"), "2.1.296");
    expect((await findClaudeBinary({ roots: [], cacheDir: cache }))?.path).toBe(join(dir, "claude"));
  });

  it("returns undefined when nothing is installed anywhere", async () => {
    const root = await tmp();
    expect(await findClaudeBinary({ roots: [root], cacheDir: join(root, "cache") })).toBeUndefined();
  });

  it("refuses another version or a binary that is not ELF, but takes a valid candidate found later", async () => {
    const wrong = await tmp();
    await nativePackage(wrong, "2.1.295");
    const err = await findClaudeBinary({ roots: [wrong], cacheDir: join(wrong, "cache") }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RefusalError);
    expect((err as RefusalError).message).toMatch(/2\.1\.295.*not @anthropic-ai\/claude-code-linux-x64@2\.1\.296/);

    const script = await tmp();
    await nativePackage(script, "2.1.296", Buffer.from("#!/bin/sh\n"));
    await expect(findClaudeBinary({ roots: [script], cacheDir: join(script, "cache") })).rejects.toThrow(/not an ELF/);

    const good = await tmp();
    const dir = await nativePackage(good, "2.1.296");
    expect((await findClaudeBinary({ roots: [wrong, good], cacheDir: join(good, "cache") }))?.path).toBe(join(dir, "claude"));
  });

  it("looks for the version it is asked for", async () => {
    const root = await tmp();
    const dir = await nativePackage(root, "2.1.300");
    expect((await findClaudeBinary({ version: "2.1.300", roots: [root], cacheDir: join(root, "cache") }))?.packageDir).toBe(dir);
  });
});
