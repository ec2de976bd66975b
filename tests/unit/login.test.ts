import { lstat, mkdir, mkdtemp, readdir, readFile, readlink, realpath, rm, stat, symlink, writeFile } from "node:fs/promises";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { acquireLoginLock, LOGIN_WRITE_BACK_LIMIT_BYTES, inspectLogin, resolveLogin, stageLogin, writeBackLogin, type LoginLocation, type LoginLock } from "../../src/credentials/login.ts";
import { RefusalError } from "../../src/util/errors.ts";

const ACCESS = "test-oat-ACCESS-TOKEN-NEVER-PRINTED";
const REFRESH = "test-ort-REFRESH-TOKEN-NEVER-PRINTED";
const HOUR = 3_600_000;

function credentials(expiresAt: number, access = ACCESS, refresh = REFRESH): string {
  return JSON.stringify({
    claudeAiOauth: { accessToken: access, refreshToken: refresh, expiresAt, scopes: ["user:inference", "user:profile"], subscriptionType: "pro" },
  });
}

function expectNoToken(text: string): void {
  expect(text).not.toContain("ACCESS-TOKEN");
  expect(text).not.toContain("REFRESH-TOKEN");
}

let base: string;
let home: string;
let location: LoginLocation;
const locks: LoginLock[] = [];

beforeEach(async () => {
  base = await realpath(await mkdtemp(join(tmpdir(), "login-")));
  home = join(base, "home");
  await mkdir(join(home, ".claude"), { recursive: true });
  location = resolveLogin({ env: {}, homeDir: home });
  await writeFile(location.credentialsPath, credentials(Date.now() + HOUR), { mode: 0o600 });
});

afterEach(async () => {
  for (const lock of locks.splice(0)) await lock.release();
  await rm(base, { recursive: true, force: true });
});

describe("resolveLogin", () => {
  it("uses ~/.claude and ~/.claude.json, then $CLAUDE_CONFIG_DIR, then the flag", () => {
    expect(resolveLogin({ env: {}, homeDir: "/h" })).toEqual({
      credentialsPath: "/h/.claude/.credentials.json",
      globalConfigPath: "/h/.claude.json",
      source: "home",
    });
    expect(resolveLogin({ env: { CLAUDE_CONFIG_DIR: "/cfg" }, homeDir: "/h" })).toEqual({
      credentialsPath: "/cfg/.credentials.json",
      globalConfigPath: "/cfg/.claude.json",
      source: "CLAUDE_CONFIG_DIR",
    });
    expect(resolveLogin({ configDir: "/flag", env: { CLAUDE_CONFIG_DIR: "/cfg" }, homeDir: "/h" })).toMatchObject({
      credentialsPath: "/flag/.credentials.json",
      source: "flag",
    });
  });
});

describe("inspectLogin", () => {
  it("reports a usable login without its token", async () => {
    const expiresAt = Date.now() + HOUR;
    await writeFile(location.credentialsPath, credentials(expiresAt));
    const facts = await inspectLogin(location);
    expect(facts).toMatchObject({ exists: true, parses: true, hasAccessToken: true, hasRefreshToken: true, expiresAt, expired: false, subscriptionType: "pro", problems: [] });
    expectNoToken(JSON.stringify(facts));
  });

  it("reports an expired login with the time and the fix", async () => {
    await writeFile(location.credentialsPath, credentials(Date.parse("2026-01-01T00:00:00Z")));
    const facts = await inspectLogin(location, { now: Date.parse("2026-11-30T00:00:00Z") });
    expect(facts.expired).toBe(true);
    expect(facts.problems).toEqual([
      `the Claude login ${location.credentialsPath} expired at 2026-01-01T00:00:00.000Z; run \`claude\` on this machine and log in, or point the runner at the folder that holds the login`,
    ]);
  });

  it("reports a missing file, a file without a token, and a damaged file without quoting it", async () => {
    const missing = await inspectLogin(resolveLogin({ configDir: join(base, "nowhere") }));
    expect(missing.exists).toBe(false);
    expect(missing.problems.join()).toMatch(/no Claude login at .*nowhere\/\.credentials\.json \(ENOENT\)/);

    await writeFile(location.credentialsPath, JSON.stringify({ claudeAiOauth: { refreshToken: REFRESH, expiresAt: Date.now() + HOUR } }));
    const noAccess = await inspectLogin(location);
    expect(noAccess.problems.join()).toMatch(/has no claudeAiOauth\.accessToken/);
    expectNoToken(JSON.stringify(noAccess));

    // V8's JSON.parse error would quote the token; the facts must not.
    await writeFile(location.credentialsPath, credentials(Date.now() + HOUR).slice(0, -3));
    const damaged = await inspectLogin(location);
    expect(damaged.parses).toBe(false);
    expect(damaged.problems.join()).toMatch(/is not valid JSON/);
    expectNoToken(JSON.stringify(damaged));
  });
});

describe("acquireLoginLock", () => {
  it("makes a second acquirer wait, then refuse after the timeout naming the holder", async () => {
    locks.push(await acquireLoginLock(location, { timeoutMs: 1000, holder: "run-A" }));
    const started = Date.now();
    const err = await acquireLoginLock(location, { timeoutMs: 400, holder: "run-B" }).catch((e: unknown) => e);
    const waited = Date.now() - started;
    expect(err).toBeInstanceOf(RefusalError);
    expect(waited).toBeGreaterThanOrEqual(380);
    const message = String(err);
    expect(message).toContain(`the Claude login ${location.credentialsPath} is in use by another run (held by run run-A, pid ${process.pid}`);
    expect(message).toMatch(/waited 400 ms/);
    expectNoToken(message);
  });

  it("hands the lock to a waiting acquirer once the holder releases it", async () => {
    const first = await acquireLoginLock(location, { timeoutMs: 1000, holder: "run-A" });
    setTimeout(() => void first.release(), 200);
    const started = Date.now();
    const second = await acquireLoginLock(location, { timeoutMs: 5000, pollMs: 50, holder: "run-B" });
    locks.push(second);
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
    expect(second.compromised).toBeUndefined();
    const third = await acquireLoginLock(location, { timeoutMs: 100, holder: "run-C" }).catch((e: unknown) => e);
    expect(String(third)).toMatch(/held by run run-B/);
  });

  it("leaves nothing behind after release", async () => {
    const lock = await acquireLoginLock(location, { timeoutMs: 1000 });
    expect((await readdir(join(home, ".claude"))).sort()).toEqual([".credentials.json", ".credentials.json.lock", ".credentials.json.lock-holder.json"]);
    await lock.release();
    expect(await readdir(join(home, ".claude"))).toEqual([".credentials.json"]);
  });

  it("refuses when there is no login to lock", async () => {
    await expect(acquireLoginLock(resolveLogin({ configDir: join(base, "none") }), { timeoutMs: 100 })).rejects.toThrow(/no Claude login at/);
  });
});

describe("stageLogin", () => {
  it("copies the login into a fresh HOME: folders 0700, files 0600, owned by the container user", async () => {
    await writeFile(
      location.globalConfigPath,
      JSON.stringify({ userID: "u1", hasCompletedOnboarding: true, oauthAccount: { emailAddress: "a@example.invalid" }, projects: { "/secret/project": { history: ["private prompt"] } } }),
    );
    const target = join(base, "attempt-1", "home");
    await mkdir(join(base, "attempt-1"));
    const staged = await stageLogin(location, target);
    expect(await readFile(staged.credentialsPath, "utf8")).toBe(await readFile(location.credentialsPath, "utf8"));
    expect(staged.credentialsPath).toBe(join(target, ".claude", ".credentials.json"));
    for (const [path, mode] of [
      [target, 0o700],
      [join(target, ".claude"), 0o700],
      [staged.credentialsPath, 0o600],
      [join(target, ".claude.json"), 0o600],
    ] as const) {
      const s = await stat(path);
      expect(s.mode & 0o777, path).toBe(mode);
      if (process.getuid?.() === 0) expect([s.uid, s.gid], path).toEqual([1000, 1000]);
    }
    // Only account state is staged, never the host user's project history.
    const config = JSON.parse(await readFile(join(target, ".claude.json"), "utf8"));
    expect(config).toEqual({ userID: "u1", hasCompletedOnboarding: true, oauthAccount: { emailAddress: "a@example.invalid" } });
    expect(staged.globalConfigStaged).toBe(true);
    expectNoToken(JSON.stringify(staged));
  });

  it("refuses a HOME that already exists and an expired login, without the token in the message", async () => {
    await mkdir(join(base, "used"));
    await expect(stageLogin(location, join(base, "used"))).rejects.toThrow(/must be a new folder/);
    await writeFile(location.credentialsPath, credentials(Date.now() - HOUR));
    const err = await stageLogin(location, join(base, "fresh")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RefusalError);
    expect(String(err)).toMatch(/expired at/);
    expectNoToken(String(err));
    await expect(lstat(join(base, "fresh"))).rejects.toThrow(/ENOENT/);
  });
});

describe("writeBackLogin", () => {
  async function staged() {
    return stageLogin(location, join(base, `home-${Math.random().toString(16).slice(2)}`));
  }

  it("never touches the host file when the CLI did not change the copy", async () => {
    const before = await stat(location.credentialsPath);
    const s = await staged();
    expect(await writeBackLogin(location, s)).toEqual({ action: "unchanged" });
    const after = await stat(location.credentialsPath);
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
  });

  it("writes a refreshed login back atomically (new inode, mode 0600, no temp file left)", async () => {
    const before = await stat(location.credentialsPath);
    const s = await staged();
    const refreshed = credentials(Date.now() + 8 * HOUR, "test-oat-NEW-ACCESS-TOKEN-NEVER-PRINTED", "test-ort-NEW-REFRESH-TOKEN-NEVER-PRINTED");
    await writeFile(s.credentialsPath, refreshed);
    const result = await writeBackLogin(location, s);
    expect(result.action).toBe("written");
    expectNoToken(JSON.stringify(result));
    expect(await readFile(location.credentialsPath, "utf8")).toBe(refreshed);
    const after = await stat(location.credentialsPath);
    expect(after.ino).not.toBe(before.ino); // renamed over, not rewritten in place
    expect(after.mode & 0o777).toBe(0o600);
    expect(await readdir(join(home, ".claude"))).toEqual([".credentials.json"]);
  });

  it("writes through a symlinked login to its real file and keeps the symlink", async () => {
    const real = join(base, "real-login");
    await mkdir(real);
    await writeFile(join(real, ".credentials.json"), credentials(Date.now() + HOUR), { mode: 0o600 });
    const linkDir = join(base, "linked");
    await mkdir(linkDir);
    await symlink(join(real, ".credentials.json"), join(linkDir, ".credentials.json"));
    const linked = resolveLogin({ configDir: linkDir });
    const s = await stageLogin(linked, join(base, "home-linked"));
    const refreshed = credentials(Date.now() + 8 * HOUR);
    await writeFile(s.credentialsPath, refreshed);
    expect((await writeBackLogin(linked, s)).action).toBe("written");
    expect(await readlink(join(linkDir, ".credentials.json"))).toBe(join(real, ".credentials.json"));
    expect(await readFile(join(real, ".credentials.json"), "utf8")).toBe(refreshed);
  });

  it("refuses a changed copy that does not parse, lost its token or expires earlier, leaving the host file alone", async () => {
    const original = await readFile(location.credentialsPath, "utf8");
    for (const [content, reason] of [
      [credentials(Date.now() + HOUR).slice(0, -2), /without a usable token/],
      [JSON.stringify({ claudeAiOauth: { refreshToken: REFRESH, expiresAt: Date.now() + 9 * HOUR } }), /without a usable token/],
      [credentials(Date.now() - HOUR), /expires earlier/],
    ] as const) {
      const s = await staged();
      await writeFile(s.credentialsPath, content);
      const result = await writeBackLogin(location, s);
      expect(result.action).toBe("refused");
      expect(JSON.stringify(result)).toMatch(reason);
      expectNoToken(JSON.stringify(result));
      expect(await readFile(location.credentialsPath, "utf8")).toBe(original);
    }
  });

  it("leaves a host login that changed meanwhile alone (conflict)", async () => {
    const s = await staged();
    const hostRefresh = credentials(Date.now() + 5 * HOUR, "test-oat-HOST-ACCESS-TOKEN-NEVER-PRINTED");
    await writeFile(location.credentialsPath, hostRefresh);
    await writeFile(s.credentialsPath, credentials(Date.now() + 8 * HOUR));
    const result = await writeBackLogin(location, s);
    expect(result.action).toBe("conflict");
    expect(await readFile(location.credentialsPath, "utf8")).toBe(hostRefresh);
  });

  it("refuses a staged copy replaced by a symlink, a FIFO or an oversized file, without following or reading it", async () => {
    const original = await readFile(location.credentialsPath, "utf8");
    // A symlink to a file that would be accepted: following it would write it to the host login.
    const bait = join(base, "bait.json");
    await writeFile(bait, credentials(Date.now() + 8 * HOUR));
    const linked = await staged();
    await rm(linked.credentialsPath);
    await symlink(bait, linked.credentialsPath);
    const fifo = await staged();
    await rm(fifo.credentialsPath);
    execFileSync("mkfifo", [fifo.credentialsPath]);
    const huge = await staged();
    // Valid JSON with a later expiry, padded past the bound.
    await writeFile(
      huge.credentialsPath,
      JSON.stringify({ claudeAiOauth: { accessToken: ACCESS, refreshToken: REFRESH, expiresAt: Date.now() + 9 * HOUR, pad: "x".repeat(LOGIN_WRITE_BACK_LIMIT_BYTES) } }),
    );
    for (const [s, reason] of [
      [linked, /symlink/],
      [fifo, /special file/],
      [huge, /above the 65536-byte bound/],
    ] as const) {
      const result = await writeBackLogin(location, s);
      expect(result.action).toBe("refused");
      expect(JSON.stringify(result)).toMatch(reason);
      expect(await readFile(location.credentialsPath, "utf8")).toBe(original);
    }
  });

  it("does not write back once the login lock was lost", async () => {
    const s = await staged();
    await writeFile(s.credentialsPath, credentials(Date.now() + 8 * HOUR));
    const lost = { path: location.credentialsPath, compromised: new Error("lock folder removed"), release: async () => undefined };
    const original = await readFile(location.credentialsPath, "utf8");
    expect((await writeBackLogin(location, s, { lock: lost })).action).toBe("refused");
    expect(await readFile(location.credentialsPath, "utf8")).toBe(original);
  });
});
