import { createHash } from "node:crypto";
import { constants } from "node:fs";
import { chmod, chown, lstat, mkdir, open, readFile, realpath, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { writeFileAtomic } from "../util/atomic-file.ts";
import { RefusalError } from "../util/errors.ts";
import { acquireHeldLock, type HeldLock, type HeldLockOptions } from "../util/held-lock.ts";

/**
 * The Claude Code CLI's own login (decision 001: "authenticated by the CLI's own login"; the
 * runner never reads or passes ANTHROPIC_API_KEY). Nothing here ever returns, logs or puts in an
 * error message the token itself.
 *
 * Facts: the CLI reads `$HOME/.claude/.credentials.json` (`claudeAiOauth.accessToken`,
 * `expiresAt` in ms), writes `$HOME/.claude.json` and `$HOME/.claude/...` at start, so HOME must
 * be writable; refresh tokens are single-use, so two processes refreshing one login race and the
 * loser is logged out, and a refresh replaces the file (new inode), so a bind mount of the host
 * file would go stale. Hence: a copy in a fresh HOME per attempt, an exclusive lock on the host
 * login for the whole run, and an atomic write-back when the CLI refreshed the copy.
 */

export interface LoginLocation {
  /** `.credentials.json`: the OAuth login. */
  credentialsPath: string;
  /** `.claude.json`: the CLI's global config (optional; only a few keys are staged). */
  globalConfigPath: string;
  source: "flag" | "CLAUDE_CONFIG_DIR" | "home";
}

export interface ResolveLoginOptions {
  /** The folder holding `.credentials.json` (the runner's flag); overrides the environment. */
  configDir?: string;
  env?: NodeJS.ProcessEnv;
  homeDir?: string;
}

/**
 * Where the host login is: the flag's folder, else `$CLAUDE_CONFIG_DIR`, else `~/.claude`. With a
 * config folder the CLI keeps `.claude.json` inside it; otherwise it is `~/.claude.json`.
 */
export function resolveLogin(options: ResolveLoginOptions = {}): LoginLocation {
  const env = options.env ?? process.env;
  const home = options.homeDir ?? homedir();
  const configDir = options.configDir ?? (env.CLAUDE_CONFIG_DIR ? env.CLAUDE_CONFIG_DIR : undefined);
  if (configDir !== undefined) {
    return {
      credentialsPath: join(configDir, ".credentials.json"),
      globalConfigPath: join(configDir, ".claude.json"),
      source: options.configDir !== undefined ? "flag" : "CLAUDE_CONFIG_DIR",
    };
  }
  return { credentialsPath: join(home, ".claude", ".credentials.json"), globalConfigPath: join(home, ".claude.json"), source: "home" };
}

/** What can be said about a login without showing it. */
export interface LoginFacts {
  credentialsPath: string;
  exists: boolean;
  parses: boolean;
  hasAccessToken: boolean;
  hasRefreshToken: boolean;
  /** `claudeAiOauth.expiresAt`, ms since the epoch. */
  expiresAt: number | null;
  expired: boolean | null;
  subscriptionType: string | null;
  scopes: string[] | null;
  /** Empty when the login is usable; each names the file and the fix. */
  problems: string[];
}

interface ParsedCredentials {
  parses: boolean;
  hasAccessToken: boolean;
  hasRefreshToken: boolean;
  expiresAt: number | null;
  subscriptionType: string | null;
  scopes: string[] | null;
}

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

function errnoCode(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? "error";
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function parseCredentials(bytes: Buffer): ParsedCredentials {
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString("utf8"));
  } catch {
    // V8's JSON error quotes part of the input, which here is the token: never keep it.
    return { parses: false, hasAccessToken: false, hasRefreshToken: false, expiresAt: null, subscriptionType: null, scopes: null };
  }
  const oauth = isRecord(json) && isRecord(json.claudeAiOauth) ? json.claudeAiOauth : undefined;
  const expiresAt = oauth && typeof oauth.expiresAt === "number" && Number.isFinite(oauth.expiresAt) ? oauth.expiresAt : null;
  return {
    parses: true,
    hasAccessToken: typeof oauth?.accessToken === "string" && oauth.accessToken.length > 0,
    hasRefreshToken: typeof oauth?.refreshToken === "string" && oauth.refreshToken.length > 0,
    expiresAt,
    subscriptionType: typeof oauth?.subscriptionType === "string" ? oauth.subscriptionType : null,
    scopes: Array.isArray(oauth?.scopes) && oauth.scopes.every((s) => typeof s === "string") ? (oauth.scopes as string[]) : null,
  };
}

/** The fix for a missing, unreadable or expired login (doctor prints it apart from the problem). */
export const RELOGIN = "run `claude` on this machine and log in, or point the runner at the folder that holds the login";

function factsOf(path: string, parsed: ParsedCredentials, now: number): LoginFacts {
  const problems: string[] = [];
  if (!parsed.parses) problems.push(`the Claude login ${path} is not valid JSON; ${RELOGIN}`);
  else if (!parsed.hasAccessToken) problems.push(`the Claude login ${path} has no claudeAiOauth.accessToken; ${RELOGIN}`);
  const expired = parsed.expiresAt === null ? null : parsed.expiresAt <= now;
  if (parsed.parses && parsed.hasAccessToken) {
    if (parsed.expiresAt === null) problems.push(`the Claude login ${path} has no numeric claudeAiOauth.expiresAt; ${RELOGIN}`);
    else if (expired) problems.push(`the Claude login ${path} expired at ${new Date(parsed.expiresAt).toISOString()}; ${RELOGIN}`);
  }
  return { credentialsPath: path, exists: true, ...parsed, expired, problems };
}

/** Facts about the host login, never the token; `problems` is empty when it can be used. */
export async function inspectLogin(location: LoginLocation, options: { now?: number } = {}): Promise<LoginFacts> {
  const path = location.credentialsPath;
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (err) {
    return {
      credentialsPath: path,
      exists: false,
      parses: false,
      hasAccessToken: false,
      hasRefreshToken: false,
      expiresAt: null,
      expired: null,
      subscriptionType: null,
      scopes: null,
      problems: [`no Claude login at ${path} (${errnoCode(err)}); ${RELOGIN}`],
    };
  }
  return factsOf(path, parseCredentials(bytes), options.now ?? Date.now());
}

export type LoginLock = HeldLock;

export type LoginLockOptions = Omit<HeldLockOptions, "busy" | "interrupted">;

/**
 * An exclusive lock on the host login for as long as a run may refresh it, so two runs never
 * spend the same single-use refresh token. Waits up to `timeoutMs`, then refuses naming the holder.
 */
export async function acquireLoginLock(location: LoginLocation, options: LoginLockOptions): Promise<LoginLock> {
  let real: string;
  try {
    real = await realpath(location.credentialsPath);
  } catch (err) {
    throw new RefusalError(`no Claude login at ${location.credentialsPath} (${errnoCode(err)}); ${RELOGIN}`);
  }
  return acquireHeldLock(real, {
    ...options,
    interrupted: (reason, holder) => `interrupted by ${reason} while waiting for the Claude login ${location.credentialsPath} (${holder})`,
    busy: (holder) =>
      `the Claude login ${location.credentialsPath} is in use by another run (${holder}); waited ${options.timeoutMs} ms. ` +
      `Two runs must not refresh one login at once: wait for the other run to finish, or, if none is running, remove ${real}.lock`,
  });
}

/** The container's user (image/: user 1000 in /etc/passwd). */
import { CONTAINER_GID, CONTAINER_UID } from "../util/container-socket.ts";
export { CONTAINER_GID, CONTAINER_UID };

/**
 * Keys of `.claude.json` that are staged. The file also keeps per-project history of the host
 * user; an agent with Read could open it, so only account and onboarding state are copied.
 */
export const STAGED_GLOBAL_CONFIG_KEYS = ["oauthAccount", "userID", "hasCompletedOnboarding", "lastOnboardingVersion"] as const;

export interface StagedLogin {
  /** The folder to bind-mount as the container's HOME. */
  homeDir: string;
  /** `<homeDir>/.claude/.credentials.json`. */
  credentialsPath: string;
  /** sha256 of the host credentials as copied: a later change means the CLI refreshed them. */
  originalSha256: string;
  originalExpiresAt: number;
  globalConfigStaged: boolean;
}

async function writeNew(path: string, data: string | Uint8Array, mode: number): Promise<void> {
  const handle = await open(path, "wx", mode);
  try {
    await handle.chmod(mode);
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Copy the host login into `homeDir`, which must not exist yet (a fresh HOME per attempt): the
 * folder and `.claude/` mode 0700, files mode 0600, owned by the container user when running as root.
 */
export async function stageLogin(location: LoginLocation, homeDir: string, options: { uid?: number; gid?: number; now?: number } = {}): Promise<StagedLogin> {
  let bytes: Buffer;
  try {
    bytes = await readFile(location.credentialsPath);
  } catch (err) {
    throw new RefusalError(`no Claude login at ${location.credentialsPath} (${errnoCode(err)}); ${RELOGIN}`);
  }
  const facts = factsOf(location.credentialsPath, parseCredentials(bytes), options.now ?? Date.now());
  if (facts.problems.length) throw new RefusalError(facts.problems.join("\n"), facts.problems);
  try {
    await mkdir(homeDir, { mode: 0o700 });
  } catch (err) {
    throw new Error(`cannot create the attempt's HOME ${homeDir} (${errnoCode(err)}); it must be a new folder in an existing one`);
  }
  const claudeDir = join(homeDir, ".claude");
  const credentialsPath = join(claudeDir, ".credentials.json");
  await chmod(homeDir, 0o700);
  await mkdir(claudeDir, { mode: 0o700 });
  await chmod(claudeDir, 0o700);
  await writeNew(credentialsPath, bytes, 0o600);
  const owned = [homeDir, claudeDir, credentialsPath];

  let globalConfigStaged = false;
  try {
    const config = JSON.parse(await readFile(location.globalConfigPath, "utf8")) as unknown;
    if (isRecord(config)) {
      const kept = Object.fromEntries(STAGED_GLOBAL_CONFIG_KEYS.filter((k) => Object.hasOwn(config, k)).map((k) => [k, config[k]]));
      const target = join(homeDir, ".claude.json");
      await writeNew(target, `${JSON.stringify(kept, null, 2)}\n`, 0o600);
      owned.push(target);
      globalConfigStaged = true;
    }
  } catch {
    // Optional: the CLI creates .claude.json itself when it is missing (facts).
  }
  if (process.getuid?.() === 0) {
    for (const path of owned) await chown(path, options.uid ?? CONTAINER_UID, options.gid ?? CONTAINER_GID);
  }
  return { homeDir, credentialsPath, originalSha256: sha256(bytes), originalExpiresAt: facts.expiresAt!, globalConfigStaged };
}

/** The largest staged login read back: a real `.credentials.json` is well under 4 KiB. */
export const LOGIN_WRITE_BACK_LIMIT_BYTES = 64 * 1024;

/**
 * The staged copy as the container left it, read without following a link: the folder was
 * writable from inside the container, so the path may now name a symlink (to the host's own
 * files), a FIFO that would block, or a huge file. Anything but a regular file within the bound
 * is refused with a reason, never read.
 */
async function readStagedCopy(path: string): Promise<{ bytes: Buffer } | { refused: string }> {
  const st = await lstat(path);
  if (!st.isFile()) return { refused: `the staged login ${path} is no longer a regular file (a ${st.isSymbolicLink() ? "symlink" : "special file"}); the host login was not touched` };
  if (st.size > LOGIN_WRITE_BACK_LIMIT_BYTES)
    return { refused: `the staged login ${path} grew to ${st.size} bytes, above the ${LOGIN_WRITE_BACK_LIMIT_BYTES}-byte bound; the host login was not touched` };
  // O_NOFOLLOW closes the window between lstat and open; O_NONBLOCK keeps a swapped-in FIFO from blocking.
  const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const again = await handle.stat();
    if (!again.isFile() || again.size > LOGIN_WRITE_BACK_LIMIT_BYTES) return { refused: `the staged login ${path} changed while it was read; the host login was not touched` };
    const bytes = Buffer.alloc(LOGIN_WRITE_BACK_LIMIT_BYTES + 1);
    const { bytesRead } = await handle.read(bytes, 0, bytes.length, 0);
    if (bytesRead > LOGIN_WRITE_BACK_LIMIT_BYTES) return { refused: `the staged login ${path} grew past the ${LOGIN_WRITE_BACK_LIMIT_BYTES}-byte bound; the host login was not touched` };
    return { bytes: bytes.subarray(0, bytesRead) };
  } finally {
    await handle.close();
  }
}

export type WriteBackResult =
  | { action: "unchanged" }
  | { action: "written"; expiresAt: number }
  /** The staged copy changed but cannot be trusted; the host file was left alone. */
  | { action: "refused"; reason: string }
  /** The host file changed since staging (another process refreshed it); it was left alone. */
  | { action: "conflict"; reason: string };

/**
 * Copy a refresh made inside the container back to the host: only when the staged credentials
 * changed, still parse with an access token, and do not expire earlier; only when the host file is
 * still what was staged; atomically (temp + fsync + rename), mode 0600, keeping the host owner.
 */
export async function writeBackLogin(location: LoginLocation, staged: StagedLogin, options: { lock?: LoginLock } = {}): Promise<WriteBackResult> {
  let bytes: Buffer;
  try {
    const copy = await readStagedCopy(staged.credentialsPath);
    if ("refused" in copy) return { action: "refused", reason: copy.refused };
    bytes = copy.bytes;
  } catch (err) {
    return { action: "refused", reason: `the staged login ${staged.credentialsPath} is gone (${errnoCode(err)}); the host login was not touched` };
  }
  if (sha256(bytes) === staged.originalSha256) return { action: "unchanged" };
  const parsed = parseCredentials(bytes);
  if (!parsed.parses || !parsed.hasAccessToken || parsed.expiresAt === null) {
    return { action: "refused", reason: `the CLI changed the staged login ${staged.credentialsPath} into something without a usable token; the host login was not touched` };
  }
  if (parsed.expiresAt < staged.originalExpiresAt) {
    return { action: "refused", reason: `the staged login expires earlier (${new Date(parsed.expiresAt).toISOString()}) than the host login; the host login was not touched` };
  }
  if (options.lock?.compromised) {
    return { action: "refused", reason: `the lock on ${location.credentialsPath} was lost during the run; the refreshed login was not written back` };
  }
  const target = await realpath(location.credentialsPath);
  const hostBytes = await readFile(target);
  if (sha256(hostBytes) !== staged.originalSha256) {
    return { action: "conflict", reason: `the host login ${location.credentialsPath} changed while the attempt ran; it was left as it is` };
  }
  const host = await stat(target);
  const asRoot = process.getuid?.() === 0;
  await writeFileAtomic(target, bytes, { mode: 0o600, ...(asRoot ? { uid: host.uid, gid: host.gid } : {}) });
  return { action: "written", expiresAt: parsed.expiresAt };
}
