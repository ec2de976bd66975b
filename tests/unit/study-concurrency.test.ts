import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { access, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FakeProcess, FakeRuntime } from "../support/fake-runtime.ts";
import { runStudy } from "../../src/study/run.ts";
import { fakeClaudeRuntime, unitStudyConfig } from "../support/unit-study.ts";
import { concurrencyProblem, rateLimitStatus, sharedHold } from "../../src/study/attempts.ts";
import { loadManifest, type LoadedManifest } from "../../src/manifest/load.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { LedgerSchema } from "../../src/ledger/schema.ts";
import { ExitCode, RefusalError } from "../../src/util/errors.ts";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { baseEvents, toText } from "./transcript-fixtures.ts";

/**
 * The study's attempts in flight on the in-memory runtime: the real loop, ledger file, export,
 * login staging and transcript rules, with containers that are functions that take a while.
 */

let work: string;
let loaded: LoadedManifest;
let roots: Map<string, string>;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-unit-conc-"));
  const corpus = await makeDemoCorpus(join(work, "corpus"));
  roots = new Map(Object.entries(corpus).map(([n, { dir }]) => [n, dir]));
  loaded = await loadManifest(DEMO_MANIFEST);
});
afterAll(() => rm(work, { recursive: true, force: true }));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function runtimeWith(attempt: (n: number, proc: FakeProcess) => Promise<number> | number, o: { fakeImage?: boolean } = {}) {
  const seen = { max: 0, running: 0 };
  const runtime = fakeClaudeRuntime(async (n, proc) => {
    seen.max = Math.max(seen.max, ++seen.running);
    try {
      return await attempt(n, proc);
    } finally {
      seen.running--;
    }
  }, o);
  return { runtime, seen };
}

const answer = (proc: FakeProcess, events = baseEvents("repository")) => {
  proc.stdout.write(toText(events));
  return 0;
};

async function run(name: string, runtime: FakeRuntime, o: { attempts?: number; capUsd?: number; concurrency?: number } = {}) {
  const loginDir = join(work, `login-${name}`);
  await writeTestLogin(loginDir);
  const config = unitStudyConfig({ work, name, loaded, roots, loginDir, attempts: o.attempts ?? 6, overrides: { capUsd: o.capUsd ?? 1, concurrency: o.concurrency } });

  // Read the ledger file over and over while the run goes on: every state a crash could leave.
  const snapshots: unknown[] = [];
  let done = false;
  const poll = (async () => {
    while (!done) {
      const text = await readFile(config.output, "utf8").catch(() => undefined);
      if (text !== undefined) {
        try {
          snapshots.push(JSON.parse(text));
        } catch {
          // The file is created empty and then filled (exclusive create); every later write is an
          // atomic rename, so a torn file after the first complete one is a failure.
          if (snapshots.length > 0) snapshots.push({ torn: text.length });
        }
      }
      await sleep(2);
    }
  })();
  let stdout = "";
  try {
    const code = await runStudy(config, { runtime, stdout: (t) => (stdout += t), stderr: process.stderr });
    return { code, summary: JSON.parse(stdout), ledger: await readLedger(config.output), snapshots, output: config.output };
  } finally {
    done = true;
    await poll;
  }
}

/** Every snapshot is a valid ledger whose open reservations plus settled charges stayed under the cap. */
function expectEverySnapshotValid(snapshots: unknown[], capUsd: number, concurrency: number) {
  expect(snapshots.length).toBeGreaterThan(3);
  let maxOpen = 0;
  for (const s of snapshots) {
    const parsed = LedgerSchema.safeParse(s);
    expect(parsed.success, JSON.stringify(parsed.error?.issues)).toBe(true);
    const l = parsed.data!;
    const open = l.observations.filter((o) => o.phase !== "settled");
    const held = open.reduce((t, o) => t + o.reservationUsd, 0) + l.observations.reduce((t, o) => t + (o.chargedUsd ?? 0), 0);
    expect(held).toBeLessThanOrEqual(capUsd + 1e-9);
    expect(open.length).toBeLessThanOrEqual(concurrency);
    maxOpen = Math.max(maxOpen, open.length);
  }
  return maxOpen;
}

describe("--concurrency and the login copy", () => {
  // contract: R109
  it("refuses --concurrency 2 when attempts get a copy of the real login, saying why, before any ledger exists", async () => {
    const { runtime } = runtimeWith((_, proc) => answer(proc), { fakeImage: false });
    const err = await run("refused", runtime, { concurrency: 2 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RefusalError);
    expect((err as Error).message).toMatch(/--concurrency 2 is refused: .*same single-use refresh token/);
    await expect(access(join(work, "refused.ledger.json"))).rejects.toThrow();
    expect(runtime.created.filter((s) => !s.cmd.includes("--version"))).toHaveLength(0);
  });

  it("the rule is one function: refused only for a real login copied into attempts", () => {
    expect(concurrencyProblem({ concurrency: 1, credentials: "login-copy", modelApi: "anthropic" })).toBeNull();
    expect(concurrencyProblem({ concurrency: 4, credentials: "login-copy", modelApi: "test" })).toBeNull();
    expect(concurrencyProblem({ concurrency: 4, credentials: "gateway", modelApi: "anthropic" })).toBeNull();
    expect(concurrencyProblem({ concurrency: 4, credentials: "login-copy", modelApi: "anthropic" })).toMatch(/refresh token/);
  });
});

describe("attempts in flight on the in-memory runtime", () => {
  it("runs up to N attempts at once with the ledger valid at every moment and the same contents as one at a time", async () => {
    const slow = async (_: number, proc: FakeProcess) => {
      await sleep(60);
      return answer(proc);
    };
    const one = await run("seq", runtimeWith(slow).runtime, { concurrency: 1 });
    // Each container waits (up to 2 s) until three run at once: the overlap does not depend on how
    // fast a loaded machine makes the exports that come before each start.
    const many = runtimeWith(async (_, proc) => {
      for (const until = Date.now() + 2_000; many.seen.running < 3 && Date.now() < until; ) await sleep(10);
      return answer(proc);
    });
    const three = await run("conc", many.runtime, { concurrency: 3, capUsd: 0.35 });
    expect(three.code).toBe(ExitCode.ok);
    expect(many.seen.max).toBe(3);
    expect(three.ledger.scheduling).toEqual({ concurrency: 3, pairs: "together", rateEvents: [] });
    expect(one.ledger.scheduling).toMatchObject({ concurrency: 1, pairs: "sequential" });
    const contents = (l: typeof one.ledger) => l.observations.map((o) => [o.index, o.task, o.status, o.inputTokens, o.outputTokens, o.chargedUsd]);
    expect(contents(three.ledger)).toEqual(contents(one.ledger));
    expect(expectEverySnapshotValid(three.snapshots, 0.35, 3)).toBe(3);
  });

  it("an attempt that fails mid-run: no new starts, the attempts in flight settled, blocked with the first failure, exit 1, the ledger valid throughout", async () => {
    const started: number[] = [];
    const { runtime } = runtimeWith(async (n, proc) => {
      started.push(n);
      if (n === 1) {
        await sleep(20);
        return 1; // no init event: invalid-setup
      }
      await sleep(n === 2 ? 250 : 150);
      return answer(proc);
    });
    const r = await run("fail", runtime, { concurrency: 3, capUsd: 0.35 });
    expect(r.code).toBe(ExitCode.blocked);
    expect(r.ledger.status).toBe("blocked");
    expect(r.ledger.statusReason).toMatch(/^attempt 2 \(.*\) ended invalid-setup: no init event$/);
    // Attempts 1 and 3 were in flight when attempt 2 failed: both finished and were settled.
    expect(started.sort()).toEqual([0, 1, 2]);
    expect(r.ledger.observations.map((o) => [o.phase, o.status, o.chargedUsd])).toEqual([
      ["settled", "completed", 0.000602],
      ["settled", "invalid-setup", 0.1],
      ["settled", "completed", 0.000602],
    ]);
    expect(r.ledger.budget).toMatchObject({ reservedUsd: 0, spentUsd: 0.101204 });
    expect(r.summary).toMatchObject({ status: "blocked", attempts: { run: 3 } });
    expectEverySnapshotValid(r.snapshots, 0.35, 3);
  });

  it("a 529 in an attempt's transcript slows new starts and is recorded in the ledger; the runner does not retry", async () => {
    // The first attempt meets the 529 once the second runs beside it: on a loaded machine the
    // 529 could otherwise be read before the second started, which then rightly waits for it.
    let secondStarted!: () => void;
    const bothRunning = new Promise<void>((resolve) => (secondStarted = resolve));
    const { runtime, seen } = runtimeWith(async (n, proc) => {
      if (n === 1) secondStarted();
      if (n === 0) {
        await bothRunning;
        proc.stdout.write(JSON.stringify({ type: "system", subtype: "api_retry", attempt: 1, max_retries: 10, retry_delay_ms: 500, error_status: 529, error: "overloaded_error" }) + "\n");
      }
      await sleep(40);
      return answer(proc);
    });
    const r = await run("overloaded", runtime, { concurrency: 2, attempts: 6 });
    expect(r.code).toBe(ExitCode.ok);
    const events = r.ledger.scheduling!.rateEvents.map((e) => [e.event, e.observation, e.httpStatus, e.concurrency]);
    expect(events[0]).toEqual(["backoff", 0, 529, 1]);
    expect(events.some(([event, , , c]) => event === "recover" && c === 2)).toBe(true);
    // Six attempts, six containers: nothing was run twice.
    expect(runtime.created.filter((s) => !s.cmd.includes("--version"))).toHaveLength(6);
    expect(seen.max).toBe(2);
  });

  it("attempts in flight share one hold on the login: taken by the first, released by the last, taken anew afterwards", async () => {
    const log: string[] = [];
    let n = 0;
    const take = sharedHold(async () => {
      const id = ++n;
      log.push(`take ${id}`);
      return { release: async () => void log.push(`release ${id}`) };
    });
    const a = await take();
    const b = await take();
    expect(b.lock).toBe(a.lock);
    await a.release();
    await a.release(); // twice is once
    expect(log).toEqual(["take 1"]);
    await b.release();
    expect(log).toEqual(["take 1", "release 1"]);
    const c = await take();
    await c.release();
    expect(log).toEqual(["take 1", "release 1", "take 2", "release 2"]);
  });

  it("reads the status of a rate limit from the CLI's retry event and its result", () => {
    expect(rateLimitStatus(JSON.stringify({ type: "system", subtype: "api_retry", error_status: 429 }))).toBe(429);
    expect(rateLimitStatus(JSON.stringify({ type: "result", subtype: "success", is_error: true, api_error_status: 529 }))).toBe(529);
    expect(rateLimitStatus(JSON.stringify({ type: "system", subtype: "api_retry", error_status: null, error: "unknown" }))).toBeNull();
    expect(rateLimitStatus(JSON.stringify({ type: "result", api_error_status: 500 }))).toBeNull();
    expect(rateLimitStatus("api_retry but not JSON")).toBeNull();
  });
});
