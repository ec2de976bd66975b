/**
 * `study-runner export` promises "exactly what an attempt sees". Four callers make exports: the
 * export command, the CLI attempt, the http attempt and the adjudicator. Here the manifest lives
 * inside a checkout, at a path the corpus also commits (a hostile or careless corpus: the checkout
 * hides its edit with skip-worktree, so it still counts as clean), and every path must leave it out
 * in the same way: the four export hashes are one.
 */
import { execFileSync } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadManifest } from "../../src/manifest/load.ts";
import { hashExport, planExport } from "../../src/export/export.ts";
import { exportSourceFor } from "../../src/export/options.ts";
import { adjudicatorFilterOptions } from "../../src/corpus/filter.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { readRecord } from "../../src/adjudicate/store.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { runCli } from "../support/cli.ts";
import { makeFakeDir } from "../support/fake-claude.ts";
import { pilotScripts, runHttp } from "../support/http-fixture.ts";
import { MODEL, preparePipeline, runPipeline, type Pipeline } from "../support/pipeline.ts";

let p: Pipeline;
let manifestPath: string;
let root: string;

beforeAll(async () => {
  p = await preparePipeline("export-paths");
  root = p.demo.roots.ledgerlite!;
  // The manifest the run is given sits at AGENTS.md of the ledgerlite checkout; the commit holds
  // another AGENTS.md, and skip-worktree makes git status call the checkout clean.
  manifestPath = join(root, "AGENTS.md");
  execFileSync("git", ["update-index", "--skip-worktree", "AGENTS.md"], { cwd: root });
  await writeFile(manifestPath, await readFile(DEMO_MANIFEST));
  expect(execFileSync("git", ["status", "--porcelain"], { cwd: root }).toString()).toBe("");
}, 300_000);
afterAll(async () => {
  await p?.cleanup();
});

describe("every export path builds its options in one place", () => {
  it("the export command, the CLI attempt, the http attempt and the adjudicator export the same files (one export hash)", async () => {
    const out = join(p.work, "export-out");
    const exported = await runCli(["export", "--manifest", manifestPath, "--root", `ledgerlite=${root}`, "--repository", "ledgerlite", "--out", out]);
    expect(exported.stderr).toBe("");
    expect(exported.code).toBe(0);
    const summary = JSON.parse(exported.stdout);
    expect(summary.excluded.manifest).toBe(1);
    const loaded = await loadManifest(manifestPath);
    const withoutRule = await planExport({ repoDir: root, pin: summary.pin, answerKeys: loaded.manifest.answerKeys?.ledgerlite });
    expect(withoutRule.files.map((f) => f.path)).toContain("AGENTS.md");
    expect(summary.exportHash).not.toBe(await hashExport(root, withoutRule.files));

    const cli = await runPipeline(p, { args: ["--manifest", manifestPath, "--quiet"] });
    expect(cli.stderr).toBe("");
    expect(cli.code).toBe(0);
    const cliLedger = await readLedger(cli.run.output);
    expect(cliLedger.observations.map((o) => o.exportHash)).toEqual([summary.exportHash, summary.exportHash]);

    const http = await runHttp({ work: p.work, roots: new Map(Object.entries(p.demo.roots)), loaded, cleanup: async () => {} }, pilotScripts());
    expect(http.code).toBe(0);
    expect(http.ledger.observations.map((o) => o.exportHash)).toEqual([summary.exportHash, summary.exportHash]);

    const fake = await makeFakeDir({} as never);
    try {
      const record = join(p.work, "adjudication.json");
      const adjudicated = await runCli(
        [
          "adjudicate",
          "--ledger",
          cli.run.output,
          "--output",
          record,
          "--approve-budget",
          "--seed",
          "3",
          "--force-same-model",
          "--isolation",
          "offline",
          "--claude-config-dir",
          p.demo.loginDir,
          "--fake-behaviour",
          join(fake.dir, "behaviour.json"),
          "--fake-records",
          join(fake.dir, "records"),
        ],
        { env: { STUDY_ADJUDICATOR_MODEL: MODEL, STUDY_ADJUDICATION_BUDGET_USD: "1" }, timeoutMs: 300_000 },
      );
      expect(adjudicated.stderr).not.toMatch(/internal error/);
      const items = (await readRecord(record)).items;
      expect(items.length).toBe(2);
      // The adjudicator's export is the same builder's with the CLI's instruction files removed
      // (the corpus may not instruct the grader): the manifest stays out of it too.
      const graderView = await planExport(adjudicatorFilterOptions(await exportSourceFor(loaded, "ledgerlite", root)));
      expect(graderView.files.map((f) => f.path)).not.toContain("AGENTS.md");
      const graderHash = await hashExport(root, graderView.files);
      expect(items.map((i) => i.run?.exportHash)).toEqual([graderHash, graderHash]);
    } finally {
      await fake.cleanup();
    }
  }, 600_000);
});
