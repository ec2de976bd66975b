import { cp, mkdtemp, readFile, readdir, rename, rm, stat, truncate, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pathToFileURL } from "node:url";
import type { AdjudicationRecord } from "../../src/adjudicate/schema.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import { transcriptLines } from "../../src/ledger/transcripts.ts";
import { num } from "../../src/report/sections.ts";
import { pairResult, toolCallsOf } from "../../src/report/viewer.ts";
import { dumpDom, ensureChromium } from "../support/chromium.ts";
import { runCli } from "../support/cli.ts";

// A fresh demo run (fake model, 36 attempts) keeps every transcript beside its ledger; `ledger
// verify` agrees with it, and fails naming the field on each kind of tampering. The same run's
// private pair viewer is opened in headless Chromium (one demo run for both: it takes minutes).

let work = "";
let ledgerPath = "";
let demo: { ledger: string; adjudication: string; report: { markdown: string; json: string; html: string } };
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-verify-"));
  const r = await runCli(["demo", "--quiet", "--workdir", join(work, "demo")], { timeoutMs: 900_000 });
  expect(r.code, r.stderr).toBe(0);
  demo = (JSON.parse(r.stdout.slice(r.stdout.indexOf('{\n  "demo"'))) as { demo: typeof demo }).demo;
  ledgerPath = demo.ledger;
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
  l.budget.spentUsd = l.observations.reduce((s, o) => s + (o.chargedUsd ?? 0), 0);
  await writeFile(path, `${JSON.stringify(l, null, 2)}\n`);
}

const verify = (path: string) => runCli(["ledger", "verify", path]);

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

  it("fails naming chargedUsd on an edited charge", async () => {
    const c = await copy("charge");
    await edit(c.ledger, (l) => (l.observations[4]!.chargedUsd! += 0.001));
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

describe("ledger verify --adjudication", () => {
  it("agrees with the demo's adjudicator runs, and fails on an edited verdict and a truncated adjudicator transcript", async () => {
    const ok = await runCli(["ledger", "verify", ledgerPath, "--adjudication", demo.adjudication]);
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
    const r = await runCli(["ledger", "verify", c.ledger, "--adjudication", recordPath]);
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
    const r = await runCli(["report", "--private", "--ledger", ledgerPath, "--adjudication", demo.adjudication]);
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { private: string; pairs: number; attempts: number };
    expect(out.private).toBe(`${ledgerPath}.pairs.html`);
    expect((await stat(out.private)).mode & 0o777).toBe(0o600);
    expect(out).toMatchObject({ pairs: 18, attempts: 36 });
    // Created exclusively: a second viewer never overwrites the first.
    const again = await runCli(["report", "--private", "--ledger", ledgerPath, "--adjudication", demo.adjudication]);
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
