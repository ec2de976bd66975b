/**
 * The clone's doc-bridge engine as one bundled file (src/mcp/reference-bundle.ts): made from the
 * bytes of the sources it is built from, reused while they are unchanged, remade when any of them
 * or the lock file changes, and never left half-written.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { ensureReferenceBundle, type BundleTarget } from "../../src/mcp/reference-bundle.ts";

let work: string;
let target: BundleTarget;
// Like the reference server: it exports main(argv) and names itself by import.meta.url.
const ENTRY = `import { dep } from "./dep.ts";
export async function main(argv: string[] = process.argv.slice(2)): Promise<number> {
  console.log(JSON.stringify({ dep, self: import.meta.url, argv, require: typeof require }));
  return argv[0] === "fail" ? 3 : 0;
}
`;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-reference-bundle-"));
  await mkdir(join(work, "project", "src"), { recursive: true });
  await writeFile(join(work, "project", "src", "entry.ts"), ENTRY);
  await writeFile(join(work, "project", "src", "dep.ts"), 'export const dep: string = "one";\n');
  await writeFile(join(work, "project", "package-lock.json"), '{"lockfileVersion":3}\n');
  target = { source: join(work, "project", "src", "entry.ts"), root: join(work, "project"), cache: join(work, "cache") };
});
afterAll(() => rm(work, { recursive: true, force: true }));

const run = (file: string, args: string[] = []) => JSON.parse(execFileSync(process.execPath, [file, ...args], { encoding: "utf8" })) as { dep: string; self: string; argv: string[]; require: string };

describe("the reference engine bundle", () => {
  it("bundles the entry and its imports into one file that runs its main on Node alone, naming itself by its source", async () => {
    const file = ensureReferenceBundle(target);
    expect(file).toMatch(new RegExp(`^${join(work, "cache")}/[0-9a-f]{64}/reference-server\\.mjs$`));
    // import.meta.url is the source's (the server's revision is that file's sha256), found relative to the bundle.
    expect(run(file, ["serve"])).toEqual({ dep: "one", self: pathToFileURL(target.source).href, argv: ["serve"], require: "function" });
    expect(await readFile(file, "utf8")).not.toContain(work);
    // main's code is the process's exit code.
    expect(spawnSync(process.execPath, [file, "fail"]).status).toBe(3);
    // The engine may run as another uid (src/mcp/engine-sandbox.ts): readable by all, writable by none of them.
    expect((await stat(file)).mode & 0o777).toBe(0o644);
    expect((await stat(join(file, ".."))).mode & 0o777).toBe(0o755);
  });

  it("reuses the bundle while its sources are unchanged, without remaking it or leaving anything beside it", async () => {
    const first = ensureReferenceBundle(target);
    const made = (await stat(first)).mtimeMs;
    const again = ensureReferenceBundle(target);
    expect(again).toBe(first);
    expect((await stat(again)).mtimeMs).toBe(made);
    expect(await readdir(target.cache)).toHaveLength(1);
  });

  it("is remade when a file reached only through an import changes, and when the lock file changes", async () => {
    const before = ensureReferenceBundle(target);
    await writeFile(join(work, "project", "src", "dep.ts"), 'export const dep: string = "two";\n');
    const changedImport = ensureReferenceBundle(target);
    expect(changedImport).not.toBe(before);
    expect(run(changedImport).dep).toBe("two");
    await writeFile(join(work, "project", "package-lock.json"), '{"lockfileVersion":3,"packages":{}}\n');
    const changedLock = ensureReferenceBundle(target);
    expect(changedLock).not.toBe(changedImport);
    // The old bundles stay as they were: a runner that already named one still finds it.
    expect(run(before).dep).toBe("one");
  });

  it("refuses a source that does not compile, naming it, and leaves no folder behind", async () => {
    const before = await readdir(target.cache);
    await writeFile(join(work, "project", "src", "dep.ts"), "export const dep: string = ;\n");
    expect(() => ensureReferenceBundle(target)).toThrow(new RegExp(`could not be bundled from ${target.source}: [\\s\\S]*Unexpected`));
    expect(await readdir(target.cache)).toEqual(before);
    await writeFile(join(work, "project", "src", "dep.ts"), 'export const dep: string = "one";\n');
    expect(await readFile(ensureReferenceBundle(target), "utf8")).toContain('"one"');
  });
});
