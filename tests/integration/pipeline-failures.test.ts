/**
 * Every failure class of an attempt, acted out by the fake claude image in attempt 1 of a pilot,
 * through the shipped command: the run stops there, blocked, exit code 1, with the attempt
 * charged at least its reservation, and leaves no container and no export behind. Then the
 * preflight refusals: exit code 2, nothing charged, no ledger.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { activeProfile, cachedProfilePath, profileText, sealProfile } from "../../src/profile/load.ts";
import { join } from "node:path";
import type { Observation } from "../../src/ledger/schema.ts";
import { gitHead } from "../../src/corpus/git.ts";
import { defaultIndexRoot, indexLocation, repositoryKey, writeIndexFile } from "../../src/mcp/index-store.ts";
import { REFERENCE_ENGINE_REVISION } from "../../src/mcp/reference-server.ts";
import {
  containersOfRun,
  exists,
  ledgerOf,
  recordsOf,
  leftovers,
  preparePipeline,
  runPipeline,
  stderrLines,
  summaryOf,
  repositoryInit,
  RESERVATION_USD,
  type Behaviour,
  type Pipeline,
} from "../support/pipeline.ts";

let p: Pipeline;
beforeAll(async () => {
  p = await preparePipeline("failures");
}, 300_000);
afterAll(() => p?.cleanup());

interface FailureCase {
  name: string;
  behaviour: Behaviour;
  args?: string[];
  status: NonNullable<Observation["status"]>;
  /** What the ledger records about why. */
  check: (o: Observation) => void;
}

const cases: FailureCase[] = [
  {
    name: "a CLI that never ends is killed at the time limit: timed-out",
    // The real CLI prints its init event, then may loop without end (facts: a turn that never ends).
    behaviour: { kind: "sleep", seconds: 120, events: [repositoryInit()] },
    args: ["--test-attempt-timeout-ms", "2000"],
    status: "timed-out",
    check: (o) => {
      expect(o.timedOut).toBe(true);
      expect(o.wallTimeMs).toBeGreaterThanOrEqual(2000);
      expect(o.wallTimeMs).toBeLessThan(30_000);
    },
  },
  {
    name: "endless output is cut at 4 MiB: failed, truncated",
    behaviour: { kind: "flood", events: [repositoryInit()] },
    status: "failed",
    check: (o) => {
      expect(o.truncated).toBe(true);
      expect(o.timedOut).toBe(false);
    },
  },
  {
    name: "a first line that is not JSON: invalid-setup",
    behaviour: { kind: "ok", malformedFirst: true },
    status: "invalid-setup",
    check: (o) => expect(o.setupProblems.join("\n")).toMatch(/line 1 is not JSON/),
  },
  {
    name: "two result events: invalid-setup",
    behaviour: { kind: "ok", twoResults: true },
    status: "invalid-setup",
    check: (o) => expect(o.setupProblems.join("\n")).toMatch(/2 result events/),
  },
  {
    name: "a foreign model in modelUsage: invalid-cost",
    behaviour: { kind: "ok", foreignModelUsage: true },
    status: "invalid-cost",
    check: (o) => expect(o.costProblem).toMatch(/claude-haiku-4-5/),
  },
  {
    name: "subtype error_max_budget_usd: budget-exceeded",
    behaviour: { kind: "ok", subtype: "error_max_budget_usd" },
    status: "budget-exceeded",
    check: (o) => expect(o.cliSubtype).toBe("error_max_budget_usd"),
  },
  {
    name: "a denied Bash call: invalid-setup",
    behaviour: { kind: "ok", callTool: { name: "Bash", input: { command: "ls /" }, denied: true } },
    status: "invalid-setup",
    check: (o) => {
      expect(o.permissionDenials.map((d) => d.toolName)).toEqual(["Bash"]);
      expect(o.setupProblems.join("\n")).toMatch(/permission denied for .*Bash/);
    },
  },
  {
    name: "a call to a tool outside the set (Write, not denied): invalid-setup",
    behaviour: { kind: "ok", callTool: { name: "Write", input: { file_path: "/workspace/x", content: "x" } } },
    status: "invalid-setup",
    check: (o) => {
      expect(o.permissionDenials).toEqual([]);
      expect(o.setupProblems.join("\n")).toMatch(/tool call to .*Write.*outside the allowed set/);
    },
  },
  {
    name: "a non-zero exit after a clean transcript: failed",
    behaviour: { kind: "ok", exitCode: 1 },
    status: "failed",
    check: (o) => {
      expect(o.exitCode).toBe(1);
      expect(o.cliSubtype).toBe("success");
    },
  },
];

describe("an attempt that does not complete stops the run", () => {
  for (const c of cases) {
    it(c.name, async () => {
      const r = await runPipeline(p, { behaviour: { attempts: { "0": c.behaviour } }, args: c.args });
      expect(r.code, r.stderr).toBe(1);
      const summary = summaryOf(r.stdout);
      expect(summary).toMatchObject({ status: "blocked", attempts: { planned: 2, run: 1, byStatus: { [c.status]: 1 } }, extrapolatedFullRunUsd: null });
      expect(summary.statusReason).toMatch(new RegExp(`^attempt 1 \\(ledgerlite-rounding, repository-only, repetition 1\\) ended ${c.status}: .+`));
      const lines = stderrLines(r.stderr);
      expect(lines).toHaveLength(2);
      expect(lines[1]).toMatch(new RegExp(`^study-runner: \\[1/2\\] .*: ${c.status}, `));

      const ledger = await ledgerOf(r.run);
      expect(ledger.status).toBe("blocked");
      expect(ledger.statusReason).toBe(summary.statusReason);
      expect(ledger.observations).toHaveLength(1);
      const o = ledger.observations[0]!;
      expect(o).toMatchObject({ phase: "settled", status: c.status, reservationUsd: RESERVATION_USD });
      expect(o.chargedUsd).toBeGreaterThanOrEqual(RESERVATION_USD);
      expect(ledger.budget.spentUsd).toBe(o.chargedUsd);
      expect(ledger.budget.reservedUsd).toBe(0);
      c.check(o);

      expect(await containersOfRun(p, ledger.runId)).toEqual([]);
      expect(await leftovers(r.run.tmp)).toEqual([]);
    }, 120_000);
  }
});

describe("the cumulative cap", () => {
  it("an attempt whose full limit does not fit under what is left of the cap is not started, and the ledger on disk says why", async () => {
    // 0.15 USD holds the first 0.10 reservation; after it is settled at its small cost, the
    // second 0.10 still fits. With --attempt-budget-usd 0.1 and a 0.05 cap, not even the first does.
    const r = await runPipeline(p, { env: { STUDY_BUDGET_USD: "0.05" } });
    expect(r.code, r.stderr).toBe(1);
    const summary = summaryOf(r.stdout);
    expect(summary).toMatchObject({ status: "blocked", attempts: { planned: 2, run: 0 }, spentUsd: 0 });
    expect(summary.statusReason).toMatch(/^attempt 1 refused: the per-attempt limit 0\.1 USD does not fit under the remaining budget 0\.05 USD/);
    const ledger = await ledgerOf(r.run);
    expect(ledger).toMatchObject({ status: "blocked", statusReason: summary.statusReason, observations: [] });
    // The fake writes a record whenever it starts; only the version probe ran.
    expect((await recordsOf(r.run)).map((x) => x.record.attempt).filter((a) => a !== null && a !== "probe")).toEqual([]);
  }, 120_000);
});

describe("preflight refusals: exit 2, nothing charged, no ledger", () => {
  const expectRefused = async (r: Awaited<ReturnType<typeof runPipeline>>, message: RegExp) => {
    expect(r.code, r.stderr).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(message);
    expect(await exists(r.run.output)).toBe(false);
    expect(await leftovers(r.run.tmp)).toEqual([]);
  };

  it("an image that reports another CLI version than --cli-version", async () => {
    // 9.9.9 has a profile (the bundled data sealed under that version, in a cache of this test's
    // own), so the run gets past the profile check to the image's probe, which reports 2.1.296.
    const cache = join(p.work, "cache-9.9.9");
    const { sha256: _bundled, ...body } = structuredClone(activeProfile());
    await mkdir(join(cache, "profiles"), { recursive: true });
    await writeFile(cachedProfilePath("9.9.9", cache), profileText(sealProfile({ ...body, cliVersion: "9.9.9" })));
    const r = await runPipeline(p, { args: ["--cli-version", "9.9.9"], env: { STUDY_RUNNER_CACHE: cache } });
    await expectRefused(r, /reports claude 2\.1\.296, but 9\.9\.9 is expected/);
  }, 120_000);

  it("a doc-bridge index that is not fresh at the pin", async () => {
    // A tampered copy in an index folder of this test's own: the shared one stays intact.
    const dir = p.demo.roots.ledgerlite!;
    const pin = await gitHead(dir);
    const key = await repositoryKey(dir, pin);
    const shared = indexLocation(defaultIndexRoot(), key, pin, REFERENCE_ENGINE_REVISION);
    const own = indexLocation(join(p.work, "stale-index"), key, pin, REFERENCE_ENGINE_REVISION);
    const index = JSON.parse(await readFile(shared.file, "utf8")) as { pin: string };
    const stalePin = "0123456789abcdef0123456789abcdef01234567";
    expect(index.pin).not.toBe(stalePin);
    await writeIndexFile(own, JSON.stringify({ ...index, pin: stalePin }));
    // The launcher: its reference server is the sources', whose engine revision files the index above.
    const r = await runPipeline(p, { env: { STUDY_RUNNER_DOC_INDEX: own.root }, launcher: true });
    await expectRefused(r, new RegExp(`doc-bridge preflight refused for checkout ledgerlite .*(stale|not fresh).*${stalePin}`));
  }, 120_000);

  it("a login folder that does not exist", async () => {
    const missing = join(p.work, "no-such-login");
    const r = await runPipeline(p, { loginDir: missing });
    await expectRefused(r, new RegExp(`no Claude login at ${missing}/\\.credentials\\.json \\(ENOENT\\)`));
  }, 120_000);
});
