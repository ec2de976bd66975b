/**
 * The doc-bridge engine is code the study does not control (a real engine, or a corpus-provided
 * config driving one), so it runs with as little as it needs: its own clone of the checkout at
 * the pin, a copy of its index, an empty HOME and an allowlisted environment, and, when the
 * runner is root, an unprivileged uid with no groups and no capabilities. It cannot then read the
 * runner's login (~/.claude/.credentials.json under a 0700 HOME), the checkout it came from, or
 * any other file its uid may not read. Without root the uid cannot change: the engine runs as the
 * runner's user, and `enginePrivileges` says so (the doctor prints it).
 */
import { existsSync } from "node:fs";
import { chmod, chown, copyFile, lstat, mkdir, readdir, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { git, NO_ATTRIBUTES } from "../corpus/git.ts";
import { removeTree } from "../export/export.ts";
import { makeRunnerFolder, reapOrphanFolders } from "../util/orphans.ts";
import { defaultIndexRoot, INDEX_DIR_ENV, repositoryKey, type RepositoryKeys } from "./index-store.ts";

/** nobody:nogroup on Debian and most distributions. */
export const ENGINE_UID = 65534;
export const ENGINE_GID = 65534;
const SETPRIV = ["/usr/bin/setpriv", "/bin/setpriv"];

/** Ignored files (an engine's own index inside the checkout) copied into the clone, at most. */
const MAX_IGNORED_FILES = 10_000;
const MAX_IGNORED_BYTES = 256 * 1024 * 1024;

/** Variables the engine receives from the runner's environment; everything else is set here or absent. */
export const ENGINE_ENV_ALLOWLIST = ["PATH", "LANG", "LC_ALL", "TZ", "TERM"] as const;

export interface EnginePrivileges {
  uid: number;
  gid: number;
  /** True when the engine runs under another uid than the runner's. */
  dropped: boolean;
  /** One line for people: who the engine runs as and what it can reach. */
  summary: string;
}

/** Who the engine runs as, from this process's uid. */
export function enginePrivileges(runnerUid: number | undefined = process.getuid?.()): EnginePrivileges {
  if (runnerUid === 0) {
    return {
      uid: ENGINE_UID,
      gid: ENGINE_GID,
      dropped: true,
      summary: `runs as uid ${ENGINE_UID} (gid ${ENGINE_GID}, no supplementary groups, no capabilities, no new privileges), with an empty HOME, an allowlisted environment and its own clone of the checkout at the pin`,
    };
  }
  const uid = runnerUid ?? -1;
  return {
    uid,
    gid: process.getgid?.() ?? -1,
    dropped: false,
    summary:
      `runs as the runner's own uid ${uid}, with an empty HOME, an allowlisted environment and its own clone of the checkout at the pin; ` +
      "it could still read files of that user (such as the CLI login) by absolute path: run the runner as root so it can drop the engine to an unprivileged uid",
  };
}

export interface EngineSandbox {
  /** The engine command, prefixed with the privilege drop when there is one. */
  command: string[];
  /** Its clone of the checkout at the pin. */
  cwd: string;
  env: Record<string, string>;
  privileges: EnginePrivileges;
  remove(): Promise<void>;
}

function setprivPath(): string {
  const found = SETPRIV.find((p) => existsSync(p));
  if (!found) throw new Error("the runner is root and drops the doc-bridge engine to an unprivileged uid with setpriv (util-linux), which is not installed; install util-linux");
  return found;
}

/**
 * Where sandbox folders go: the temp folder when the engine's uid can reach it (every ancestor
 * searchable by others), else /tmp. A runner's TMPDIR inside a private folder would otherwise
 * leave the engine unable to enter its own clone.
 */
async function engineParent(privileges: EnginePrivileges): Promise<string> {
  const base = tmpdir();
  if (!privileges.dropped) return base;
  for (let dir = base; ; dir = dirname(dir)) {
    if (((await stat(dir)).mode & 0o001) === 0) return "/tmp";
    if (dirname(dir) === dir) return base;
  }
}

/** Copies the regular files under `from` into `to` (folders 0755, files 0644); links and specials are skipped. */
async function copyTree(from: string, to: string): Promise<void> {
  await mkdir(to, { recursive: true, mode: 0o755 });
  for (const entry of await readdir(from, { withFileTypes: true })) {
    const src = join(from, entry.name);
    const dst = join(to, entry.name);
    if (entry.isDirectory()) await copyTree(src, dst);
    else if (entry.isFile()) {
      await copyFile(src, dst);
      await chmod(dst, 0o644);
    }
  }
}

/**
 * Whether `git clone --local` can hard-link the checkout's objects into `folder`: only within one
 * file system. A checkout elsewhere (a tmpfs /tmp, a separate /home, a worktree's .git file) has
 * its objects copied instead; git 2.39 does not fall back by itself ("Invalid cross-device link";
 * contract R75).
 */
async function canHardLink(checkout: string, folder: string): Promise<boolean> {
  const objects = await stat(join(checkout, ".git", "objects")).catch(() => null);
  return objects?.isDirectory() === true && objects.dev === (await stat(folder)).dev;
}

/** Runs `fn` with umask 022, so what git writes is readable by the engine's uid. */
async function readableByAll<T>(fn: () => Promise<T>): Promise<T> {
  const old = process.umask(0o022);
  try {
    // The child takes the umask at spawn, which happens before the first await returns.
    return await fn();
  } finally {
    process.umask(old);
  }
}

export async function prepareEngineSandbox(o: {
  command: readonly string[];
  checkout: string;
  pin: string;
  indexRoot?: string;
  source?: NodeJS.ProcessEnv;
  /** The run's repository keys, when it starts many engines of one checkout. */
  keys?: RepositoryKeys;
}): Promise<EngineSandbox> {
  const privileges = enginePrivileges();
  const command = privileges.dropped
    ? [setprivPath(), `--reuid=${ENGINE_UID}`, `--regid=${ENGINE_GID}`, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--", ...o.command]
    : [...o.command];
  const parent = await engineParent(privileges);
  await reapOrphanFolders("engine", removeTree, parent);
  const folder = await makeRunnerFolder("engine", parent);
  try {
    await chmod(folder, 0o755);
    const view = join(folder, "checkout");
    await readableByAll(async () => {
      // A clone, not the checkout: the engine never sees the user's folder or its .git/config, and
      // a symlink committed in the corpus becomes a plain file instead of a way out.
      const links = (await canHardLink(o.checkout, folder)) ? [] : ["--no-hardlinks"];
      await git(folder, ["clone", "--quiet", "--local", ...links, "--no-checkout", "--", o.checkout, view]);
      // Above every .gitattributes of the tree: the checkout writes the committed bytes (contract R117).
      await mkdir(join(view, ".git", "info"), { recursive: true, mode: 0o755 });
      await writeFile(join(view, ".git", "info", "attributes"), NO_ATTRIBUTES, { mode: 0o644 });
      await git(view, ["-c", "core.symlinks=false", "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", o.pin]);
    });
    await copyIgnored(o.checkout, view);

    // The reference engine's index for this repository and pin, copied: the runner's index
    // folder may lie under a HOME the engine cannot (and must not) read.
    const root = o.indexRoot ?? defaultIndexRoot(o.source);
    const key = await (o.keys ? o.keys.of(o.checkout, o.pin) : repositoryKey(o.checkout, o.pin));
    const indexCopy = join(folder, "index");
    await mkdir(indexCopy, { mode: 0o755 });
    if (existsSync(join(root, key, o.pin))) await copyTree(join(root, key, o.pin), join(indexCopy, key, o.pin));
    // The other pins' folders, empty: enough for the engine to say "stale" rather than "missing".
    for (const other of existsSync(join(root, key)) ? await readdir(join(root, key)) : []) {
      if (other !== o.pin && /^[0-9a-f]{40,64}$/.test(other)) await mkdir(join(indexCopy, key, other), { recursive: true, mode: 0o755 });
    }
    await chmod(join(folder), 0o755);

    const home = join(folder, "home");
    await mkdir(home, { mode: 0o700 });
    if (privileges.dropped) await chown(home, ENGINE_UID, ENGINE_GID);

    const source = o.source ?? process.env;
    const env: Record<string, string> = {};
    for (const key of ENGINE_ENV_ALLOWLIST) {
      const value = source[key];
      if (value !== undefined && !value.startsWith("()")) env[key] = value;
    }
    Object.assign(env, {
      HOME: home,
      [INDEX_DIR_ENV]: indexCopy,
      // The clone belongs to the runner; git refuses a repository owned by another uid otherwise.
      GIT_CONFIG_COUNT: "1",
      GIT_CONFIG_KEY_0: "safe.directory",
      GIT_CONFIG_VALUE_0: view,
    });
    return { command, cwd: view, env, privileges, remove: () => removeTree(folder) };
  } catch (err) {
    await removeTree(folder);
    throw err;
  }
}

/**
 * Files the checkout ignores (an engine may keep its index there), copied into the clone;
 * symlinks and anything but regular files are skipped, and the amount is bounded.
 */
async function copyIgnored(checkout: string, view: string): Promise<void> {
  const listed = (await git(checkout, ["ls-files", "-z", "--others", "--ignored", "--exclude-standard"])).toString("utf8").split("\0").filter(Boolean);
  if (listed.length > MAX_IGNORED_FILES) {
    throw new Error(
      `the checkout ${checkout} holds ${listed.length} ignored files (more than ${MAX_IGNORED_FILES}) that the doc-bridge engine's clone would copy; remove what the engine does not need`,
    );
  }
  let bytes = 0;
  for (const path of listed) {
    if (path.split("/").some((p) => p === ".." || p === ".git")) continue;
    const st = await lstat(join(checkout, path));
    if (!st.isFile()) continue;
    bytes += st.size;
    if (bytes > MAX_IGNORED_BYTES)
      throw new Error(`the ignored files of ${checkout} exceed ${MAX_IGNORED_BYTES} bytes; the doc-bridge engine's clone would copy them; remove what the engine does not need`);
    const dst = join(view, path);
    await mkdir(dirname(dst), { recursive: true, mode: 0o755 });
    await copyFile(join(checkout, path), dst);
    await chmod(dst, 0o644);
  }
}
