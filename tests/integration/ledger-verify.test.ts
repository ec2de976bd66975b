import { cp, mkdtemp, readFile, readdir, rename, rm, stat, truncate, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Ledger } from "../../src/ledger/schema.ts";
import { runCli } from "../support/cli.ts";

// A fresh demo run (fake model, 36 attempts) keeps every transcript beside its ledger; `ledger
// verify` agrees with it, and fails naming the field on each kind of tampering.

let work = "";
let ledgerPath = "";
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-verify-"));
  const r = await runCli(["demo", "--quiet", "--workdir", join(work, "demo")], { timeoutMs: 900_000 });
  expect(r.code, r.stderr).toBe(0);
  ledgerPath = (JSON.parse(r.stdout.slice(r.stdout.indexOf('{\n  "demo"'))) as { demo: { ledger: string } }).demo.ledger;
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
    expect(adjudication).toBe(36);
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
