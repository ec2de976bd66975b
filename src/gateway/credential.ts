import { randomBytes } from "node:crypto";
import { chmod, chown, mkdir, open, readFile } from "node:fs/promises";
import { join } from "node:path";
import { RELOGIN, STAGED_GLOBAL_CONFIG_KEYS, type LoginLocation } from "../credentials/login.ts";
import { lockUnitLogin, type UnitLock } from "../credentials/unit-login.ts";
import { CONTAINER_GID, CONTAINER_UID } from "../util/container-socket.ts";
import { RefusalError } from "../util/errors.ts";

/**
 * Where the gateway's real credential comes from, and the placeholder login that goes into the
 * container instead. The runner never refreshes a login and never writes one back in this mode:
 * the host login is only read (under its lock, so a refresh by another run is never read half
 * written), and an attempt that could outlive the token is not started.
 */

export type CredentialSource =
  /** A long-lived token made with `claude setup-token`, given to the runner on the host. */
  | { kind: "setup-token"; token: string; origin: string }
  /** The access token of the host's CLI login. */
  | { kind: "host-login"; location: LoginLocation };

/** The variable a `claude setup-token` token is read from (the CLI's own name for it). */
export const SETUP_TOKEN_ENV = "CLAUDE_CODE_OAUTH_TOKEN";

/** Visible ASCII only, so no header or log line can be bent by it; the message never holds the value. */
function tokenProblem(token: string, origin: string): string | undefined {
  if (token === "") return `${origin} is empty`;
  if (!/^[\x21-\x7e]+$/.test(token)) return `${origin} holds a space, a line break or a character outside visible ASCII; it must hold the token alone`;
  if (token.length > 4096) return `${origin} is longer than 4096 characters; it must hold the token alone`;
  return undefined;
}

/**
 * The setup token from `--oauth-token-file` (first) or CLAUDE_CODE_OAUTH_TOKEN, else the host
 * login. The variable is removed from this process's environment once read: git and every other
 * child of the runner inherits the environment, and the token must reach none of them.
 */
export async function resolveCredentialSource(o: { tokenFile?: string; env?: NodeJS.ProcessEnv; login: LoginLocation }): Promise<CredentialSource> {
  const env = o.env ?? process.env;
  if (o.tokenFile !== undefined) {
    let text: string;
    try {
      text = (await readFile(o.tokenFile, "utf8")).trim();
    } catch (err) {
      throw new RefusalError(`--oauth-token-file ${o.tokenFile} cannot be read (${(err as NodeJS.ErrnoException).code ?? "error"}); give the file \`claude setup-token\` wrote the token into`);
    }
    const problem = tokenProblem(text, `--oauth-token-file ${o.tokenFile}`);
    if (problem) throw new RefusalError(problem);
    return { kind: "setup-token", token: text, origin: "file" };
  }
  const fromEnv = env[SETUP_TOKEN_ENV];
  if (fromEnv !== undefined) {
    delete env[SETUP_TOKEN_ENV];
    const problem = tokenProblem(fromEnv.trim(), SETUP_TOKEN_ENV);
    if (problem) throw new RefusalError(problem);
    return { kind: "setup-token", token: fromEnv.trim(), origin: "env" };
  }
  return { kind: "host-login", location: o.login };
}

/** The fix when the host login would expire during an attempt. */
export const REFRESH_HINT =
  "run `claude` on this machine once so it refreshes its login (the runner never refreshes one itself), or give a long-lived token made with `claude setup-token` (--oauth-token-file or CLAUDE_CODE_OAUTH_TOKEN)";

/**
 * The real token for one attempt that may run until `mustLastUntil` (ms since the epoch). A host
 * login that expires before then is refused: the CLI inside cannot refresh through the gateway,
 * and a token that dies mid-attempt would fail the attempt after its reservation.
 */
export async function readCredential(source: CredentialSource, o: { mustLastUntil: number; lock?: UnitLock }): Promise<{ token: string; expiresAt: number | null }> {
  if (source.kind === "setup-token") return { token: source.token, expiresAt: null };
  const path = source.location.credentialsPath;
  const lock = await lockUnitLogin(source.location, o.lock ?? {});
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (err) {
    throw new RefusalError(`no Claude login at ${path} (${(err as NodeJS.ErrnoException).code ?? "error"}); ${RELOGIN}`);
  } finally {
    await lock.release();
  }
  let oauth: Record<string, unknown> | undefined;
  try {
    const json = JSON.parse(bytes.toString("utf8")) as { claudeAiOauth?: unknown };
    if (typeof json.claudeAiOauth === "object" && json.claudeAiOauth !== null) oauth = json.claudeAiOauth as Record<string, unknown>;
  } catch {
    // V8's message would quote the token: say nothing of the content.
  }
  const token = typeof oauth?.accessToken === "string" ? oauth.accessToken : "";
  const expiresAt = typeof oauth?.expiresAt === "number" && Number.isFinite(oauth.expiresAt) ? oauth.expiresAt : null;
  if (token === "" || tokenProblem(token, "the access token") || expiresAt === null) {
    throw new RefusalError(`the Claude login ${path} has no usable claudeAiOauth.accessToken and expiresAt; ${RELOGIN}`);
  }
  if (expiresAt <= o.mustLastUntil) {
    throw new RefusalError(`the Claude login ${path} expires at ${new Date(expiresAt).toISOString()}, before the attempt's latest end ${new Date(o.mustLastUntil).toISOString()}; ${REFRESH_HINT}`);
  }
  return { token, expiresAt };
}

/** Far enough ahead that the CLI never tries to refresh the placeholder (it refreshes minutes before expiry, measured). */
export const PLACEHOLDER_EXPIRES_AT = Date.parse("2099-01-01T00:00:00Z");

/**
 * A HOME for the container whose login is a placeholder: the same shape as a real OAuth login
 * (so the CLI sends `Authorization: Bearer` with the oauth beta), a far-future expiry, and a
 * refresh token that is random and works nowhere. Only account and onboarding keys of the host's
 * `.claude.json` are staged, as in the login-copy mode. `homeDir` must not exist.
 */
export async function stagePlaceholderLogin(
  homeDir: string,
  placeholder: string,
  o: { globalConfigPath?: string; subscriptionType?: string; uid?: number; gid?: number } = {},
): Promise<{ homeDir: string; credentialsPath: string }> {
  await mkdir(homeDir, { mode: 0o700 });
  await chmod(homeDir, 0o700);
  const claudeDir = join(homeDir, ".claude");
  await mkdir(claudeDir, { mode: 0o700 });
  const credentialsPath = join(claudeDir, ".credentials.json");
  const login = {
    claudeAiOauth: {
      accessToken: placeholder,
      refreshToken: `study-runner-no-refresh-${randomBytes(16).toString("hex")}`,
      expiresAt: PLACEHOLDER_EXPIRES_AT,
      scopes: ["user:inference", "user:profile"],
      subscriptionType: o.subscriptionType ?? "pro",
    },
  };
  const owned = [homeDir, claudeDir, credentialsPath];
  await writeNew(credentialsPath, JSON.stringify(login));
  if (o.globalConfigPath) {
    try {
      const config = JSON.parse(await readFile(o.globalConfigPath, "utf8")) as Record<string, unknown>;
      if (typeof config === "object" && config !== null && !Array.isArray(config)) {
        const kept = Object.fromEntries(STAGED_GLOBAL_CONFIG_KEYS.filter((k) => Object.hasOwn(config, k)).map((k) => [k, config[k]]));
        await writeNew(join(homeDir, ".claude.json"), `${JSON.stringify(kept, null, 2)}\n`);
        owned.push(join(homeDir, ".claude.json"));
      }
    } catch {
      // Optional: the CLI creates .claude.json itself.
    }
  }
  if (process.getuid?.() === 0) for (const p of owned) await chown(p, o.uid ?? CONTAINER_UID, o.gid ?? CONTAINER_GID);
  return { homeDir, credentialsPath };
}

async function writeNew(path: string, data: string): Promise<void> {
  const handle = await open(path, "wx", 0o600);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
}
