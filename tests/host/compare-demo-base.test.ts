/**
 * compare-demo's base tree gets the dependencies its own lock file names (scripts/base-dependencies.mjs):
 * this tree's node_modules linked in when the lock files agree, else `npm ci --offline` in the base
 * from npm's cache; a package the cache lacks fails naming the fix. A base from before a dependency
 * was dropped (1056899 imports one the current lock file no longer has) ran with this tree's
 * node_modules and failed in its demo with "Cannot find package".
 */
import { lstat, mkdir, mkdtemp, readFile, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
// @ts-expect-error: a plain .mjs script of the project, without types
import { baseDependencies } from "../../scripts/base-dependencies.mjs";

const resolve = baseDependencies as (here: string, tree: string) => "linked" | "installed";

let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-compare-base-"));
});
afterAll(() => rm(work, { recursive: true, force: true }));

/** A lock file whose root package has `root`'s fields (its dependencies), and the entries of `packages` beside it. */
const lockOf = (root: object = {}, packages: Record<string, unknown> = {}) =>
  `${JSON.stringify({ name: "t", version: "1.0.0", lockfileVersion: 3, requires: true, packages: { "": { name: "t", version: "1.0.0", ...root }, ...packages } }, null, 2)}\n`;

/** A tree with a package.json of `deps` and the lock file `lock`. */
async function tree(name: string, lock: string, deps: Record<string, string> = {}): Promise<string> {
  const dir = join(work, name);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, "package.json"), JSON.stringify({ name: "t", version: "1.0.0", dependencies: deps }));
  await writeFile(join(dir, "package-lock.json"), lock);
  return dir;
}

describe("compare-demo's base tree and its dependencies", () => {
  // contract: R287
  it("links this tree's node_modules in when the two lock files are the same bytes", async () => {
    const lock = lockOf();
    const here = await tree("same-here", lock);
    await mkdir(join(here, "node_modules", "marker"), { recursive: true });
    const base = await tree("same-base", lock);
    expect(resolve(here, base)).toBe("linked");
    expect((await lstat(join(base, "node_modules"))).isSymbolicLink()).toBe(true);
    expect(await realpath(join(base, "node_modules"))).toBe(await realpath(join(here, "node_modules")));
  });

  // contract: R287
  it("installs the base's own dependencies from npm's cache when its lock file differs, never this tree's", async () => {
    // A package this project's own install put in npm's cache, as its lock file pins it.
    const projectLock = JSON.parse(await readFile(join(PROJECT_ROOT, "package-lock.json"), "utf8")) as { packages: Record<string, { version: string }> };
    const commander = projectLock.packages["node_modules/commander"]!;
    const here = await tree("differs-here", lockOf({ dependencies: { "only-here": "1.0.0" } }));
    await mkdir(join(here, "node_modules", "only-here"), { recursive: true });
    const base = await tree("differs-base", lockOf({ dependencies: { commander: commander.version } }, { "node_modules/commander": commander }), { commander: commander.version });
    expect(resolve(here, base)).toBe("installed");
    const modules = await lstat(join(base, "node_modules"));
    expect([modules.isDirectory(), modules.isSymbolicLink()]).toEqual([true, false]);
    await expect(lstat(join(base, "node_modules", "only-here"))).rejects.toThrow(/ENOENT/);
    expect(JSON.parse(await readFile(join(base, "node_modules", "commander", "package.json"), "utf8")).version).toBe(commander.version);
  }, 60_000);

  // contract: R287
  it("fails naming npm ci --offline and the fix when a package of the base is not in npm's cache", async () => {
    const here = await tree("uncached-here", lockOf());
    const missing = "study-runner-never-published-package";
    const base = await tree(
      "uncached-base",
      lockOf(
        { dependencies: { [missing]: "1.0.0" } },
        { [`node_modules/${missing}`]: { version: "1.0.0", resolved: `https://registry.npmjs.org/${missing}/-/${missing}-1.0.0.tgz`, integrity: `sha512-${"A".repeat(86)}==` } },
      ),
      { [missing]: "1.0.0" },
    );
    expect(() => resolve(here, base)).toThrow(/`npm ci --offline` in .*uncached-base failed \(exit \d+\)[\s\S]*run `npm ci` once in a checkout of the base revision/);
  }, 60_000);
});
