import { execFile } from "node:child_process";
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";

const execFileP = promisify(execFile);

/**
 * Real git repositories for tests. Identity and dates come from the environment and the
 * user's global and system config are ignored, so the same entries give the same commit
 * id on every machine and no signing or hook setting of the host can interfere.
 */
export const FIXTURE_ENV: Readonly<Record<string, string>> = {
  GIT_AUTHOR_NAME: "Fixture Author",
  GIT_AUTHOR_EMAIL: "author@example.invalid",
  GIT_AUTHOR_DATE: "2026-01-01T00:00:00Z",
  GIT_COMMITTER_NAME: "Fixture Committer",
  GIT_COMMITTER_EMAIL: "committer@example.invalid",
  GIT_COMMITTER_DATE: "2026-01-01T00:00:00Z",
  GIT_CONFIG_NOSYSTEM: "1",
  GIT_CONFIG_GLOBAL: "/dev/null",
  GIT_TERMINAL_PROMPT: "0",
  GIT_LITERAL_PATHSPECS: "1",
  LC_ALL: "C",
};

const CONFIG = [
  "-c",
  "commit.gpgsign=false",
  "-c",
  "tag.gpgsign=false",
  "-c",
  "init.defaultBranch=main",
  "-c",
  "core.autocrlf=false",
  "-c",
  "core.symlinks=true",
  "-c",
  "core.filemode=true",
  "-c",
  "core.hooksPath=/dev/null",
];

export type FixtureEntry =
  /** A regular file; `executable` sets mode 100755. */
  | { path: string; content: string | Buffer; executable?: boolean }
  /** A symbolic link (mode 120000) pointing at `target`. */
  | { path: string; symlink: string }
  /** A submodule entry (gitlink, mode 160000) for a commit that need not exist here. */
  | { path: string; gitlink: string }
  /** A blob whose path is raw bytes (e.g. not UTF-8), added to the index directly. */
  | { rawPath: Buffer; content: string | Buffer };

export interface GitFixture {
  dir: string;
  /** The commit made by the last `commit` call. */
  commit: string;
  git(args: readonly string[], input?: Buffer | string): Promise<Buffer>;
  /** Writes entries into the work tree and index and commits all changes; returns the commit id. */
  commitEntries(entries: readonly FixtureEntry[], message?: string): Promise<string>;
  remove(): Promise<void>;
}

function runGit(dir: string, args: readonly string[], input?: Buffer | string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = execFile("git", [...CONFIG, ...args], { cwd: dir, env: { ...process.env, ...FIXTURE_ENV }, encoding: "buffer", maxBuffer: 256 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`git ${args.join(" ")} failed: ${stderr.toString("utf8")}`, { cause: err }));
      else resolve(stdout);
    });
    // git may exit before reading its input (or not read it at all): EPIPE is not an error here.
    child.stdin?.on("error", () => {});
    if (input === undefined) child.stdin?.end();
    else child.stdin?.end(input);
  });
}

/** Makes a repository under `parentDir` (default: the OS temp dir) and commits `entries`. */
export async function makeGitRepo(entries: readonly FixtureEntry[], parentDir = tmpdir()): Promise<GitFixture> {
  const dir = await mkdtemp(join(parentDir, "study-runner-fixture-"));
  await execFileP("git", [...CONFIG, "init", "-q", dir], { env: { ...process.env, ...FIXTURE_ENV } });
  const fixture: GitFixture = {
    dir,
    commit: "",
    git: (args, input) => runGit(dir, args, input),
    async commitEntries(list, message = "fixture") {
      const written: string[] = [];
      for (const entry of list) if (await addEntry(dir, entry)) written.push((entry as { path: string }).path);
      // Only the written paths: `add -A` would drop index-only entries (gitlinks, raw paths).
      if (written.length > 0) await runGit(dir, ["add", "-f", "--", ...written]);
      await runGit(dir, ["commit", "-q", "--allow-empty", "-m", message]);
      fixture.commit = (await runGit(dir, ["rev-parse", "HEAD"])).toString("utf8").trim();
      return fixture.commit;
    },
    remove: () => rm(dir, { recursive: true, force: true }),
  };
  await fixture.commitEntries(entries);
  return fixture;
}

/** Returns true when the entry was written to the work tree (and still needs `git add`). */
async function addEntry(dir: string, entry: FixtureEntry): Promise<boolean> {
  if ("rawPath" in entry) {
    // Node passes argv as UTF-8, so a non-UTF-8 path can only reach git through stdin.
    const oid = (await runGit(dir, ["hash-object", "-w", "--stdin"], entry.content)).toString("utf8").trim();
    const record = Buffer.concat([Buffer.from(`100644 ${oid}\t`), entry.rawPath, Buffer.from([0])]);
    await runGit(dir, ["update-index", "--add", "-z", "--index-info"], record);
    return false;
  }
  if ("gitlink" in entry) {
    await runGit(dir, ["update-index", "--add", "--cacheinfo", `160000,${entry.gitlink},${entry.path}`]);
    return false;
  }
  const file = join(dir, entry.path);
  await mkdir(dirname(file), { recursive: true });
  if ("symlink" in entry) {
    await symlink(entry.symlink, file);
    return true;
  }
  await rm(file, { force: true });
  await writeFile(file, entry.content);
  await chmod(file, entry.executable ? 0o755 : 0o644);
  return true;
}
