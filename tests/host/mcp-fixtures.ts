/**
 * Helpers of the mcp*.test.ts files: git repositories made with execFile (no stdin, so no
 * EPIPE race when git exits first), the reference engine's `index` command into a private
 * index folder, and a small
 * stand-in MCP server whose tool list shows what it was started with.
 */
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { inject } from "vitest";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { INDEX_DIR_ENV } from "../../src/mcp/index-store.ts";
import { FIXTURE_ENV } from "../support/git-fixture.ts";

const execFileP = promisify(execFile);
const GIT_CONFIG = ["-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", "-c", "core.hooksPath=/dev/null"];

export const ENGINE = referenceEngineCommand();

export type RepoFile = { path: string; content: string } | { path: string; symlink: string };

export interface Repo {
  dir: string;
  /** HEAD after the last commit. */
  commit: string;
  commitFiles(files: readonly RepoFile[]): Promise<string>;
}

export async function git(dir: string, args: readonly string[], env: Record<string, string> = {}): Promise<string> {
  const { stdout } = await execFileP("git", [...GIT_CONFIG, ...args], { cwd: dir, env: { ...process.env, ...FIXTURE_ENV, ...env } });
  return stdout.trim();
}

/**
 * The runner-owned index folder of this test process: indexes never land in the user's cache,
 * and the engines the tests start (runIndex, the preflight, the bridge) all look there. It is made
 * in the tier's run folder (tests/support/run-folder-setup.ts), which the run's end removes.
 */
export const INDEX_ROOT = mkdtempSync(join(inject("runFolder"), "mcp-index-"));
process.env[INDEX_DIR_ENV] = INDEX_ROOT;

let repoSerial = 0;

/** A fresh repository with `files` committed, in `parent` (the temporary folder by default); `cleanup` receives its removal. */
export async function makeRepo(files: readonly RepoFile[], cleanup: Array<() => Promise<unknown>>, parent = tmpdir()): Promise<Repo> {
  const dir = await mkdtemp(join(parent, "mcp-repo-"));
  cleanup.push(() => rm(dir, { recursive: true, force: true }));
  await git(dir, ["init", "-q"]);
  // A date of its own gives each repository its own root commit, so its own index key: two
  // fixtures with the same files never find each other's index.
  const serial = ++repoSerial;
  const dated = { GIT_AUTHOR_DATE: `@${1767225600 + (process.pid % 10_000) * 10_000 + serial} +0000`, GIT_COMMITTER_DATE: `@${1767225600 + (process.pid % 10_000) * 10_000 + serial} +0000` };
  const repo: Repo = {
    dir,
    commit: "",
    async commitFiles(list) {
      for (const f of list) {
        const file = join(dir, f.path);
        await mkdir(dirname(file), { recursive: true });
        if ("symlink" in f) await symlink(f.symlink, file);
        else await writeFile(file, f.content);
      }
      await git(dir, ["add", "-A"]);
      await git(dir, ["commit", "-q", "--allow-empty", "-m", "fixture"], dated);
      repo.commit = await git(dir, ["rev-parse", "HEAD"]);
      return repo.commit;
    },
  };
  await repo.commitFiles(files);
  return repo;
}

export const DOC_CONFIG = { docs: ["docs/**/*.md", "README.md"], index: ".doc-bridge/index.json" };

/** A checkout the reference engine can serve: ignored index dir, config, a few docs. */
export function docFiles(config: Record<string, unknown> = DOC_CONFIG): RepoFile[] {
  return [
    { path: ".gitignore", content: ".doc-bridge/\n" },
    { path: "doc-bridge.config.json", content: JSON.stringify(config) },
    { path: "README.md", content: "# Demo\n\nSee the documentation in docs/.\n" },
    { path: "docs/rounding.md", content: "# Rounding\n\nAmounts round half to even in roundMinor.\n" },
  ];
}

/** `reference-server.ts index` in `dir`, as an operator would run it. */
export async function runIndex(dir: string): Promise<{ stdout: string; stderr: string }> {
  return execFileP(ENGINE[0]!, [...ENGINE.slice(1), "index"], { cwd: dir, env: { PATH: process.env.PATH ?? "", [INDEX_DIR_ENV]: INDEX_ROOT } });
}

const SDK = (sub: string) => new URL(`../../node_modules/@modelcontextprotocol/sdk/dist/esm/${sub}`, import.meta.url).href;

/**
 * Writes a stand-in doc-bridge server (plain .mjs using the SDK by absolute URL, so it runs
 * from any cwd). It answers doc.search with the HEAD of its cwd as the pin, lists one tool
 * `env.<NAME>` per environment variable it received, and leaves out handoff.resolve when
 * started with `--without-handoff`.
 */
export async function writeStandInServer(cleanup: Array<() => Promise<unknown>>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "mcp-standin-"));
  cleanup.push(() => rm(dir, { recursive: true, force: true }));
  // The runner starts engines as an unprivileged uid when it is root: their code must be readable to it.
  await chmod(dir, 0o755);
  const file = join(dir, "stand-in-server.mjs");
  await writeFile(
    file,
    `import { execFileSync } from "node:child_process";
import { McpServer } from ${JSON.stringify(SDK("server/mcp.js"))};
import { StdioServerTransport } from ${JSON.stringify(SDK("server/stdio.js"))};
const pin = execFileSync("git", ["rev-parse", "HEAD"], { encoding: "utf8" }).trim();
const s = new McpServer({ name: "stand-in", version: "9.9.9" });
const ok = (o) => async () => ({ content: [{ type: "text", text: JSON.stringify(o) }] });
s.registerTool("doc.search", {}, ok({ pin, engineRevision: "stand-in-rev", matches: [] }));
s.registerTool("doc.get", {}, ok({ pin }));
if (!process.argv.includes("--without-handoff")) s.registerTool("handoff.resolve", {}, ok({}));
for (const k of Object.keys(process.env)) if (/^[A-Za-z0-9_]+$/.test(k)) s.registerTool("env." + k, {}, ok({}));
await s.connect(new StdioServerTransport());
`,
  );
  return file;
}
