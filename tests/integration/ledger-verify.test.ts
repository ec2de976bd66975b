import { execFileSync } from "node:child_process";
import { appendFile, chmod, copyFile, cp, mkdir, mkdtemp, readFile, readdir, rename, rm, stat, symlink, truncate, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pathToFileURL } from "node:url";
import type { AdjudicationRecord } from "../../src/adjudicate/schema.ts";
import { blindingSummary } from "../../src/adjudicate/blinding.ts";
import { sumUsd } from "../../src/cost/money.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import { TRANSCRIPT_MAX_BYTES, transcriptLines } from "../../src/ledger/transcripts.ts";
import { num } from "../../src/report/sections.ts";
import { pairResult, toolCallsOf } from "../../src/report/viewer.ts";
import { dumpDom, ensureChromium } from "../support/chromium.ts";
import { runCompiledCli } from "../support/cli.ts";
import { type DemoFiles, demoCopy } from "../support/shared-demo.ts";

// A fresh demo run (fake model, 36 attempts) keeps every transcript beside its ledger; `ledger
// verify` agrees with it, and fails naming the field on each kind of tampering. The same run's
// private pair viewer is opened in headless Chromium. The run is the suite's shared demo
// (tests/support/shared-demo.ts), copied into this file's own folder.

let work = "";
let ledgerPath = "";
/** The evidence digest of each settled state, as the run printed them in its summary. */
let digests: string[] = [];
let demo: DemoFiles;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-verify-"));
  const r = await demoCopy(join(work, "demo"));
  expect(r.run.code, r.run.stderr).toBe(0);
  demo = r.demo;
  ledgerPath = demo.ledger;
  digests = [...r.run.stdout.matchAll(/"digest": "([0-9a-f]{64})"/g)].map((m) => m[1]!);
}, 900_000);
afterAll(() => rm(work, { recursive: true, force: true }));

/** A copy of the ledger and its transcripts, to tamper with. */
async function copy(name: string): Promise<{ ledger: string; dir: string }> {
  const dest = join(work, name);
  await cp(join(ledgerPath, ".."), dest, { recursive: true });
  const ledger = join(dest, basename(ledgerPath));
  return { ledger, dir: `${ledger}.transcripts` };
}

async function edit(path: string, f: (l: Ledger) => void) {
  const l = JSON.parse(await readFile(path, "utf8")) as Ledger;
  f(l);
  l.budget.spentUsd = sumUsd(l.observations.map((o) => o.chargedUsd ?? 0));
  await writeFile(path, `${JSON.stringify(l, null, 2)}\n`);
}

const verify = (path: string) => runCompiledCli(["ledger", "verify", path]);

describe("ledger verify --digest, the run's earlier anchor", () => {
  // contract: R177
  it("finds the settled state each printed digest was taken of; after an entry is edited, the last digest matches no state and the one before the edit names the observation", async () => {
    expect(digests).toHaveLength(36);
    const early = await runCompiledCli(["ledger", "verify", ledgerPath, "--digest", digests[9]!]);
    expect(early.code, early.stdout + early.stderr).toBe(0);
    expect(early.stdout).toContain("they differ since observation 10");
    const c = await copy("digest");
    // A change the transcripts cannot show: the attempt's wall time.
    await edit(c.ledger, (l) => (l.observations[3]!.wallTimeMs = (l.observations[3]!.wallTimeMs ?? 0) + 1000));
    expect((await verify(c.ledger)).code).toBe(0);
    const last = await runCompiledCli(["ledger", "verify", c.ledger, "--digest", digests[35]!]);
    expect(last.code).toBe(1);
    expect(last.stdout).toContain(`digest: ${digests[35]} is the digest of no settled state of these files`);
    const before = await runCompiledCli(["ledger", "verify", c.ledger, "--digest", digests[2]!]);
    expect(before.code, before.stdout).toBe(0);
    expect(before.stdout).toContain("they differ since observation 3");
    const bad = await runCompiledCli(["ledger", "verify", c.ledger, "--digest", "abc"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--digest");
  });
});

describe("ledger verify on a fresh demo ledger", () => {
  it("keeps one private transcript per attempt and agrees with every one (exit 0)", async () => {
    const dir = `${ledgerPath}.transcripts`;
    expect((await stat(dir)).mode & 0o777).toBe(0o700);
    const files = (await readdir(dir)).sort();
    expect(files).toHaveLength(36);
    for (const f of files) expect((await stat(join(dir, f))).mode & 0o777).toBe(0o600);
    const adjudication = (await readdir(ledgerPath.replace(/\.json$/, ".adjudication.json.transcripts"))).length;
    // One per adjudicator run: each item's verdict call and, after it, its arm-guess call.
    const record = JSON.parse(await readFile(demo.adjudication, "utf8")) as AdjudicationRecord;
    expect(record.items.filter((i) => i.armGuess !== undefined).length).toBeGreaterThan(0);
    expect(adjudication).toBe(record.items.filter((i) => i.run !== null).length + record.items.filter((i) => i.armGuess !== undefined).length);
    const r = await verify(ledgerPath);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain("verified");
    expect(r.stdout).toContain("36 read again from their transcripts");
  });

  // contract: R202
  it("fails naming chargedUsd on an edited charge", async () => {
    const c = await copy("charge");
    // One pico-USD more: no tolerance hides it.
    await edit(c.ledger, (l) => (l.observations[4]!.chargedUsd = sumUsd([l.observations[4]!.chargedUsd!, 1e-12])));
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/observations\[4\] \([^)]*\)\.chargedUsd: ledger [0-9.]+, transcript gives [0-9.]+/);
  });

  it("fails naming status on an edited status", async () => {
    const c = await copy("status");
    await edit(c.ledger, (l) => {
      const o = l.observations[5]!;
      o.status = "failed";
      o.chargedUsd = o.reservationUsd;
      l.status = "blocked";
      l.statusReason = "edited";
    });
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/observations\[5\] \([^)]*\)\.status: ledger "failed", transcript gives "completed"/);
  });

  it("fails on a truncated transcript, naming the hash and the facts it changes", async () => {
    const c = await copy("truncated");
    const file = join(c.dir, "0006.jsonl");
    await truncate(file, Math.floor((await stat(file)).size / 2));
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/observations\[6\] \([^)]*\)\.transcriptSha256: ledger [0-9a-f]{64}, the stored transcript hashes to/);
    expect(r.stdout).toMatch(/observations\[6\] \([^)]*\)\.(status|setupProblems|usageComplete)/);
  });

  it("fails on two swapped transcripts", async () => {
    const c = await copy("swapped");
    await rename(join(c.dir, "0000.jsonl"), join(c.dir, "tmp"));
    await rename(join(c.dir, "0001.jsonl"), join(c.dir, "0000.jsonl"));
    await rename(join(c.dir, "tmp"), join(c.dir, "0001.jsonl"));
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/observations\[0\] \([^)]*\)\.transcriptSha256/);
    expect(r.stdout).toMatch(/observations\[1\] \([^)]*\)\.transcriptSha256/);
  });

  it("fails on a missing transcript", async () => {
    const c = await copy("missing");
    await unlink(join(c.dir, "0002.jsonl"));
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/observations\[2\] \([^)]*\)\.transcriptSha256: the transcript .*0002\.jsonl is missing/);
  });

  it("never prints an answer", async () => {
    const c = await copy("answer");
    const l = JSON.parse(await readFile(c.ledger, "utf8")) as Ledger;
    const answer = l.observations[7]!.answer!;
    await edit(c.ledger, (x) => (x.observations[7]!.answer = `${answer} EDITED`));
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/observations\[7\] \([^)]*\)\.answer: the ledger's value differs from the transcript's \(not shown: private\)/);
    expect(r.stdout).not.toContain(answer);
  });
});

const check = (path: string) => runCompiledCli(["ledger", "check", path]);

/** A gateway request the transcript never saw: 999,999 input tokens for 0.5 USD. */
const fabricatedRequest = {
  seq: 0,
  method: "POST",
  path: "/v1/messages?beta=true",
  status: 200,
  requestBytes: 5000,
  requestModel: "claude-haiku-5-5",
  messageId: "msg_fabricated_0001",
  model: "claude-haiku-5-5",
  inputTokens: 999_999,
  cacheReadInputTokens: 0,
  cacheWrite5mInputTokens: 0,
  cacheWrite1hInputTokens: 0,
  outputTokens: 10,
  complete: true,
  boundUsd: 0.6,
  costUsd: 0.5,
  ttfbMs: 10,
  durationMs: 20,
  refused: null,
};

// Edits that keep the ledger well-formed, each of which both commands passed before the
// invariants and the re-derivations existed: the file alone proves some of them wrong (`ledger
// check`), the kept evidence the rest (`ledger verify`).
describe("ledger check and verify on edits that keep the schema", () => {
  // contract: R155
  it("the last observation removed with its transcript and the spend adjusted: verify names the plan the run did not finish", async () => {
    const c = await copy("removed-last");
    await edit(c.ledger, (l) => void l.observations.pop());
    await unlink(join(c.dir, "0035.jsonl"));
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/status: awaiting-adjudication with 35 of the full plan's 36 attempts/);
  });

  // contract: R155
  it("the first observation removed and the rest renumbered with their transcripts: verify names the plan's order", async () => {
    const c = await copy("removed-first");
    await edit(c.ledger, (l) => {
      l.observations.shift();
      for (const [i, o] of l.observations.entries()) o.index = i;
    });
    await unlink(join(c.dir, "0000.jsonl"));
    for (let i = 1; i < 36; i++) await rename(join(c.dir, `${String(i).padStart(4, "0")}.jsonl`), join(c.dir, `${String(i - 1).padStart(4, "0")}.jsonl`));
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/observations\[0\]: [a-z, ]+ differs? from the plan's attempt 0 .*the observations must be the plan's first attempts in order/);
  });

  // contract: R155
  it("a pilot relabelled full: verify names the plan it did not finish, while the same pilot as recorded verifies", async () => {
    const c = await copy("pilot");
    // The pilot's plan is the full plan's first pair: the demo's first two attempts are a pilot's.
    await edit(c.ledger, (l) => {
      l.observations = l.observations.slice(0, 2);
      l.mode = "pilot";
    });
    for (let i = 2; i < 36; i++) await unlink(join(c.dir, `${String(i).padStart(4, "0")}.jsonl`));
    const pilot = await verify(c.ledger);
    expect(pilot.code, pilot.stdout).toBe(0);
    await edit(c.ledger, (l) => (l.mode = "full"));
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/status: awaiting-adjudication with 2 of the full plan's 36 attempts/);
  });

  // contract: R154
  it("a protocol hash replaced by zeros: verify recomputes it from the manifest's bytes", async () => {
    const c = await copy("protocol-hash");
    await edit(c.ledger, (l) => (l.protocol.protocolHash = "0".repeat(64)));
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/protocol\.protocolHash: ledger 0{64}, the manifest .*manifest\.json hashes to [0-9a-f]{64}/);
  });

  // contract: R156
  it("an orphaned transcript: verify names the file no observation owns", async () => {
    const c = await copy("orphan");
    await copyFile(join(c.dir, "0001.jsonl"), join(c.dir, "0036.jsonl"));
    await chmod(join(c.dir, "0036.jsonl"), 0o600);
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/transcripts: .*0036\.jsonl belongs to no entry of the record/);
  });

  // contract: R147
  it("a completed attempt charged 0.5 USD against its 0.1 USD reservation: check and verify name the charge rule", async () => {
    const c = await copy("charge-above");
    await edit(c.ledger, (l) => (l.observations[3]!.chargedUsd = 0.5));
    for (const r of [await check(c.ledger), await verify(c.ledger)]) {
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(/observations\[3\]\.status: is completed with a charge of 0\.5 USD above its reservation of 0\.1 USD; that is budget-exceeded \(R147 charge-by-status\)/);
      expect(r.stdout).toMatch(/observations\[3\]\.chargedUsd: is 0\.5 USD, but a completed run is charged the larger of its reported and computed cost/);
    }
  });

  // contract: R147
  it("a reported cost of 0.5 USD against the computed one: check and verify name the factor of two", async () => {
    const c = await copy("reported-cost");
    await edit(c.ledger, (l) => {
      l.observations[3]!.cliReportedCostUsd = 0.5;
      l.observations[3]!.chargedUsd = 0.5;
    });
    for (const r of [await check(c.ledger), await verify(c.ledger)]) {
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(/observations\[3\]\.cliReportedCostUsd: 0\.5 USD is not within a factor of two of computedCostUsd [0-9.]+ USD/);
    }
  });

  // contract: R148
  it("toolCalls 99 against toolCallsByName: check and verify name the sum", async () => {
    const c = await copy("tool-calls");
    await edit(c.ledger, (l) => (l.observations[3]!.toolCalls = 99));
    for (const r of [await check(c.ledger), await verify(c.ledger)]) {
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(/observations\[3\]\.toolCalls: is 99, but toolCallsByName sums to \d+ \(R148 counts-sum\)/);
    }
  });

  // contract: R151
  it("gateway.meteredCostUsd 0.3 USD with nothing forwarded: check and verify name the metered spend", async () => {
    const c = await copy("metered");
    await edit(c.ledger, (l) => (l.observations[3]!.gateway!.meteredCostUsd = 0.3));
    for (const r of [await check(c.ledger), await verify(c.ledger)]) {
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(/observations\[3\]\.gateway\.meteredCostUsd: is 0\.3 USD, but no request was forwarded \(R151 metered-spend\)/);
      expect(r.stdout).toMatch(/observations\[3\]\.chargedUsd: [0-9.]+ USD is below what the gateway metered, 0\.3 USD/);
    }
  });

  // contract: R157
  it("a fabricated gateway request: check names the charge below the metered spend, verify the message the transcript does not hold", async () => {
    const c = await copy("fabricated");
    await edit(c.ledger, (l) => {
      const g = l.observations[3]!.gateway!;
      g.requests.push(fabricatedRequest);
      g.forwarded = 1;
      g.meteredCostUsd = 0.5;
    });
    const checked = await check(c.ledger);
    expect(checked.code).toBe(1);
    expect(checked.stdout).toMatch(/observations\[3\]\.chargedUsd: [0-9.]+ USD is below what the gateway metered, 0\.5 USD/);
    const r = await verify(c.ledger);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/observations\[3\] \([^)]*\)\.gateway\.requests\[0\]\.messageId: names a message that is not in the transcript/);
    // Made consistent with the charge, the record is still one the transcript does not bear out.
    await edit(c.ledger, (l) => {
      const g = l.observations[3]!.gateway!;
      g.requests[0]!.costUsd = 0;
      g.meteredCostUsd = 0;
    });
    expect((await check(c.ledger)).code).toBe(0);
    expect((await verify(c.ledger)).stdout).toMatch(/gateway\.requests\[0\]\.messageId: names a message that is not in the transcript/);
  });
});

describe("ledger verify --report", () => {
  // contract: R158, R159
  it("passes on the demo's report, and names each private file changed after the report was written", async () => {
    const report = JSON.parse(await readFile(demo.report.json, "utf8")) as { evidence: { algorithm: string; root: string; files: Array<{ name: string }> } };
    expect(report.evidence.algorithm).toBe("sha256-merkle-v1");
    // The ledger, 36 transcripts, the manifest, the record and its 72 transcripts (each item's verdict call and its arm-guess call).
    expect(report.evidence.files).toHaveLength(1 + 36 + 1 + 1 + 72);
    for (const text of [await readFile(demo.report.markdown, "utf8"), await readFile(demo.report.html, "utf8")]) expect(text).toContain(report.evidence.root);
    const args = (ledger: string, record: string) => ["ledger", "verify", ledger, "--adjudication", record, "--report", demo.report.json];
    const ok = await runCompiledCli(args(ledgerPath, demo.adjudication));
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(ok.stdout).toContain(`evidence: ${report.evidence.files.length} private files against the report's digest ${report.evidence.root}`);

    const c = await copy("report");
    const record = join(c.ledger, "..", basename(demo.adjudication));
    const same = await runCompiledCli(args(c.ledger, record));
    expect(same.code, same.stdout).toBe(0);
    // One change at a time, each named.
    const changes: Array<[string, string]> = [
      [join(c.dir, "0004.jsonl"), "ledger.transcripts/0004.jsonl"],
      [`${record}.transcripts/${(await readdir(`${record}.transcripts`)).sort()[7]}`, `adjudication.transcripts/${(await readdir(`${record}.transcripts`)).sort()[7]}`],
      [record, "adjudication"],
      [c.ledger, "ledger"],
    ];
    for (const [file, name] of changes) {
      await appendFile(file, "\n");
      const r = await runCompiledCli(args(c.ledger, record));
      expect(r.code, name).toBe(1);
      expect(r.stdout).toContain(`report ${name}: changed since the report was written`);
    }
    // A file added since is named too.
    await writeFile(join(c.dir, "0099.jsonl"), "{}\n", { mode: 0o600 });
    expect((await runCompiledCli(args(c.ledger, record))).stdout).toContain("report ledger.transcripts/0099.jsonl: was not part of the report's evidence");
  });
});

/** The demo's adjudication record in a copy made by `copy`, parsed. */
async function copiedRecord(c: { ledger: string }): Promise<{ path: string; dir: string; record: AdjudicationRecord }> {
  const path = join(c.ledger, "..", basename(demo.adjudication));
  return { path, dir: `${path}.transcripts`, record: JSON.parse(await readFile(path, "utf8")) as AdjudicationRecord };
}

const transcriptName = (index: number) => `${String(index).padStart(4, "0")}.jsonl`;
const usd6 = (n: number) => Number(n.toFixed(6));

/** A correct item of the record turned into a decision of the runner, its arm guess and that call's transcript removed, the spend lowered by the guess's charge. */
async function relabelled(name: string, f: (item: AdjudicationRecord["items"][number], r: { dir: string; record: AdjudicationRecord }) => Promise<void>) {
  const c = await copy(name);
  const r = await copiedRecord(c);
  const k = r.record.items.findIndex((i) => i.outcome === "correct" && i.armGuess?.run.chargedUsd != null);
  const item = r.record.items[k]!;
  const guess = item.armGuess!;
  delete item.armGuess;
  await unlink(join(r.dir, transcriptName(r.record.ledger.observations + item.observationIndex)));
  r.record.budget.spentUsd = usd6(r.record.budget.spentUsd - guess.run.chargedUsd!);
  Object.assign(item, { decidedBy: "runner", outcome: "blocked", score: null, verdict: null });
  await f(item, r);
  r.record.blinding = blindingSummary(r.record.items);
  await writeFile(r.path, JSON.stringify(r.record, null, 2), { mode: 0o600 });
  return { c, path: r.path, item, at: `adjudication items[${k}] (observation ${item.observationIndex})` };
}

describe("ledger verify --report without --adjudication", () => {
  // contract: R185
  it("finds the record the report names beside the ledger; with none there, says once that it was not given and how to give it", async () => {
    const found = await runCompiledCli(["ledger", "verify", ledgerPath, "--report", demo.report.json]);
    expect(found.code, found.stdout).toBe(0);
    expect(found.stdout).toContain(`adjudication record: ${demo.adjudication}, the one the report names, found beside the ledger`);

    // Changed since: still the record of this run beside the ledger, and named as changed.
    const c = await copy("report-record-changed");
    const { path } = await copiedRecord(c);
    await appendFile(path, "\n");
    const changed = await runCompiledCli(["ledger", "verify", c.ledger, "--report", demo.report.json]);
    expect(changed.code).toBe(1);
    expect(changed.stdout).toContain("report adjudication: changed since the report was written");

    const gone = await copy("report-no-record");
    await rm(join(gone.ledger, "..", basename(demo.adjudication)));
    await rm(join(gone.ledger, "..", `${basename(demo.adjudication)}.transcripts`), { recursive: true });
    const r = await runCompiledCli(["ledger", "verify", gone.ledger, "--report", demo.report.json]);
    expect(r.code).toBe(1);
    const lines = r.stdout.split("\n").filter((l) => l.includes("report adjudication"));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/the report was made with an adjudication record, which was not given, .* give it with --adjudication PATH/);
    expect(r.stdout).not.toContain("not there now");
  });
});

describe("ledger verify --adjudication derives every decision again", () => {
  // contract: R180
  it("a correct verdict relabelled as the runner's blocked, its arm guess removed and the spend lowered: check passes, verify names the usable verdict the transcript gives", async () => {
    const { c, path, item, at } = await relabelled(
      "relabelled-blocked",
      async (i) => void (i.reason = "the adjudicator's output is unusable: the result has neither structured_output nor a result text"),
    );
    // The record alone is consistent, and the report would move the attempt from correct to missing.
    expect((await check(path)).code).toBe(0);
    const report = JSON.parse((await runCompiledCli(["report", "--ledger", c.ledger, "--adjudication", path, "--format", "json"])).stdout) as { attempts: Array<{ index: number; outcome: string }> };
    expect(report.attempts.find((a) => a.index === item.observationIndex)!.outcome).toBe("blocked");
    const r = await runCompiledCli(["ledger", "verify", c.ledger, "--adjudication", path]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`${at}.decidedBy: the record says the runner decided blocked, but the transcript's result gives a usable verdict (not shown: private)`);
  });

  // contract: R180
  it("the same with its verdict run removed too, as an incomplete the runner decided: verify names the answer the ledger gives to grade", async () => {
    const { c, path, at } = await relabelled("relabelled-incomplete", async (i, r) => {
      await unlink(join(r.dir, transcriptName(i.observationIndex)));
      r.record.budget.spentUsd = usd6(r.record.budget.spentUsd - i.run!.chargedUsd!);
      Object.assign(i, { outcome: "incomplete", score: 0, reason: "the answer is empty", run: null });
    });
    expect((await check(path)).code).toBe(0);
    const r = await runCompiledCli(["ledger", "verify", c.ledger, "--adjudication", path]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`${at}.decidedBy: the record says the runner decided incomplete without an adjudicator run, but the ledger gives this observation an answer to grade`);
  });

  // contract: R180
  it("the same called a stop: verify names the stop the record does not bear out", async () => {
    const { c, path } = await relabelled("relabelled-stop", async (i, r) => {
      await unlink(join(r.dir, transcriptName(i.observationIndex)));
      r.record.budget.spentUsd = usd6(r.record.budget.spentUsd - i.run!.chargedUsd!);
      // Every later item made "not reached" too, their runs and transcripts removed.
      for (const later of r.record.items.slice(i.position + 1)) {
        for (const [run, index] of [
          [later.run, later.observationIndex],
          [later.armGuess?.run, r.record.ledger.observations + later.observationIndex],
        ] as const)
          if (run) {
            r.record.budget.spentUsd = usd6(r.record.budget.spentUsd - run.chargedUsd!);
            await unlink(join(r.dir, transcriptName(index)));
          }
      }
      r.record.status = "blocked";
      r.record.statusReason = `interrupted-looking stop before item ${i.position + 1}`;
      for (const x of r.record.items.slice(i.position))
        Object.assign(x, { decidedBy: "runner", outcome: "blocked", score: null, verdict: null, run: null, armGuess: undefined, reason: `not adjudicated: ${r.record.statusReason}` });
    });
    expect((await check(path)).code).toBe(0);
    const r = await runCompiledCli(["ledger", "verify", c.ledger, "--adjudication", path]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(
      /adjudication statusReason: the adjudication stopped before items\[\d+\], but no run before it failed and no reservation was refused; the stop is not borne out by the record/,
    );
  });

  // contract: R181
  it("a record bound to a ledger sha256 of zeros: verify names it in the words report refuses it with", async () => {
    const c = await copy("bound-zeros");
    const { path, record } = await copiedRecord(c);
    record.ledger.sha256 = "0".repeat(64);
    await writeFile(path, JSON.stringify(record, null, 2), { mode: 0o600 });
    const words = "the ledger changed after it was adjudicated (its sha256 differs from the one the record binds to)";
    const report = await runCompiledCli(["report", "--ledger", c.ledger, "--adjudication", path]);
    expect(report.code).toBe(2);
    expect(report.stderr).toContain(words);
    const r = await runCompiledCli(["ledger", "verify", c.ledger, "--adjudication", path]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`adjudication ledger: ${words}`);
  });
});

describe("every evidence file read as untrusted", () => {
  // contract: R183
  it("a folder, a FIFO and a stray name in the transcripts folder, a FIFO, a link and an oversized file in place of transcripts: verify and report exit 1 naming each, never a crash or a hang", async () => {
    const c = await copy("untrusted");
    const { path: record } = await copiedRecord(c);
    await mkdir(join(c.dir, "0099.jsonl"));
    execFileSync("mkfifo", [join(c.dir, "0098.jsonl")]);
    await writeFile(join(c.dir, "notes.txt"), "{}\n", { mode: 0o600 });
    await unlink(join(c.dir, "0002.jsonl"));
    execFileSync("mkfifo", ["-m", "600", join(c.dir, "0002.jsonl")]);
    await unlink(join(c.dir, "0003.jsonl"));
    await symlink(join(c.dir, "0005.jsonl"), join(c.dir, "0003.jsonl"));
    await truncate(join(c.dir, "0004.jsonl"), TRANSCRIPT_MAX_BYTES + 1);
    const bounded = { timeoutMs: 60_000 };

    const plain = await runCompiledCli(["ledger", "verify", c.ledger], bounded);
    expect(plain.code, plain.stderr).toBe(1);
    expect(plain.stdout).toMatch(/observations\[2\] \([^)]*\)\.transcriptSha256: the transcript \S*0002\.jsonl is a FIFO, not a regular file/);
    expect(plain.stdout).toMatch(/observations\[3\] \([^)]*\)\.transcriptSha256: the transcript \S*0003\.jsonl is a symbolic link; evidence is never read through a link/);
    expect(plain.stdout).toMatch(
      new RegExp(`observations\\[4\\] \\([^)]*\\)\\.transcriptSha256: the transcript \\S*0004\\.jsonl is ${TRANSCRIPT_MAX_BYTES + 1} bytes, above the bound of ${TRANSCRIPT_MAX_BYTES} bytes`),
    );
    expect(plain.stdout).toMatch(/transcripts: \S*notes\.txt: is not a transcript's name/);

    const withReport = await runCompiledCli(["ledger", "verify", c.ledger, "--adjudication", record, "--report", demo.report.json], bounded);
    expect(withReport.code, withReport.stderr).toBe(1);
    expect(withReport.stdout).toMatch(/report evidence: \S*0099\.jsonl: is a folder, not a regular file/);
    expect(withReport.stdout).toMatch(/report evidence: \S*0098\.jsonl: is a FIFO, not a regular file/);

    const report = await runCompiledCli(["report", "--ledger", c.ledger, "--adjudication", record], bounded);
    expect(report.code, report.stderr).toBe(1);
    for (const what of [
      /0099\.jsonl: is a folder, not a regular file/,
      /0098\.jsonl: is a FIFO, not a regular file/,
      /0002\.jsonl: is a FIFO/,
      /0003\.jsonl: is a symbolic link/,
      /0004\.jsonl: is \d+ bytes, above the bound/,
      /notes\.txt: is not a transcript's name/,
    ])
      expect(report.stderr).toMatch(what);
    expect(report.stdout).toBe("");
  });
});

describe("ledger verify --adjudication", () => {
  it("agrees with the demo's adjudicator runs, and fails on an edited verdict and a truncated adjudicator transcript", async () => {
    const ok = await runCompiledCli(["ledger", "verify", ledgerPath, "--adjudication", demo.adjudication]);
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(ok.stdout).toContain("72 read again from their transcripts");

    const c = await copy("adjudication");
    const recordPath = join(c.ledger, "..", basename(demo.adjudication));
    const record = JSON.parse(await readFile(recordPath, "utf8")) as AdjudicationRecord;
    const secret = "EDITED-VERDICT-REASON";
    const judged = record.items.findIndex((i) => i.verdict !== null);
    record.items[judged]!.verdict!.reasons = secret;
    await writeFile(recordPath, JSON.stringify(record, null, 2));
    // A guess changed after the fact (with its score, so the record still parses).
    const guessed = record.items.findIndex((i, k) => k !== judged && i.armGuess?.guess != null);
    const g = record.items[guessed]!.armGuess!;
    g.guess = g.guess === "files-only" ? "files-and-docs-server" : "files-only";
    g.correct = !g.correct;
    await writeFile(recordPath, JSON.stringify(record, null, 2));
    const cut = record.items.findIndex((i, k) => k !== judged && k !== guessed && i.run !== null);
    const file = join(`${recordPath}.transcripts`, `${String(record.items[cut]!.observationIndex).padStart(4, "0")}.jsonl`);
    await truncate(file, Math.floor((await stat(file)).size / 3));
    const r = await runCompiledCli(["ledger", "verify", c.ledger, "--adjudication", recordPath]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`adjudication items[${judged}] (observation ${record.items[judged]!.observationIndex}).verdict`);
    expect(r.stdout).toMatch(/\.verdict: the record's verdict differs .*not shown: private/);
    expect(r.stdout).toContain(`adjudication items[${cut}] (observation ${record.items[cut]!.observationIndex}).run.transcriptSha256: record`);
    expect(r.stdout).toMatch(/\.run\.transcriptSha256: record [0-9a-f]{64}, the stored transcript hashes to/);
    expect(r.stdout).toContain(`adjudication items[${guessed}] (observation ${record.items[guessed]!.observationIndex}).armGuess.guess: ledger ${JSON.stringify(g.guess)}, transcript gives`);
    expect(r.stdout).not.toContain(secret);
  });
});

describe("the private pair viewer of the demo", () => {
  it("is written beside the ledger with mode 600, pairs all 36 attempts, and its page text matches the ledger", async () => {
    const chromium = ensureChromium();
    const r = await runCompiledCli(["report", "--private", "--ledger", ledgerPath, "--adjudication", demo.adjudication]);
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { private: string; pairs: number; attempts: number };
    expect(out.private).toBe(`${ledgerPath}.pairs.html`);
    expect((await stat(out.private)).mode & 0o777).toBe(0o600);
    expect(out).toMatchObject({ pairs: 18, attempts: 36 });
    // Created exclusively: a second viewer never overwrites the first.
    const again = await runCompiledCli(["report", "--private", "--ledger", ledgerPath, "--adjudication", demo.adjudication]);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/already exists/);

    const ledger = JSON.parse(await readFile(ledgerPath, "utf8")) as Ledger;
    const record = JSON.parse(await readFile(demo.adjudication, "utf8")) as AdjudicationRecord;
    const items = new Map(record.items.map((i) => [i.observationIndex, i]));
    const url = pathToFileURL(out.private).href;
    const dom = await dumpDom(chromium, `${url}#filter=all`);
    expect(dom.match(/<section class="pair"/g)).toHaveLength(18);
    expect(dom).toContain("showing 18 of 18 pairs");
    const unescapeHtml = (s: string) => s.replaceAll("&lt;", "<").replaceAll("&gt;", ">").replaceAll("&quot;", '"').replaceAll("&amp;", "&");
    for (const o of ledger.observations) {
      const start = dom.indexOf(`data-index="${o.index}"`);
      expect(start, `attempt ${o.index} shown`).toBeGreaterThan(0);
      const section = unescapeHtml(dom.slice(start, dom.indexOf("</div>", dom.indexOf('class="verdict"', start))));
      expect(section).toContain(`<td class="f-charged-USD">${num(o.chargedUsd, "USD")}</td>`);
      expect(section).toContain(`<td class="f-input-tokens">${num(o.inputTokens)}</td>`);
      expect(section).toContain(`<td class="f-output-tokens">${num(o.outputTokens)}</td>`);
      expect(section).toContain(`<td class="f-wall-time-ms">${num(o.wallTimeMs)}</td>`);
      expect(section).toContain(`<td class="f-status">${o.status}</td>`);
      expect(section).toContain(`<td class="f-outcome">${items.get(o.index)!.outcome}</td>`);
      expect(section).toContain(`<pre class="answer">${o.answer}</pre>`);
      const item = items.get(o.index)!;
      expect(section).toContain(item.verdict?.reasons ?? item.reason!);
      // The tool calls in transcript order, with their inputs.
      const calls = toolCallsOf(transcriptLines(await readFile(join(`${ledgerPath}.transcripts`, `${String(o.index).padStart(4, "0")}.jsonl`))));
      expect(calls.length).toBe(o.toolCalls);
      const shown = [...section.matchAll(/<li><b>([^<]+)<\/b> <code>([^<]*)<\/code><\/li>/g)].map((m) => ({ name: m[1], input: m[2] }));
      expect(shown).toEqual(calls);
    }

    // The filters change what is shown, to exactly the pairs of that result.
    const results = new Map<string, string>();
    for (const o of ledger.observations) {
      const key = `${o.task}/${o.repetition}`;
      const other = ledger.observations.find((x) => x.task === o.task && x.repetition === o.repetition && x.arm !== o.arm)!;
      const [repo, mcp] = o.arm === "repository" ? [o, other] : [other, o];
      results.set(key, pairResult(items.get(repo.index), items.get(mcp.index)));
    }
    for (const f of ["win", "loss", "tie"]) {
      const expected = [...results.values()].filter((x) => x === f).length;
      const filtered = await dumpDom(chromium, `${url}#filter=${f}`);
      const visible = filtered.match(/<section class="pair"[^>]*data-result="[a-z]+">/g) ?? [];
      expect(
        visible.every((v) => v.includes(`data-result="${f}"`)),
        f,
      ).toBe(true);
      expect(visible.length, f).toBe(expected);
      expect(filtered).toContain(`showing ${expected} of 18 pairs`);
    }
    const task = ledger.observations[0]!.task;
    const byTask = await dumpDom(chromium, `${url}#task=${encodeURIComponent(task)}`);
    expect(byTask).toContain("showing 3 of 18 pairs");
  }, 600_000);

  it("the public report holds no answer and no tool input", async () => {
    const ledger = JSON.parse(await readFile(ledgerPath, "utf8")) as Ledger;
    const published = [await readFile(demo.report.markdown, "utf8"), await readFile(demo.report.json, "utf8"), await readFile(demo.report.html, "utf8")].join("\n");
    for (const o of ledger.observations) {
      expect(published).not.toContain(o.answer!.trim().slice(0, 60));
      const calls = toolCallsOf(transcriptLines(await readFile(join(`${ledgerPath}.transcripts`, `${String(o.index).padStart(4, "0")}.jsonl`))));
      for (const c of calls) expect(published).not.toContain(c.input);
    }
  });
});
