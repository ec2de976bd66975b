#!/usr/bin/env node
// `npm ci`'s `prepare` step: points git at the project's hooks (.githooks/, the commit-msg check of
// CONTRIBUTING.md, "Commits") with `git config core.hooksPath .githooks`, in a clone only. It does
// nothing, and exits 0, where there is nothing to set up: without git, outside a git checkout, in a
// package folder that is not the checkout's top (an installed copy inside someone else's repository),
// or without .githooks/ (the published package does not ship it), and on `npm pack`. It never fails
// an install.
import { spawnSync } from "node:child_process";
import { existsSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const git = (...args) => spawnSync("git", args, { cwd: root, encoding: "utf8" });

function setUp() {
  // npm runs `prepare` for `npm pack` and `npm publish` too; the hooks belong to installing a clone.
  const command = process.env.npm_command;
  if (command !== undefined && command !== "ci" && command !== "install") return `npm ${command} sets up no hooks`;
  if (!existsSync(join(root, ".githooks", "commit-msg"))) return "no .githooks/ here (an installed package)";
  const top = git("rev-parse", "--show-toplevel");
  if (top.error || top.status !== 0) return "not a git checkout";
  if (realpathSync(top.stdout.trim()) !== realpathSync(root)) return `inside another repository (${top.stdout.trim()})`;
  const current = git("config", "core.hooksPath");
  if (current.status === 0 && current.stdout.trim() === ".githooks") return null;
  const set = git("config", "core.hooksPath", ".githooks");
  if (set.status !== 0) return `git config core.hooksPath .githooks failed: ${set.stderr.trim()}`;
  process.stdout.write("git hooks: core.hooksPath set to .githooks (the commit-msg check, CONTRIBUTING.md)\n");
  return null;
}

const skipped = setUp();
// Quiet when skipped: `npm pack --json` and an install print nothing extra.
void skipped;
