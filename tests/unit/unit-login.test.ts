/**
 * One login lock for every CLI run kind (src/credentials/unit-login.ts): the adjudicator's items
 * and the sessions' calls take the login the way the study's attempts do, so they too take over a
 * dead run's stale lock after `loginLockStaleMs` and say that they are waiting for a live one.
 */
import { describe, expect, it } from "vitest";
import { mkdir, realpath, utimes } from "node:fs/promises";
import { join } from "node:path";
import { Writable } from "node:stream";
import { runAdjudication } from "../../src/adjudicate/run.ts";
import { readRecord } from "../../src/adjudicate/store.ts";
import { acquireLoginLock, resolveLogin } from "../../src/credentials/login.ts";
import { LOGIN_LOCK_TIMEOUT_MS, unitLockOptions } from "../../src/credentials/unit-login.ts";
import { startSessions } from "../../src/session/run.ts";
import { makeSessionDemo } from "../../src/demo/sessions.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { fakeClaudeRuntime, UNIT_IMAGE, unitAdjudicationConfig, unitWorkspace } from "../support/unit-study.ts";

const ws = unitWorkspace("sr-unit-login-");

/** A login whose lock a dead run left behind: the lock folder last refreshed 10 s ago (stale after 2 s, fresh under the 30 s default). */
async function loginWithDeadLock(name: string): Promise<string> {
  const loginDir = join(ws.work, name);
  await writeTestLogin(loginDir);
  const lockDir = `${await realpath(join(loginDir, ".credentials.json"))}.lock`;
  await mkdir(lockDir);
  const tenSecondsAgo = new Date(Date.now() - 10_000);
  await utimes(lockDir, tenSecondsAgo, tenSecondsAgo);
  return loginDir;
}

/**
 * A login held by a live run (this test) until the unit says it is waiting for it (`heard`), or
 * at the latest after 5 s, so a unit that waits without a word still ends.
 */
async function loginHeldUntilHeard(name: string): Promise<{ loginDir: string; heard: (line: string) => void }> {
  const loginDir = join(ws.work, name);
  await writeTestLogin(loginDir);
  const held = await acquireLoginLock(resolveLogin({ configDir: loginDir }), { timeoutMs: 1000, holder: "held-by-the-test" });
  const timer = setTimeout(() => void held.release(), 5000);
  const heard = (line: string) => {
    if (!line.includes("waiting for the CLI login")) return;
    clearTimeout(timer);
    void held.release();
  };
  return { loginDir, heard };
}

function capture(heard?: (line: string) => void): { stream: Writable; text: () => string } {
  let text = "";
  const stream = new Writable({
    write(chunk, _encoding, done) {
      text += String(chunk);
      heard?.(String(chunk));
      done();
    },
  });
  return { stream, text: () => text };
}

interface LockSettings {
  loginLockTimeoutMs: number;
  loginLockStaleMs?: number;
}

async function adjudicate(name: string, loginDir: string, lock: LockSettings, heard?: (line: string) => void) {
  const runtime = fakeClaudeRuntime(() => 0);
  const stderr = capture(heard);
  const output = join(ws.work, `${name}.adjudication.json`);
  await runAdjudication(unitAdjudicationConfig({ ...ws, loginDir, output, overrides: lock }), { runtime, stdout: () => {}, stderr: stderr.stream });
  const record = await readRecord(output);
  return { record, stderr: stderr.text(), calls: runtime.created.filter((s) => !s.cmd.includes("--version")).length };
}

async function sessions(name: string, loginDir: string, lock: LockSettings, heard?: (line: string) => void) {
  const demo = await makeSessionDemo(join(ws.work, `${name}-sessions`));
  const runtime = fakeClaudeRuntime(() => 0);
  const said: string[] = [];
  const { ledger } = await startSessions(
    {
      manifestPath: demo.manifestPath,
      roots: new Map(Object.entries(demo.roots)),
      output: join(ws.work, `${name}.sessions.json`),
      model: "claude-sonnet-5-5",
      image: UNIT_IMAGE,
      expectedCliVersion: CLAUDE_CODE_VERSION,
      capUsd: 1,
      callBudgetUsd: 0.1,
      sessionBudgetUsd: 1,
      isolation: "offline",
      claudeConfigDir: loginDir,
      credentials: "login-copy",
      ...lock,
    },
    {
      runtime,
      say: (line) => {
        said.push(line);
        heard?.(line);
      },
    },
  );
  const waits = ledger.events.filter((e) => e.type === "account.lock_wait");
  return { said, waits, calls: runtime.created.filter((s) => !s.cmd.includes("--version")).length };
}

describe("the login lock of a CLI run kind's unit", () => {
  it("waits LOGIN_LOCK_TIMEOUT_MS when the run sets no timeout (also for the gateway's read, which passed an undefined timeout)", () => {
    expect(unitLockOptions({}).timeoutMs).toBe(LOGIN_LOCK_TIMEOUT_MS);
    expect(unitLockOptions({ timeoutMs: undefined, staleMs: 2000 })).toMatchObject({ timeoutMs: LOGIN_LOCK_TIMEOUT_MS, staleMs: 2000 });
  });

  it("the adjudicator takes over a dead run's stale lock after loginLockStaleMs instead of timing out", async () => {
    const loginDir = await loginWithDeadLock("login-adjudicate-stale");
    const { record, calls } = await adjudicate("stale", loginDir, { loginLockTimeoutMs: 300, loginLockStaleMs: 2000 });
    expect(record.statusReason ?? "").not.toMatch(/in use by another run/);
    expect(calls).toBeGreaterThan(0);
  });

  it("the adjudicator says it is waiting for the login, naming its holder", async () => {
    const { loginDir, heard } = await loginHeldUntilHeard("login-adjudicate-wait");
    const { stderr, calls } = await adjudicate("wait", loginDir, { loginLockTimeoutMs: 20_000 }, heard);
    expect(stderr).toMatch(/^study-runner adjudicate: waiting for the CLI login \(held by run held-by-the-test, pid \d+ on .* since .*\)$/m);
    expect(calls).toBeGreaterThan(0);
  });

  it("a session call takes over a dead run's stale lock after loginLockStaleMs instead of timing out", async () => {
    const loginDir = await loginWithDeadLock("login-sessions-stale");
    const { waits, calls } = await sessions("stale", loginDir, { loginLockTimeoutMs: 300, loginLockStaleMs: 2000 });
    expect(waits.length).toBeGreaterThan(0);
    expect(waits.every((e) => e.type === "account.lock_wait" && !e.gave_up)).toBe(true);
    expect(calls).toBeGreaterThan(0);
  });

  it("a session call says it is waiting for the login, naming its holder", async () => {
    const { loginDir, heard } = await loginHeldUntilHeard("login-sessions-wait");
    const { said, calls } = await sessions("wait", loginDir, { loginLockTimeoutMs: 20_000 }, heard);
    expect(said).toContainEqual(expect.stringMatching(/^waiting for the CLI login \(held by run held-by-the-test, pid \d+ on .* since .*\)$/));
    expect(calls).toBeGreaterThan(0);
  });
});
