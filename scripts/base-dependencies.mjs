// The dependencies of compare-demo's base tree (scripts/compare-demo.mjs): the base runs with the
// packages its own lock file names, not with whatever this tree has installed.
import { spawnSync } from "node:child_process";
import { readFileSync, realpathSync, symlinkSync } from "node:fs";
import { join } from "node:path";

/** The bytes of a tree's lock file (package-lock.json, else npm-shrinkwrap.json), or null without one. */
function lockOf(dir) {
  for (const name of ["package-lock.json", "npm-shrinkwrap.json"]) {
    try {
      return readFileSync(join(dir, name));
    } catch {
      // the next name
    }
  }
  return null;
}

/**
 * Gives `tree` (a worktree of the base) its dependencies: this tree's node_modules linked in when the
 * two lock files are the same bytes ("linked"), else `npm ci --offline --ignore-scripts` in `tree`
 * from npm's cache ("installed"; offline, so no package is fetched, and no install script runs in a
 * checkout that is thrown away). A base from before a dependency was added or dropped then finds
 * exactly what it imports. Throws naming the fix when the install fails.
 */
export function baseDependencies(here, tree) {
  const mine = lockOf(here);
  const theirs = lockOf(tree);
  if (mine !== null && theirs !== null && mine.equals(theirs)) {
    symlinkSync(realpathSync(join(here, "node_modules")), join(tree, "node_modules"), "dir");
    return "linked";
  }
  const r = spawnSync("npm", ["ci", "--offline", "--ignore-scripts", "--no-audit", "--no-fund"], { cwd: tree, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  if (r.status !== 0) {
    const why = (r.stderr ?? "").trim().split("\n").slice(-6).join("\n");
    throw new Error(
      `the base's lock file differs from this tree's, and \`npm ci --offline\` in ${tree} failed (exit ${r.status ?? r.signal}):\n${why}\n` +
        "its packages are not all in npm's cache: run `npm ci` once in a checkout of the base revision (with network), then compare again",
    );
  }
  return "installed";
}
