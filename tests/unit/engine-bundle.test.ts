import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chmod, copyFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { engineBundle, engineProvenance, REFERENCE_SERVER } from "../../src/mcp/bundle-hash.ts";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";

let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-bundle-"));
  for (const dir of ["a/bin", "b/bin", "checkout1", "checkout2"]) await mkdir(join(work, dir), { recursive: true });
  for (const dir of ["a", "b"]) {
    await writeFile(join(work, dir, "bin", "engine"), "#!/bin/sh\nexit 0\n");
    await chmod(join(work, dir, "bin", "engine"), 0o755);
    await writeFile(join(work, dir, "cli.js"), "console.log('engine v1')\n");
  }
});
afterAll(() => rm(work, { recursive: true, force: true }));

describe("the doc-bridge bundle hash", () => {
  it("hashes the executable and the script the command names, and not the folder they are installed in", async () => {
    const a = await engineBundle([join(work, "a/bin/engine"), join(work, "a/cli.js"), "mcp"], join(work, "checkout1"));
    expect(a.bundleHash).toMatch(/^[0-9a-f]{64}$/);
    expect(a.files.map((f) => f.label)).toEqual(["argv[0] engine", "argv[1] cli.js"]);
    const b = await engineBundle([join(work, "b/bin/engine"), join(work, "b/cli.js"), "mcp"], join(work, "checkout1"));
    expect(b.bundleHash).toBe(a.bundleHash);
  });

  it("changes when the script's bytes change, and when the executable's do", async () => {
    const before = await engineBundle([join(work, "b/bin/engine"), join(work, "b/cli.js")], work);
    await writeFile(join(work, "b/cli.js"), "console.log('engine v2')\n");
    const script = await engineBundle([join(work, "b/bin/engine"), join(work, "b/cli.js")], work);
    expect(script.bundleHash).not.toBe(before.bundleHash);
    await writeFile(join(work, "b/bin/engine"), "#!/bin/sh\nexit 1\n");
    const exe = await engineBundle([join(work, "b/bin/engine"), join(work, "b/cli.js")], work);
    expect(exe.bundleHash).not.toBe(script.bundleHash);
  });

  it("resolves a bare executable name through PATH, as spawning it would, and refuses one it cannot find", async () => {
    const viaPath = await engineBundle(["engine", join(work, "a/cli.js")], work, { PATH: `/nonexistent:${join(work, "a/bin")}` });
    const direct = await engineBundle([join(work, "a/bin/engine"), join(work, "a/cli.js")], work);
    expect(viaPath.bundleHash).toBe(direct.bundleHash);
    await expect(engineBundle(["no-such-engine"], work, { PATH: join(work, "a/bin") })).rejects.toThrow(/"no-such-engine" is not a file on PATH; give its absolute path/);
  });

  it("for the bundled reference server: node, the clone's bundle, every project file the server imports, and the lockfile", async () => {
    const bundle = await engineBundle(referenceEngineCommand(), work);
    const labels = bundle.files.map((f) => f.label);
    expect(labels.slice(0, 2)).toEqual([expect.stringMatching(/^argv\[0\] node/), "argv[1] reference-server.mjs"]);
    expect(labels).toEqual(expect.arrayContaining(["src/mcp/reference-server.ts", "src/mcp/config.ts", "src/corpus/git.ts", "package-lock.json"]));
    expect(bundle.files.find((f) => f.label === "src/mcp/reference-server.ts")!.path).toBe(REFERENCE_SERVER);
    // A copy of the bundle elsewhere is a plain script: only the clone's own bundle is followed to its sources.
    await copyFile(bundle.files[1]!.path, join(work, "reference-server.mjs"));
    expect((await engineBundle([process.execPath, join(work, "reference-server.mjs")], work)).files).toHaveLength(2);
    // A plain script is not followed into its imports: only the reference server's closure is known.
    const plain = await engineBundle([process.execPath, pathToFileURL(join(work, "a/cli.js")).href], work);
    expect(plain.files).toHaveLength(2);
  });
});

describe("engine provenance per checkout", () => {
  it("records each checkout's engine revision, and a common one only when they agree", async () => {
    const command = [join(work, "a/bin/engine"), join(work, "a/cli.js")];
    const same = await engineProvenance(command, [
      { repository: "one", dir: join(work, "checkout1"), engineRevision: "r1" },
      { repository: "two", dir: join(work, "checkout2"), engineRevision: "r1" },
    ]);
    expect(same).toMatchObject({ engineRevision: "r1", engineRevisions: { one: "r1", two: "r1" } });
    const differ = await engineProvenance(command, [
      { repository: "one", dir: join(work, "checkout1"), engineRevision: "r1" },
      { repository: "two", dir: join(work, "checkout2"), engineRevision: "r2" },
    ]);
    expect(differ).toMatchObject({ engineRevision: null, engineRevisions: { one: "r1", two: "r2" } });
    expect(differ.bundleHash).toBe(same.bundleHash);
  });

  it("refuses a command that runs different files in different checkouts", async () => {
    await writeFile(join(work, "checkout1", "engine.js"), "one\n");
    await copyFile(join(work, "checkout1", "engine.js"), join(work, "checkout2", "engine.js"));
    const rel = [join(work, "a/bin/engine"), "engine.js"];
    const checkouts = [
      { repository: "one", dir: join(work, "checkout1"), engineRevision: undefined },
      { repository: "two", dir: join(work, "checkout2"), engineRevision: undefined },
    ];
    expect((await engineProvenance(rel, checkouts)).engineRevisions).toEqual({ one: null, two: null });
    await writeFile(join(work, "checkout2", "engine.js"), "two\n");
    await expect(engineProvenance(rel, checkouts)).rejects.toThrow(/runs different files in checkout one and two .*give absolute paths/);
  });
});
