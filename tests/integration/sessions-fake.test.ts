/**
 * Session tasks on the real Docker engine with the fake claude image: start, question, answer,
 * resume in a fresh container, done, tests; the 4th question, the session budget, a failed
 * resume, a foreign session_id; a runner killed between a question and its resume.
 */
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage } from "../../src/image/build.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { pico, picoToUsd, sumUsd } from "../../src/cost/money.ts";
import { acquireLoginLock, resolveLogin } from "../../src/credentials/login.ts";
import { answerSession } from "../../src/session/answer.ts";
import { resumeSessions, retrySession, startSessions, type StartConfig } from "../../src/session/run.ts";
import { readSessionLedger } from "../../src/session/store.ts";
import type { SessionLedger } from "../../src/session/schema.ts";
import { checkAnyLedger } from "../../src/session/check.ts";
import { FIXED_DISCOUNT, FIXED_INVOICE, makeSessionDemo, ROUNDING_QUESTION, type SessionDemo } from "../../src/demo/sessions.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { PLACEHOLDER_EXPIRES_AT } from "../../src/gateway/credential.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { runCli, runCompiledCli, runnerEntry } from "../support/cli.ts";
import { sessionTestConfig } from "../support/session-config.ts";
import { activeProfile } from "../../src/profile/load.ts";

const GENERATED_PRICE_TABLE = activeProfile().prices;

const MODEL = "claude-haiku-5-5";
const runtime = new DockerRuntime();
let image = "";
let work = "";
let demo: SessionDemo;
let loginDir = "";
let n = 0;

async function behaviour(attempts: Record<string, unknown>): Promise<string> {
  const path = join(work, `behaviour-${n++}.json`);
  await writeFile(path, JSON.stringify({ prices: GENERATED_PRICE_TABLE.models, attempts }), { mode: 0o644 });
  return path;
}

/** A manifest of the demo's first task only, with the given answers. */
async function manifest(answers: string[] | undefined, count = 1): Promise<string> {
  const m = JSON.parse(await readFile(demo.manifestPath, "utf8"));
  m.tasks = m.tasks.slice(0, count).map((t: Record<string, unknown>) => ({ ...t, answers }));
  if (answers === undefined) for (const t of m.tasks) delete t.answers;
  m.repositories = Object.fromEntries(Object.entries(m.repositories).filter(([k]) => m.tasks.some((t: { repository: string }) => t.repository === k)));
  const path = join(work, `manifest-${n++}.json`);
  await writeFile(path, JSON.stringify(m));
  return path;
}

async function config(manifestPath: string, behaviourFile: string, extra: Partial<StartConfig> = {}): Promise<StartConfig> {
  const records = join(work, `records-${n++}`);
  await mkdir(records, { mode: 0o777 });
  const { chmod } = await import("node:fs/promises");
  await chmod(records, 0o777);
  return sessionTestConfig({ manifestPath, roots: demo.roots, output: join(work, `ledger-${n++}.json`), model: MODEL, image, loginDir }, { fake: { behaviourFile, recordsDir: records }, ...extra });
}

const types = (l: SessionLedger) => l.events.map((e) => e.type);

/** `sessions start` of `c` (its manifest, the demo's roots, its output, the fake image, a 5 USD cap), then `runtimeArgs`. */
const startArgv = (c: StartConfig, runtimeArgs: string[]) => [
  "sessions",
  "start",
  "--manifest",
  c.manifestPath,
  ...Object.entries(demo.roots).flatMap(([k, v]) => ["--root", `${k}=${v}`]),
  "--output",
  c.output,
  "--image",
  image,
  "--cap-usd",
  "5",
  ...runtimeArgs,
];

beforeAll(async () => {
  image = (await buildImage(runtime, await fakeClaudeImageSpec())).id;
  work = await mkdtemp(join(tmpdir(), "sr-sessions-"));
  demo = await makeSessionDemo(join(work, "demo"));
  loginDir = join(work, "login");
  await writeTestLogin(loginDir);
}, 300_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe("a session over the fake image", () => {
  // contract: R281
  it("asks, is answered by its script, resumes the same session in a fresh container, edits survive, tests pass", async () => {
    const b = await behaviour({
      "0": {
        kind: "ok",
        session: {
          questions: 1,
          question: ROUNDING_QUESTION,
          edits: [
            { path: "NOTES.md", content: "first call\n", call: 0 },
            { path: "NOTES.md", append: "second call\n" },
            { path: "src/invoice.js", content: FIXED_INVOICE },
          ],
        },
      },
      "1": { kind: "ok", session: { questions: 1, edits: [{ path: "src/discount.js", content: FIXED_DISCOUNT }] } },
    });
    const c = await config(demo.manifestPath, b);
    const { exitCode, ledgerPath, ledger } = await startSessions(c, { runtime });
    expect(exitCode).toBe(0);
    expect(ledger.status).toBe("finished");
    const [s, t] = ledger.sessions;
    expect(s!.state).toBe("done");
    expect(t!.state).toBe("done");
    // Two calls, each with the runner's session id, and each in its own container.
    expect(s!.calls.map((x) => [x.mode, x.sessionIdReported, x.status, x.resultStatus])).toEqual([
      ["start", s!.id, "completed", "question"],
      ["resume", s!.id, "completed", "done"],
    ]);
    expect(new Set(s!.calls.map((x) => x.containerId)).size).toBe(2);
    // The cumulative cost: each call is charged its own part.
    const [one, two] = s!.calls;
    expect(two!.cliReportedCostUsd!).toBeGreaterThan(one!.cliReportedCostUsd!);
    expect(two!.callCostUsd!).toBeCloseTo(two!.cliReportedCostUsd! - one!.cliReportedCostUsd!, 12);
    // Each call is charged the larger of its own reported and computed cost (never the cumulative).
    for (const x of s!.calls) expect(x.chargedUsd!).toBeCloseTo(Math.max(x.callCostUsd!, x.callComputedCostUsd!), 9);
    expect(s!.spentUsd).toBeCloseTo(one!.chargedUsd! + two!.chargedUsd!, 9);
    expect(s!.spentUsd).toBeLessThan(one!.cliReportedCostUsd! + two!.cliReportedCostUsd!);
    expect(s!.questions).toEqual([
      expect.objectContaining({ cycle: 1, question: { untrusted: true, text: ROUNDING_QUESTION }, answer: expect.objectContaining({ source: "scripted", text: "2 decimal places" }) }),
    ]);
    // The test command passed only because the edit made in the resumed container is in the worktree.
    expect(s!.test).toMatchObject({ exitCode: 0, timedOut: false });
    expect(t!.test).toMatchObject({ exitCode: 0 });
    expect(types(ledger).filter((e) => !e.startsWith("account."))).toEqual([
      "harness.start",
      "harness.result",
      "harness.question",
      "harness.start",
      "harness.result",
      "harness.question",
      "harness.resume",
      "harness.result",
      "harness.test",
      "harness.resume",
      "harness.result",
      "harness.test",
    ]);
    expect(ledger.events.filter((e) => e.type === "account.lock_wait")).toHaveLength(4);
    // The worktree and the session files are removed when the session ends; the ledger is private.
    expect(s!.worktree).toBeNull();
    expect(await readdir(ledger.storageDir)).toEqual([]);
    expect((await stat(ledgerPath)).mode & 0o777).toBe(0o600);
    expect((await stat(ledger.storageDir)).mode & 0o777).toBe(0o700);
    expect(checkAnyLedger(ledgerPath, await readFile(ledgerPath)).valid).toBe(true);
    // What each container could write: its worktree and HOME, nothing else (the staged login
    // folder, written back with a login copy, is under HOME; the session files leave through the channel).
    const records = await Promise.all((await readdir(c.fake!.recordsDir!)).map(async (f) => JSON.parse(await readFile(join(c.fake!.recordsDir!, f), "utf8"))));
    expect(records).toHaveLength(4);
    for (const r of records) {
      expect(r.cwd).toBe("/workspace");
      expect(r.cwdWritable).toBe(true);
      expect(r.homeWritable).toBe(true);
      expect(
        Object.entries(r.writable)
          .filter(([, w]) => w === true)
          .map(([p]) => p)
          .sort(),
      ).toEqual(["/fake", "/home/agent/.study-runner/login"].filter((p) => p !== "/fake" || r.writable["/fake"]));
      expect(r.writable["/tmp"]).toBe(false);
      // A session's agent runs the repository's own commands: `localhost` keeps its name (contract R281).
      expect(r.localhostNamed).toBe(true);
    }
  }, 300_000);

  // contract: R116
  it("through the gateway: the login folder is read-only and holds a placeholder, the session files come back through the session channel, the resume finds them", async () => {
    const b = await behaviour({
      "0": {
        kind: "ok",
        session: { questions: 1, question: ROUNDING_QUESTION, edits: [{ path: "src/invoice.js", content: FIXED_INVOICE }] },
      },
    });
    const c = await config(await manifest(["2 decimal places"]), b, { credentials: "gateway" });
    const { exitCode, ledger } = await startSessions(c, { runtime });
    const s = ledger.sessions[0]!;
    expect(exitCode, JSON.stringify([s.state, s.stateReason])).toBe(0);
    expect(s.calls.map((x) => [x.mode, x.sessionIdReported, x.status, x.resultStatus])).toEqual([
      ["start", s.id, "completed", "question"],
      ["resume", s.id, "completed", "done"],
    ]);
    expect(s.test).toMatchObject({ exitCode: 0 });
    // The fake image sends no model request: every call went through the gateway, which metered nothing.
    expect(s.calls.map((x) => x.meteredCostUsd)).toEqual([0, 0]);
    const records = await Promise.all((await readdir(c.fake!.recordsDir!)).map(async (f) => JSON.parse(await readFile(join(c.fake!.recordsDir!, f), "utf8"))));
    expect(records).toHaveLength(2);
    for (const r of records) {
      expect(r.cwd).toBe("/workspace");
      expect(r.cwdWritable).toBe(true);
      expect(r.homeWritable).toBe(true);
      // The placeholder login, never the host's.
      expect(r.credentialsExpiresAt).toBe(PLACEHOLDER_EXPIRES_AT);
      // Nothing outside the worktree and HOME is writable (the test image's own records folder aside),
      // and the staged login folder in HOME is read-only.
      expect(
        Object.entries(r.writable)
          .filter(([, w]) => w === true)
          .map(([p]) => p)
          .sort(),
      ).toEqual(["/fake"].filter((p) => p !== "/fake" || r.writable["/fake"]));
      expect(r.writable["/tmp"]).toBe(false);
      expect(r.writable["/home/agent/.study-runner/login"]).toBe(false);
      // HOME, where the CLI keeps its session files until they leave through the channel, is off limits to the agent's edit tools.
      expect(r.argv).toEqual(expect.arrayContaining([expect.stringContaining("Write(//home/agent/**)")]));
    }
  }, 300_000);

  // contract: R141
  it("the session files leave through a channel the agent cannot write: the kernel refuses its new file, its open of the socket, its own connection and the wrapper's descriptor, and the resume finds the files", async () => {
    const b = await behaviour({
      "0": {
        kind: "ok",
        session: { questions: 1, question: ROUNDING_QUESTION, edits: [{ path: "src/invoice.js", content: FIXED_INVOICE }] },
      },
    });
    // The fake also lists the folder the session files used to leave through.
    await writeFile(b, JSON.stringify({ ...JSON.parse(await readFile(b, "utf8")), probePaths: ["/home/agent/.study-runner"] }), { mode: 0o644 });
    const c = await config(await manifest(["2 decimal places"]), b, { credentials: "gateway" });
    const { exitCode, ledger } = await startSessions(c, { runtime });
    const s = ledger.sessions[0]!;
    expect(exitCode, JSON.stringify([s.state, s.stateReason])).toBe(0);
    // The resume continued the session: its files came back through the channel.
    expect(s.calls.map((x) => [x.mode, x.status, x.resultStatus])).toEqual([
      ["start", "completed", "question"],
      ["resume", "completed", "done"],
    ]);
    const records = await Promise.all((await readdir(c.fake!.recordsDir!)).map(async (f) => JSON.parse(await readFile(join(c.fake!.recordsDir!, f), "utf8"))));
    expect(records).toHaveLength(2);
    // What a kernel says to a write it refuses: a read-only mount, no permission, a socket opened as a file, nothing listening.
    const refusals = ["EROFS", "EACCES", "EPERM", "ENXIO", "ECONNREFUSED", "ENOENT"];
    for (const r of records) {
      const ch = r.sessionChannel;
      expect(ch.absent, "the session channel's folder is in the container").toBe(false);
      expect(refusals).toContain(ch.newFile);
      // The socket the wrapper sends through: gone once the runner closed its listener, or refusing.
      expect(ch.socket).toBe("session.sock");
      expect(Object.keys(ch.openForWrite)).toContain(ch.socket);
      for (const code of Object.values<string>(ch.openForWrite)) expect(refusals).toContain(code);
      for (const code of Object.values<string>(ch.connect)) expect(refusals).toContain(code);
      // The wrapper (PID 1) holds the channel's connection: none of its sockets opens for writing.
      const held = ch.heldDescriptors as Record<string, string>;
      if (typeof held.listing === "string") expect(refusals).toContain(held.listing);
      else {
        expect(Object.keys(held).length, "the wrapper holds the channel's socket").toBeGreaterThan(0);
        for (const code of Object.values(held)) expect(refusals).toContain(code);
      }
      // And the old way out, a writable output folder in HOME, is gone.
      expect(r.listings["/home/agent/.study-runner"].entries).toEqual(["login"]);
    }
  }, 300_000);

  it("edits of the first call are in the worktree when the second call starts (parked, answered by a person, resumed)", async () => {
    const b = await behaviour({
      "0": {
        kind: "ok",
        session: {
          questions: 1,
          edits: [
            { path: "NOTES.md", content: "first call\n", call: 0 },
            { path: "NOTES.md", append: "second call\n" },
          ],
        },
      },
    });
    const c = await config(await manifest(undefined), b);
    const started = await startSessions(c, { runtime });
    expect(started.ledger.status).toBe("parked");
    const [s] = started.ledger.sessions;
    expect(s!.state).toBe("awaiting-answer");
    expect(await readFile(join(s!.worktree!, "NOTES.md"), "utf8")).toBe("first call\n");
    await answerSession(started.ledgerPath, s!.id, "two decimals");
    const resumed = await resumeSessions(started.ledgerPath, { isolation: "offline", claudeConfigDir: loginDir, fake: c.fake }, { runtime });
    expect(resumed.exitCode).toBe(0);
    const after = resumed.ledger.sessions[0]!;
    expect(after.state).toBe("done");
    expect(after.calls.map((x) => x.sessionIdReported)).toEqual([s!.id, s!.id]);
    expect(after.summary?.text).toMatch(/1 file\(s\) changed after 1 answer/);
    expect(after.questions[0]!.answer).toMatchObject({ source: "person", text: "two decimals" });
  }, 300_000);
});

describe("a session ends as the field notes' harness says", () => {
  // contract: R113
  it("the 4th question ends it too-many-questions; a retry is a new session, recorded as a retry, from a fresh worktree", async () => {
    // The first session edits and asks every time; its retry (the ledger's second session) finishes at once.
    const b = await behaviour({
      "0": { kind: "ok", session: { questions: 9, edits: [{ path: "NOTES.md", content: "from the ended session\n", call: 0 }] } },
      "1": { kind: "ok", session: { questions: 0, edits: [{ path: "src/invoice.js", content: FIXED_INVOICE }] } },
    });
    const c = await config(await manifest(["a", "b", "c"]), b);
    const { ledger, ledgerPath } = await startSessions(c, { runtime });
    const [s] = ledger.sessions;
    expect(s!.state).toBe("too-many-questions");
    expect(s!.calls).toHaveLength(4);
    expect(s!.questions).toHaveLength(4);
    expect(types(ledger).filter((e) => e === "harness.question")).toHaveLength(3);
    expect(ledger.events.at(-1)).toMatchObject({ type: "harness.too_many_questions", session: s!.id, questions: 4 });
    expect(s!.worktree).toBeNull();

    const options = { isolation: "offline" as const, claudeConfigDir: loginDir, fake: c.fake };
    const retried = await retrySession(ledgerPath, s!.taskId, options, { runtime });
    expect(retried.exitCode).toBe(0);
    const r = retried.session;
    expect(r).toMatchObject({ taskId: s!.taskId, attempt: 2, retryOf: s!.id, state: "done", test: { exitCode: 0 } });
    expect(r.id).not.toBe(s!.id);
    // Nothing of the ended session was handed on: its own session id, a first call, no questions carried over.
    expect(r.calls.map((x) => [x.mode, x.sessionIdReported])).toEqual([["start", r.id]]);
    expect(r.questions).toEqual([]);
    // Its worktree was a fresh export: the ended session's edit was not in it.
    const records = await Promise.all((await readdir(c.fake!.recordsDir!)).map(async (f) => JSON.parse(await readFile(join(c.fake!.recordsDir!, f), "utf8"))));
    const listingsOf = (attempt: string) => records.filter((x) => x.attempt === attempt).map((x) => x.listings["/workspace"].entries as string[]);
    expect(listingsOf("0").some((entries) => entries.includes("NOTES.md"))).toBe(true);
    expect(listingsOf("1")).toHaveLength(1);
    expect(listingsOf("1")[0]).not.toContain("NOTES.md");
    expect(retried.ledger.events.find((e) => e.type === "harness.start" && e.session === r.id)).toMatchObject({ attempt: 2, retry_of: s!.id });
    // The ended session stays as it was, and the ledger checks.
    expect(retried.ledger.sessions[0]).toMatchObject({ id: s!.id, state: "too-many-questions", attempt: 1 });
    expect(checkAnyLedger(ledgerPath, await readFile(ledgerPath)).valid).toBe(true);
    // `ledger check` refuses a retry that follows no ended session of its task.
    const edited = JSON.parse(await readFile(ledgerPath, "utf8"));
    edited.sessions[1].attempt = 3;
    const check = checkAnyLedger(ledgerPath, Buffer.from(JSON.stringify(edited)));
    expect(check.valid).toBe(false);
    expect(check.problems.join("\n")).toMatch(/sessions\[1\]\.retryOf: a retry must follow an earlier session of the same task/);
    // The task's latest session is done now: nothing to retry.
    await expect(retrySession(ledgerPath, s!.taskId, options, { runtime })).rejects.toThrow(/is done; only a session that ended too-many-questions or failed is retried/);
  }, 300_000);

  it("a session whose calls reached its budget parks budget-spent before any further call", async () => {
    const b = await behaviour({ "0": { kind: "ok", session: { questions: 1 } } });
    // Below one call's cost: the first call runs (the budget is checked before each call), the resume does not.
    const c = await config(await manifest(["x"]), b, { sessionBudgetUsd: 0.0001 });
    const { ledger, exitCode } = await startSessions(c, { runtime });
    expect(exitCode).toBe(0);
    const [s] = ledger.sessions;
    expect(s!.calls).toHaveLength(1);
    expect(s!.state).toBe("budget-spent");
    expect(s!.spentUsd).toBeGreaterThanOrEqual(0.0001);
    expect(ledger.events.at(-1)).toMatchObject({ type: "harness.budget_spent", session: s!.id, budget_usd: 0.0001 });
    expect(ledger.events.filter((e) => e.type === "harness.resume")).toHaveLength(0);
  }, 300_000);

  it("a failed resume ends the session failed, charged its reservation, and is never handed on", async () => {
    const b = await behaviour({ "0": { kind: "ok", session: { questions: 1, failResume: true } } });
    const c = await config(await manifest(["x"]), b);
    const { ledger, exitCode } = await startSessions(c, { runtime });
    expect(exitCode).toBe(1);
    const [s] = ledger.sessions;
    expect(s!.state).toBe("failed");
    const resume = s!.calls[1]!;
    // No result event at all: the transcript check makes it invalid-setup; either way it keeps its reservation charged.
    expect(resume).toMatchObject({ mode: "resume", status: "invalid-setup", chargedUsd: c.callBudgetUsd, sessionIdReported: null, exitCode: 1 });
    expect(s!.spentUsd).toBeCloseTo(s!.calls[0]!.chargedUsd! + c.callBudgetUsd, 9);
    expect(ledger.events.at(-1)).toMatchObject({ type: "harness.result", status: "invalid-setup", total_cost_usd: null, call_cost_usd: null });
    expect(ledger.sessions).toHaveLength(1);
    expect(ledger.status).toBe("blocked");
  }, 300_000);

  // contract: R126
  it("a result without session_id is invalid-setup, and ledger check refuses a completed call that reports none", async () => {
    const b = await behaviour({ "0": { kind: "ok", session: { questions: 0, resultSessionId: null } } });
    const { ledger, ledgerPath } = await startSessions(await config(await manifest(undefined), b), { runtime });
    const [s] = ledger.sessions;
    expect(s!.calls[0]).toMatchObject({ status: "invalid-setup", sessionIdReported: null, statusReason: `the result has no session_id; the session's is ${s!.id}` });
    expect(s!.state).toBe("failed");
    const bytes = await readFile(ledgerPath);
    expect(checkAnyLedger(ledgerPath, bytes).valid).toBe(true);
    // The same call recorded completed, as a runner that accepted it would have: refused, naming the field.
    const json = JSON.parse(bytes.toString("utf8"));
    Object.assign(json.sessions[0].calls[0], { status: "completed", statusReason: null });
    const check = checkAnyLedger(ledgerPath, Buffer.from(JSON.stringify(json)));
    expect(check.valid).toBe(false);
    expect(check.problems.join("\n")).toMatch(/sessions\[0\]\.calls\[0\]\.sessionIdReported: is null; a completed call's result must report the session's id /);
  }, 300_000);

  it("a result with another session_id is invalid-setup", async () => {
    const b = await behaviour({ "0": { kind: "ok", session: { questions: 0, sessionId: "00000000-0000-4000-8000-000000000000" } } });
    const { ledger } = await startSessions(await config(await manifest(undefined), b), { runtime });
    expect(ledger.sessions[0]!.calls[0]).toMatchObject({ status: "invalid-setup", sessionIdReported: "00000000-0000-4000-8000-000000000000" });
    expect(ledger.sessions[0]!.state).toBe("failed");
  }, 300_000);
});

describe("a runner killed between a question and its resume", () => {
  it("loses nothing: `resume` continues the answered session", async () => {
    const b = await behaviour({ "0": { kind: "ok", session: { questions: 1, edits: [{ path: "src/invoice.js", content: FIXED_INVOICE }] } } });
    const c = await config(await manifest(undefined), b);
    const started = await startSessions(c, { runtime });
    const ledgerPath = started.ledgerPath;
    await answerSession(ledgerPath, "invoice-rounding", "two decimals");
    // Hold the login so the resume waits before it reserves anything, then SIGKILL it there.
    const lock = await acquireLoginLock(resolveLogin({ configDir: loginDir }), { timeoutMs: 5_000 });
    const child = spawn(process.execPath, [await runnerEntry(), "resume", ledgerPath, "--claude-config-dir", loginDir, "--isolation", "offline", "--fake-behaviour", b, "--quiet"], {
      stdio: "ignore",
    });
    await new Promise((r) => setTimeout(r, 4_000));
    child.kill("SIGKILL");
    await new Promise((r) => child.once("exit", r));
    await lock.release();
    const killed = await readSessionLedger(ledgerPath);
    expect(killed.sessions[0]!.state).toBe("answered");
    expect(killed.sessions[0]!.calls).toHaveLength(1);
    const resumed = await resumeSessions(ledgerPath, { isolation: "offline", claudeConfigDir: loginDir, fake: c.fake }, { runtime });
    expect(resumed.exitCode).toBe(0);
    expect(resumed.ledger.sessions[0]).toMatchObject({ state: "done", test: { exitCode: 0 } });
    expect(resumed.ledger.sessions[0]!.calls.map((x) => x.sessionIdReported)).toEqual([killed.sessions[0]!.id, killed.sessions[0]!.id]);
  }, 300_000);
});

/** What a runner killed by a test left in the temporary folder (its folders are named with its pid). */
async function removeLeftovers(pid: number | undefined): Promise<void> {
  if (pid === undefined) return;
  const dir = tmpdir();
  for (const name of await readdir(dir)) if (name.startsWith("study-runner-") && name.includes(`-${pid}-`)) await rm(join(dir, name), { recursive: true, force: true });
}

describe("a session ledger proves itself", () => {
  const MANIFEST_TASK = "invoice-rounding";
  let ledgerPath = "";
  let ledger: SessionLedger;
  beforeAll(async () => {
    const b = await behaviour({ "0": { kind: "ok", session: { questions: 1, edits: [{ path: "src/invoice.js", content: FIXED_INVOICE }] } } });
    const started = await startSessions(await config(await manifest(["two decimals"]), b), { runtime });
    expect(started.exitCode).toBe(0);
    ledgerPath = started.ledgerPath;
    ledger = started.ledger;
    expect(ledger.sessions[0]!.calls).toHaveLength(2);
  }, 300_000);

  /** The ledger edited by `f`, written beside the original (no transcripts: `ledger check` reads the file alone). */
  async function edited(name: string, f: (l: SessionLedger) => void): Promise<string> {
    const l = JSON.parse(await readFile(ledgerPath, "utf8")) as SessionLedger;
    f(l);
    const path = join(work, `edited-${name}.json`);
    await writeFile(path, JSON.stringify(l, null, 2), { mode: 0o600 });
    return path;
  }
  const check = (path: string) => runCompiledCli(["ledger", "check", path]);

  // contract: R162
  it("keeps each call's transcript beside the ledger; `ledger verify` reads them again and agrees, and names an edited call", async () => {
    const dir = `${ledgerPath}.transcripts`;
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
    expect((await readdir(dir)).sort()).toEqual(["s0000-c0000.jsonl", "s0000-c0001.jsonl"]);
    const ok = await runCompiledCli(["ledger", "verify", ledgerPath]);
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(ok.stdout).toContain("observations: 2 (2 read again from their transcripts)");
    expect((await check(ledgerPath)).code).toBe(0);
    const l = JSON.parse(await readFile(ledgerPath, "utf8")) as SessionLedger;
    l.sessions[0]!.calls[1]!.outputTokens! += 1;
    await writeFile(ledgerPath, JSON.stringify(l, null, 2));
    const r = await runCompiledCli(["ledger", "verify", ledgerPath]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/sessions\[0\]\.calls\[1\]\.outputTokens: ledger \d+, transcript gives \d+/);
    l.sessions[0]!.calls[1]!.outputTokens! -= 1;
    await writeFile(ledgerPath, JSON.stringify(l, null, 2));
  });

  // contract: R191
  it("`report` on it says it is a session ledger and points to `sessions status`, instead of listing schema differences", async () => {
    const r = await runCompiledCli(["report", "--ledger", ledgerPath]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain(`study-runner: ${ledgerPath} is a session ledger, not a study's ledger`);
    expect(r.stderr).toContain(`\`study-runner sessions status ${ledgerPath}\``);
    expect(r.stderr).not.toMatch(/problems:|does not match/);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
  });

  // contract: R149
  it("reservedUsd 0.7 with no call open: `ledger check` names the open reservations", async () => {
    const r = await check(await edited("reserved", (l) => (l.budget.reservedUsd = 0.7)));
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/budget\.reservedUsd: is 0\.7 USD, but the open calls reserve 0 USD \(R149 open-reservations\)/);
  });

  // contract: R150
  it("a cap below the spend with cumulativeCapExceeded false: `ledger check` names the flag", async () => {
    const r = await check(await edited("cap", (l) => (l.capUsd = picoToUsd(pico(l.budget.spentUsd) / 2n))));
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/budget\.cumulativeCapExceeded: is false although spentUsd [0-9.]+ USD passed the cap [0-9.]+ USD \(R150 cap-flag\)/);
  });

  // contract: R147
  it("a completed call charged below its computed cost: `ledger check` names the charge", async () => {
    const r = await check(await edited("computed", (l) => (l.sessions[0]!.calls[0]!.callComputedCostUsd = sumUsd([l.sessions[0]!.calls[0]!.callComputedCostUsd!, 0.01]))));
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/sessions\[0\]\.calls\[0\]\.chargedUsd: is [0-9.]+ USD, but a completed run is charged the larger of its reported and computed cost/);
  });

  // contract: R152
  it("harness.result with call_cost_usd 0.9: `ledger check` names the event that disagrees with its call", async () => {
    const r = await check(
      await edited("event", (l) => {
        const e = l.events.find((x) => x.type === "harness.result")!;
        if (e.type === "harness.result") e.call_cost_usd = 0.9;
      }),
    );
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/sessions\[0\]\.calls\[0\]: its harness\.result gives call_cost_usd 0\.9, the call records [0-9.]+ \(R152 events-follow-calls\)/);
  });

  // contract: R152
  it("the questions tripled: `ledger check` names the questions no call asked", async () => {
    const r = await check(
      await edited("questions", (l) => {
        const q = l.sessions[0]!.questions[0]!;
        l.sessions[0]!.questions = [q, { ...q, cycle: 2 }, { ...q, cycle: 3 }];
      }),
    );
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/sessions\[0\]\.questions: holds 3, but 1 call\(s\) ended with a question/);
    expect(r.stdout).toMatch(/sessions\[0\]\.questions: holds 3, but the events record 1/);
  });

  // contract: R110
  it("the session id is on disk before the first container is launched: a runner stopped just before the launch leaves it in the ledger and no container", async () => {
    const b = await behaviour({ "0": { kind: "ok", session: { questions: 0 } } });
    const c = await config(await manifest(undefined), b);
    let killedPid: number | undefined;
    const killed = await runCli(startArgv(c, ["--claude-config-dir", loginDir, "--isolation", "offline", "--credentials", "login-copy", "--fake-behaviour", b, "--quiet"]), {
      env: { STUDY_MODEL: MODEL, STUDY_RUNNER_TEST_KILL_AT: "before-container-start" },
      timeoutMs: 240_000,
      onSpawn: (pid) => (killedPid = pid),
    });
    await removeLeftovers(killedPid);
    expect(killed.code).not.toBe(0);
    const onDisk = await readSessionLedger(c.output);
    const [s] = onDisk.sessions;
    expect(s!.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(s!.calls).toEqual([expect.objectContaining({ mode: "start", phase: "running", containerId: null, sessionIdReported: null })]);
    expect(onDisk.events.filter((e) => e.type === "harness.start")).toEqual([expect.objectContaining({ session: s!.id })]);
    // Nothing of this run was launched.
    expect(await runtime.listByLabel({ [LABELS.run]: onDisk.runId })).toEqual([]);
  }, 300_000);

  // contract: R160
  it("a runner killed during a session call: `ledger check` names the open call; `resume` settles it failed with its reservation charged and its harness.result, blocked, exit 1", async () => {
    const b = await behaviour({ "0": { kind: "ok", delayMs: 3000, session: { questions: 1 } } });
    const c = await config(await manifest(["x"]), b);
    const pids: number[] = [];
    const cli = (args: string[], env: Record<string, string> = {}) => runCli(args, { env: { STUDY_MODEL: MODEL, ...env }, timeoutMs: 240_000, onSpawn: (pid) => pids.push(pid) });
    // The killed runner's login lock is taken over after 2 s instead of 30 s: `resume` waits that long for it.
    const fastStale = ["--test-login-lock-stale-ms", "2000"];
    const runtimeArgs = [
      "--claude-config-dir",
      loginDir,
      "--isolation",
      "offline",
      "--credentials",
      "login-copy",
      "--fake-behaviour",
      b,
      "--fake-records",
      c.fake!.recordsDir!,
      "--quiet",
      ...fastStale,
    ];
    const killed = await cli(startArgv(c, runtimeArgs), { STUDY_RUNNER_TEST_KILL_AT: "during-attempt" });
    expect(killed.code).not.toBe(0);
    const open = await readSessionLedger(c.output);
    const s = open.sessions[0]!;
    expect(s.calls.map((x) => x.phase)).toEqual(["running"]);
    try {
      const checked = await cli(["ledger", "check", c.output]);
      expect(checked.code, checked.stdout).toBe(4);
      expect(checked.stdout).toContain(`open: session ${s.id} (${MANIFEST_TASK}) call 0 (phase running, 0.5 USD reserved)`);
      expect(checked.stdout).toMatch(/`study-runner resume` settles it \(failed, the reservation charged\) and exits 1/);

      const resumed = await cli(["resume", c.output, ...runtimeArgs]);
      expect(resumed.code, resumed.stderr).toBe(1);
      const after = await readSessionLedger(c.output);
      expect(after.status).toBe("blocked");
      expect(after.statusReason).toContain(`call 0 of session ${s.id} (${MANIFEST_TASK}) was left open by a runner that stopped`);
      expect(after.sessions[0]).toMatchObject({ state: "failed" });
      expect(after.sessions[0]!.calls[0]).toMatchObject({ phase: "settled", status: "failed", chargedUsd: 0.5 });
      expect(after.budget).toMatchObject({ reservedUsd: 0, spentUsd: 0.5 });
      expect(after.events.filter((e) => e.type === "harness.result")).toEqual([expect.objectContaining({ session: s.id, status: "failed" })]);
      expect(JSON.parse(resumed.stdout)).toMatchObject({ status: "blocked", sessions: [{ state: "failed" }] });
      expect((await cli(["ledger", "check", c.output])).code).toBe(0);
      // A second resume has nothing left to settle or run: the failed session stays ended.
      const again = await cli(["resume", c.output, ...runtimeArgs]);
      expect(again.code, again.stderr).toBe(0);
    } finally {
      // The killed runner's container outlived it.
      for (const x of await runtime.listByLabel({ [LABELS.run]: open.runId })) await runtime.remove(x.id).catch(() => undefined);
      for (const pid of pids) await removeLeftovers(pid);
    }
  }, 300_000);
});
