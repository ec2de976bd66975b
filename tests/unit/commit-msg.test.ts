/**
 * The commit-msg check (CONTRIBUTING.md, "Commits"): .githooks/commit-msg, run as git runs it (from
 * the top of the working tree, with the message file as its argument), on sample messages; and the
 * `prepare` step that `npm ci` runs, which points a clone's git at .githooks/.
 */
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

const work = mkdtempSync(join(tmpdir(), "sr-commit-msg-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

let n = 0;
/** Runs the hook on `message` as git would; the exit code and what it printed. */
function hook(message: string) {
  const file = join(work, `COMMIT_EDITMSG.${n++}`);
  writeFileSync(file, message);
  const r = spawnSync("sh", [join(PROJECT_ROOT, ".githooks", "commit-msg"), file], { cwd: PROJECT_ROOT, encoding: "utf8" });
  return { code: r.status, out: r.stdout + r.stderr };
}

const chars = (k: number, c = "a") => c.repeat(k);

describe("the commit-msg hook", () => {
  it("accepts a subject of 72 characters with a long body, and refuses 73, saying the length, the limit and where the rule is", () => {
    expect(hook(`${chars(72)}\n\n${chars(300, "b")}\n`)).toEqual({ code: 0, out: "" });
    const refused = hook(`${chars(60)} and more words\n\nwhy\n`);
    expect(refused.code).toBe(1);
    expect(refused.out).toContain("the subject is 75 characters; at most 72 are allowed");
    expect(refused.out).toContain('CONTRIBUTING.md, "Commits"');
    expect(refused.out).toContain("put the why, the measurements and what you left alone in the body");
    expect(hook(`${chars(73)}\n`).code).toBe(1);
  });

  it("counts characters, not bytes", () => {
    expect(hook(`${chars(72, "é")}\n`).code).toBe(0);
    expect(hook(`${chars(73, "é")}\n`).out).toContain("the subject is 73 characters");
  });

  it("reads the subject as git keeps it: comment lines, leading blank lines and what follows `git commit -v`'s scissors line are not the message", () => {
    const verbose = `\n\nshort subject\n\nbody\n# ${chars(100)}\n# ------------------------ >8 ------------------------\n${chars(200)}\n`;
    expect(hook(verbose).code).toBe(0);
    expect(hook(`# ${chars(100)}\n${chars(73)}\n`).code).toBe(1);
  });

  it("refuses a subject wrapped onto a second line, which git would join into one", () => {
    const r = hook("say what changed\nand then some more\n\nbody\n");
    expect(r.code).toBe(1);
    expect(r.out).toContain("the subject runs onto a second line");
  });

  it("lets git's own merge subjects through at any length, but not a merge subject with a description over 72", () => {
    expect(hook(`Merge branch '${chars(80, "x")}' into main\n`).code).toBe(0);
    expect(hook(`Merge remote-tracking branch 'origin/${chars(80, "x")}'\n`).code).toBe(0);
    expect(hook(`Merge branch 'gvisor': ${chars(60, "d")}\n`).code).toBe(1);
  });

  it("checks fixup!, squash!, amend! and Revert subjects without their prefix: the subject they repeat is the one that had to fit", () => {
    expect(hook(`fixup! ${chars(72)}\n`).code).toBe(0);
    expect(hook(`squash! fixup! ${chars(72)}\n`).code).toBe(0);
    expect(hook(`Revert "${chars(72)}"\n`).code).toBe(0);
    expect(hook(`fixup! ${chars(73)}\n`).code).toBe(1);
    expect(hook(`Revert "${chars(73)}"\n`).code).toBe(1);
  });

  it("shows the subject with control characters escaped", () => {
    const r = hook(`${chars(60)}\u001b[2J${chars(20)}\n`);
    expect(r.code).toBe(1);
    expect(r.out).toContain("\\u001b[2J");
    expect(r.out).not.toContain("\u001b");
  });
});

describe("npm ci's prepare step (scripts/git-hooks.mjs)", () => {
  const git = (cwd: string, ...args: string[]) => spawnSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.invalid", ...args], { cwd, encoding: "utf8" });
  /** A folder with the project's hook files as a clone has them; a git repository when `repo`. */
  function checkout(name: string, repo: boolean, withHooks = true) {
    const dir = join(work, name);
    mkdirSync(join(dir, "scripts"), { recursive: true });
    for (const f of ["git-hooks.mjs", "commit-msg.mjs"]) cpSync(join(PROJECT_ROOT, "scripts", f), join(dir, "scripts", f));
    if (withHooks) cpSync(join(PROJECT_ROOT, ".githooks"), join(dir, ".githooks"), { recursive: true });
    if (repo) expect(git(dir, "init", "-q").status).toBe(0);
    return dir;
  }
  const prepare = (dir: string, npmCommand = "ci") => spawnSync(process.execPath, ["scripts/git-hooks.mjs"], { cwd: dir, encoding: "utf8", env: { ...process.env, npm_command: npmCommand } });

  it("in a clone, sets core.hooksPath to .githooks, after which git refuses a long subject and commits a short one", () => {
    const dir = checkout("clone", true);
    expect(prepare(dir).status).toBe(0);
    expect(git(dir, "config", "core.hooksPath").stdout.trim()).toBe(".githooks");
    writeFileSync(join(dir, "f.txt"), "x\n");
    expect(git(dir, "add", "f.txt").status).toBe(0);
    const long = git(dir, "commit", "-q", "-m", chars(73));
    expect(long.status).not.toBe(0);
    expect(long.stderr).toContain("the subject is 73 characters; at most 72 are allowed");
    expect(git(dir, "commit", "-q", "-m", "add f.txt", "-m", "the why").status).toBe(0);
    expect(git(dir, "log", "--format=%s").stdout).toBe("add f.txt\n");
  });

  it("does nothing and exits 0 outside git, without .githooks/ (the installed package), and on npm pack", () => {
    const plain = checkout("plain", false);
    expect(prepare(plain)).toMatchObject({ status: 0, stdout: "", stderr: "" });
    const installed = checkout("installed", true, false);
    expect(prepare(installed).status).toBe(0);
    expect(git(installed, "config", "core.hooksPath").status).toBe(1);
    const packing = checkout("packing", true);
    expect(prepare(packing, "pack").status).toBe(0);
    expect(git(packing, "config", "core.hooksPath").status).toBe(1);
    expect(readFileSync(join(PROJECT_ROOT, "package.json"), "utf8")).toContain('"prepare": "node scripts/git-hooks.mjs"');
  });
});
