import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { activeProfile, cachedProfilePath, profileText, sealProfile } from "../../src/profile/load.ts";
import { GUESSED_ARM } from "../../src/adjudicate/schema.ts";
import { clopperPearson } from "../../src/adjudicate/blinding.ts";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { prepareDemo, type DemoSetup } from "../../src/demo/setup.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { LABELS, reapOrphans } from "../../src/sandbox/reaper.ts";
import { reapOrphanExports, removeTree } from "../../src/export/export.ts";
import { reapOrphanFolders } from "../../src/util/orphans.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { readRecord } from "../../src/adjudicate/store.ts";
import { itemIdFor } from "../../src/adjudicate/prompt.ts";
import type { AdjudicationRecord } from "../../src/adjudicate/schema.ts";
import { generateSchemas } from "../../src/schemas/json-schemas.ts";
import { runCli, runCompiledCli } from "../support/cli.ts";
import { makeFakeDir, parseEvents, runFakeOnHost, type FakeDir, type FakeRecord } from "../support/fake-claude.ts";
import { adjudicatorArguments, buildAdjudicatorPrompt } from "../../src/adjudicate/prompt.ts";
import { readVerdict } from "../../src/adjudicate/plan.ts";
import { DEMO } from "../support/adjudication-fixtures.ts";
import { DEFAULT_ADJUDICATOR_MODELS } from "../../src/cost/models.ts";

// Real Docker, the fake claude image, the demo corpus: runs of the shipped command, then their
// blind adjudication with the fake's scripted verdicts (--json-schema).

const MODEL = "claude-haiku-5-5";
let work = "";
let demo: DemoSetup;
const fakes: FakeDir[] = [];

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-adjudicate-"));
  demo = await prepareDemo(join(work, "demo"), new DockerRuntime());
  // By id: other checkouts on this engine retag the same name.
  demo.image = demo.imageId;
}, 300_000);
afterAll(async () => {
  for (const f of fakes) await f.cleanup();
  await rm(work, { recursive: true, force: true });
});

const roots = () => Object.entries(demo.roots).flatMap(([name, dir]) => ["--root", `${name}=${dir}`]);

async function fake(file: object): Promise<FakeDir> {
  const f = await makeFakeDir(file as never);
  fakes.push(f);
  return f;
}

/** What the fake recorded of each study run, by name: the attempts' containers. */
const studyFakes = new Map<string, FakeDir>();

/** A run of the demo study with the fake model; returns the ledger's path. */
async function runStudy(name: string, mode: "--pilot" | "--run", behaviour: object = {}): Promise<string> {
  const f = await fake(behaviour);
  studyFakes.set(name, f);
  const output = join(work, `${name}.ledger.json`);
  const r = await runCli(
    [
      mode,
      "--approve-budget",
      "--transport",
      "cli",
      ...roots(),
      "--output",
      output,
      "--image",
      demo.image,
      "--isolation",
      "offline",
      "--claude-config-dir",
      demo.loginDir,
      "--quiet",
      "--fake-behaviour",
      join(f.dir, "behaviour.json"),
      "--fake-records",
      join(f.dir, "records"),
    ],
    { env: { STUDY_MODEL: MODEL, STUDY_BUDGET_USD: "5" }, timeoutMs: 600_000 },
  );
  expect(r.stderr).not.toMatch(/internal error/);
  return output;
}

interface Adjudicated {
  code: number | null;
  stdout: string;
  stderr: string;
  record: AdjudicationRecord;
  records: Array<{ file: string; record: FakeRecord }>;
  path: string;
}

/** `protocol`: no --force-same-model and no STUDY_ADJUDICATOR_MODEL, so the default different model adjudicates. */
async function adjudicate(name: string, ledger: string, behaviour: object, extra: string[] = [], env: Record<string, string> = {}, protocol = false): Promise<Adjudicated> {
  const f = await fake(behaviour);
  const path = join(work, `${name}.adjudication.json`);
  const r = await runCli(
    [
      "adjudicate",
      "--ledger",
      ledger,
      "--output",
      path,
      "--approve-budget",
      "--seed",
      "11",
      ...(protocol ? [] : ["--force-same-model"]),
      "--isolation",
      "offline",
      "--claude-config-dir",
      demo.loginDir,
      "--fake-behaviour",
      join(f.dir, "behaviour.json"),
      "--fake-records",
      join(f.dir, "records"),
      ...extra,
    ],
    { env: { STUDY_ADJUDICATOR_MODEL: protocol ? undefined : MODEL, STUDY_ADJUDICATION_BUDGET_USD: "5", ...env } as Record<string, string>, timeoutMs: 600_000 },
  );
  expect(r.stderr).not.toMatch(/internal error/);
  return { ...r, record: await readRecord(path), records: await f.records(), path };
}

function validateAgainstGeneratedSchema(record: unknown): string[] {
  const ajv = new Ajv2020({ allErrors: true, strict: false });
  addFormats.default(ajv);
  const validate = ajv.compile(generateSchemas()["adjudication.schema.json"] as object);
  return validate(record) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message}`);
}

describe("adjudicate a pilot of the demo", () => {
  let ledgerPath = "";
  let result: Adjudicated;
  beforeAll(async () => {
    ledgerPath = await runStudy("pilot", "--pilot");
    const ledger = await readLedger(ledgerPath);
    // Observation 0: the scripted verdict comes only as the JSON text of `result`.
    result = await adjudicate("pilot", ledgerPath, {
      default: { kind: "ok", verdicts: { [itemIdFor(ledger.runId, 1)]: { outcome: "partial" } } },
      attempts: {},
    });
  }, 600_000);

  it("gives one outcome per observation, from the adjudicator, and validates against the generated schema", async () => {
    const ledger = await readLedger(ledgerPath);
    expect(result.code).toBe(0);
    const { record } = result;
    expect(record.status).toBe("complete");
    expect(record.items.map((i) => i.observationIndex).sort()).toEqual(ledger.observations.map((o) => o.index));
    for (const item of record.items) {
      const o = ledger.observations[item.observationIndex]!;
      expect([item.task, item.scenario, item.repetition]).toEqual([o.task, o.scenario, o.repetition]);
      expect(item.decidedBy).toBe("adjudicator");
      expect(item.run?.status).toBe("completed");
      expect(item.verdict?.propositions.map((p) => p.id)).toEqual(["P1", "P2"]);
    }
    expect(record.items.find((i) => i.observationIndex === 1)).toMatchObject({ outcome: "partial", score: 0.5 });
    expect(record.items.find((i) => i.observationIndex === 0)).toMatchObject({ outcome: "correct", score: 1 });
    expect(record).toMatchObject({ method: "agent", humanReview: false, ledger: { runId: ledger.runId, protocolHash: ledger.protocol.protocolHash }, order: { seed: 11 } });
    expect(record.adjudicator).toMatchObject({ model: MODEL, answeringModel: MODEL, sameModel: true, forcedSameModel: true });
    expect(record.budget.spentUsd).toBeGreaterThan(0);
    // Blinding measured: after every verdict, a call of its own guessed the arm, scored against the true arm, summed with its interval.
    for (const item of record.items) {
      const arm = ledger.observations[item.observationIndex]!.arm;
      expect(item.armGuess).toMatchObject({ arm, reason: null, run: { phase: "settled", status: "completed" } });
      expect(item.armGuess!.guess).not.toBeNull();
      expect(item.armGuess!.correct).toBe(GUESSED_ARM[item.armGuess!.guess!] === arm);
    }
    const right = record.items.filter((i) => i.armGuess?.correct).length;
    expect(record.blinding).toMatchObject({ guesses: record.items.length, correct: right, missing: 0, interval95: clopperPearson(right, record.items.length) });
    expect(validateAgainstGeneratedSchema(record)).toEqual([]);
    expect((await stat(result.path)).mode & 0o777).toBe(0o600);
    // The ledger is only read.
    expect(await readLedger(ledgerPath)).toEqual(ledger);
  });

  it("ran each adjudicator in its own hardened container: read-only export, read tools, --json-schema, no scenario named", async () => {
    const runs = result.records.filter((r) => r.file.match(/^\d+-/));
    // Per item: the verdict call, then the arm-guess call.
    expect(runs).toHaveLength(4);
    const asked = (rec: FakeRecord) => JSON.parse(rec.argv[rec.argv.indexOf("--json-schema") + 1]!).required as string[];
    expect(runs.map((r) => asked(r.record).join(",")).sort()).toEqual(["armGuess", "armGuess", "outcome,propositions,contradictions,reasons", "outcome,propositions,contradictions,reasons"]);
    for (const { record: rec } of runs) {
      expect(rec.cwd).toBe("/workspace");
      expect(rec.cwdWritable).toBe(false);
      expect(rec.rootWritable).toBe(false);
      expect(rec.anthropicApiKeyPresent).toBe(false);
      expect(rec.networkInterfaces).toEqual(["lo"]);
      const argv = rec.argv;
      expect(argv[argv.indexOf("--tools") + 1]).toBe("Read,Grep,Glob");
      expect(argv[argv.indexOf("--mcp-config") + 1]).toBe('{"mcpServers":{}}');
      const prompt = argv.at(-1)!;
      expect(argv.at(-2)).toBe("--");
      expect(prompt.toLowerCase()).not.toMatch(/repository-only|doc-bridge|mcp/);
      expect(prompt).toContain("How does ledgerlite round an amount");
      // Only the arm-guess call hears of the two runs.
      if (asked(rec).includes("armGuess")) expect(prompt).toContain("files-and-docs-server");
      else expect(prompt).not.toMatch(/files-only|files-and-docs-server|armGuess/);
    }
  });

  it("gives the adjudicator's container no instruction file, while the attempts' containers held the corpus's; the ledger and the report name them", async () => {
    const ledger = await readLedger(ledgerPath);
    const instructionNames = /^(claude\.md|claude\.local\.md|agents\.md|\.claude)$/i;
    const workspace = (rec: FakeRecord) => {
      const l = rec.listings["/workspace"];
      if (!l || !("entries" in l)) throw new Error(`no listing of /workspace in the fake's record: ${JSON.stringify(l)}`);
      return l.entries;
    };
    // The attempts: the demo corpus commits CLAUDE.md and AGENTS.md in every repository, and the attempts keep them.
    const attempts = (await studyFakes.get("pilot")!.records()).filter((r) => /^\d+-/.test(r.file));
    expect(attempts).toHaveLength(ledger.observations.length);
    for (const { record: rec } of attempts)
      expect(
        workspace(rec)
          .filter((n) => instructionNames.test(n))
          .sort(),
      ).toEqual(["AGENTS.md", "CLAUDE.md"]);
    for (const o of ledger.observations) expect(o.instructionFiles).toEqual(["AGENTS.md", "CLAUDE.md"]);
    // The adjudicator: the same corpus at the same pin, and none of them.
    const graders = result.records.filter((r) => /^\d+-/.test(r.file));
    expect(graders).toHaveLength(result.record.items.length + result.record.items.filter((i) => i.armGuess !== undefined).length);
    for (const { record: rec } of graders) {
      expect(workspace(rec).length).toBeGreaterThan(0);
      expect(workspace(rec).filter((n) => instructionNames.test(n))).toEqual([]);
    }
    for (const item of result.record.items) {
      expect(item.run?.instructionFiles).toEqual([]);
      expect(item.armGuess?.run.instructionFiles).toEqual([]);
    }
    const md = await runCompiledCli(["report", "--ledger", ledgerPath, "--adjudication", result.path, "--format", "markdown"]);
    expect(md.code).toBe(0);
    const repository = ledger.observations[0]!.repository;
    expect(md.stdout).toContain(`| ${repository} | AGENTS.md, CLAUDE.md |`);
  });

  it("adjudicates with a different priced model by default, and every report names it; --force-same-model is reported as a departure", async () => {
    const r = await adjudicate("pilot-default-model", ledgerPath, {}, [], {}, true);
    expect(r.code, `${r.stderr}\n${r.record.items.map((i) => i.reason).join("\n")}`).toBe(0);
    expect(r.record.adjudicator).toMatchObject({ model: DEFAULT_ADJUDICATOR_MODELS[0], answeringModel: MODEL, sameModel: false, forcedSameModel: false });
    // The adjudicator containers ran that model, and its cost passed the check against the measured table.
    for (const { record: rec } of r.records.filter((x) => /^\d+-/.test(x.file))) expect(rec.argv[rec.argv.indexOf("--model") + 1]).toBe(DEFAULT_ADJUDICATOR_MODELS[0]);
    expect(r.record.items.every((i) => i.run?.status === "completed")).toBe(true);
    const different = await runCompiledCli(["report", "--ledger", ledgerPath, "--adjudication", r.path, "--format", "markdown"]);
    expect(different.code).toBe(0);
    expect(different.stdout).toContain(`Adjudicated by ${DEFAULT_ADJUDICATOR_MODELS[0]}, a different model from the answering model ${MODEL}, as the protocol asks.`);
    expect(different.stdout).not.toMatch(/Departure from the protocol/);
    const forced = await runCompiledCli(["report", "--ledger", ledgerPath, "--adjudication", result.path, "--format", "markdown"]);
    expect(forced.stdout).toContain(`Departure from the protocol: the adjudicator was the answering model ${MODEL} (--force-same-model)`);
    const html = await runCompiledCli(["report", "--ledger", ledgerPath, "--adjudication", result.path, "--format", "html"]);
    expect(html.stdout).toContain("Departure from the protocol");
  });

  it("ledger verify --adjudication reads every verdict call and arm-guess call again, and names a guess changed after the fact", async () => {
    const ok = await runCompiledCli(["ledger", "verify", ledgerPath, "--adjudication", result.path]);
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    // One transcript per call: each item's verdict and its guess.
    const { readdir, writeFile, cp } = await import("node:fs/promises");
    expect((await readdir(`${result.path}.transcripts`)).length).toBe(2 * result.record.items.length);
    const copy = join(work, "pilot-guess-edited.adjudication.json");
    await cp(`${result.path}.transcripts`, `${copy}.transcripts`, { recursive: true });
    const edited = structuredClone(result.record);
    const g = edited.items[0]!.armGuess!;
    g.guess = g.guess === "files-only" ? "files-and-docs-server" : "files-only";
    g.correct = !g.correct;
    await writeFile(copy, JSON.stringify(edited, null, 2), { mode: 0o600 });
    const r = await runCompiledCli(["ledger", "verify", ledgerPath, "--adjudication", copy]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`adjudication items[0] (observation ${edited.items[0]!.observationIndex}).armGuess.guess: ledger ${JSON.stringify(g.guess)}, transcript gives`);
  });

  // contract: R143
  it("asks the arm guess only after the verdict is recorded: a runner killed while the guess runs leaves the verdict on disk and no guess", async () => {
    const f = await fake({ default: { kind: "ok", guessDelayMs: 120_000 } });
    const path = join(work, "pilot-killed.adjudication.json");
    let pid = 0;
    const running = runCli(
      [
        "adjudicate",
        "--ledger",
        ledgerPath,
        "--output",
        path,
        "--approve-budget",
        "--seed",
        "11",
        "--force-same-model",
        "--isolation",
        "offline",
        "--claude-config-dir",
        demo.loginDir,
        "--fake-behaviour",
        join(f.dir, "behaviour.json"),
        "--fake-records",
        join(f.dir, "records"),
      ],
      { env: { STUDY_ADJUDICATOR_MODEL: MODEL, STUDY_ADJUDICATION_BUDGET_USD: "5" }, timeoutMs: 400_000, onSpawn: (p) => (pid = p) },
    );
    const asks = (rec: FakeRecord) => (JSON.parse(rec.argv[rec.argv.indexOf("--json-schema") + 1]!).required as string[]).join(",");
    // The first arm-guess container has started (the fake records itself first): kill the runner there.
    let ended = false;
    void running.finally(() => (ended = true));
    let started: Array<{ file: string; record: FakeRecord }> = [];
    for (const deadline = Date.now() + 300_000; !started.some((r) => asks(r.record) === "armGuess"); await new Promise((r) => setTimeout(r, 200))) {
      if (ended || Date.now() > deadline) throw new Error(`the runner ${ended ? "ended" : "ran for 300 s"} without starting an arm-guess call`);
      started = (await f.records()).filter((r) => /^\d+-/.test(r.file));
    }
    process.kill(pid, "SIGKILL");
    const r = await running;
    try {
      expect(r.code).toBeNull();
      // Exactly one verdict call ran before it, and its verdict is on disk, whole and valid.
      expect(started.map((x) => asks(x.record)).sort()).toEqual(["armGuess", "outcome,propositions,contradictions,reasons"]);
      const record = await readRecord(path);
      expect(record.items).toHaveLength(1);
      const item = record.items[0]!;
      expect(item).toMatchObject({ decidedBy: "adjudicator", outcome: "correct", score: 1, run: { phase: "settled", status: "completed" } });
      expect(item.verdict?.outcome).toBe("correct");
      // The guess's own call was open: reserved and running, no guess, and not counted.
      expect(item.armGuess).toMatchObject({ guess: null, correct: null, run: { phase: "running", status: null } });
      expect(record.budget.reservedUsd).toBe(item.armGuess!.run.reservationUsd);
      expect(record.blinding).toMatchObject({ guesses: 0, missing: 0 });
      expect(validateAgainstGeneratedSchema(record)).toEqual([]);
    } finally {
      // What the dead runner left: its sleeping container, export and folders (as the next run's preflight does).
      const runtime = new DockerRuntime();
      for (const c of await runtime.listByLabel({ [LABELS.pid]: String(pid) })) await runtime.remove(c.id);
      await reapOrphans(runtime);
      await reapOrphanExports();
      await reapOrphanFolders("home", removeTree);
      await reapOrphanFolders("gateway", removeTree);
    }
  }, 600_000);

  // contract: R180
  it("records the result-text fallback and an unusable verdict as what they are", async () => {
    const ledger = await readLedger(ledgerPath);
    const r = await adjudicate("pilot-fallback", ledgerPath, {
      default: {
        kind: "ok",
        structuredOutput: false,
        verdicts: { [itemIdFor(ledger.runId, 0)]: { outcome: "correct", propositions: [] } },
      },
    });
    // Observation 0's verdict grades no proposition: its item is blocked, the other goes on.
    expect(r.code).toBe(0);
    expect(r.record.items.find((i) => i.observationIndex === 0)).toMatchObject({ outcome: "blocked", score: null, decidedBy: "runner" });
    expect(r.record.items.find((i) => i.observationIndex === 0)!.reason).toMatch(/unusable: the verdict must grade P1, P2 once each: missing P1, P2/);
    expect(r.record.items.find((i) => i.observationIndex === 1)).toMatchObject({ outcome: "correct", reason: "adjudicator verdict (from result)" });
    // The runner's decision is derived again from the ledger and the transcripts: the record verifies (contract R180).
    const verified = await runCompiledCli(["ledger", "verify", ledgerPath, "--adjudication", r.path]);
    expect(verified.code, verified.stdout).toBe(0);
  });

  // contract: R180
  it("stops at the cap like a run: the first verdict fits, its arm guess is refused, and the item not reached is recorded blocked", async () => {
    const r = await adjudicate("pilot-cap", ledgerPath, {}, ["--item-budget-usd", "0.1"], { STUDY_ADJUDICATION_BUDGET_USD: "0.1" });
    expect(r.code).toBe(1);
    expect(r.record.status).toBe("blocked");
    expect(r.record.items).toHaveLength(2);
    // The verdict is kept; the guess was never asked, so it is not counted either way.
    expect(r.record.items[0]).toMatchObject({ decidedBy: "adjudicator", run: { status: "completed" } });
    expect(r.record.items[0]!.armGuess).toBeUndefined();
    expect(r.record.blinding).toMatchObject({ guesses: 0, missing: 0 });
    expect(r.record.items[1]).toMatchObject({ outcome: "blocked", run: null });
    expect(r.record.items[1]!.reason).toMatch(/not adjudicated: the arm guess of item 1 refused: the per-attempt limit 0.1 USD does not fit under the remaining budget/);
    expect(r.record.budget.spentUsd).toBeLessThanOrEqual(0.1);
    // The runner's decision is derived again from the ledger and the transcripts: the record verifies (contract R180).
    const verified = await runCompiledCli(["ledger", "verify", ledgerPath, "--adjudication", r.path]);
    expect(verified.code, verified.stdout).toBe(0);
  });

  // contract: R180
  it("stops at an adjudicator run that fails, charging its reservation, and does not retry", async () => {
    const r = await adjudicate("pilot-fail", ledgerPath, { attempts: { "0": { kind: "exit", code: 1 } } });
    expect(r.code).toBe(1);
    // No init and no result: by the attempts' rules that is invalid-setup, charged its reservation.
    expect(r.record.items[0]).toMatchObject({ outcome: "blocked", run: { status: "invalid-setup", chargedUsd: 0.1 } });
    expect(r.record.items[0]!.reason).toMatch(/^the adjudicator run of item 1 ended invalid-setup: no init event/);
    expect(r.record.items[1]!.reason).toMatch(/^not adjudicated: the adjudicator run of item 1 ended invalid-setup/);
    expect(r.records.filter((x) => /^\d+-/.test(x.file))).toHaveLength(1);
    // The runner's decision is derived again from the ledger and the transcripts: the record verifies (contract R180).
    const verified = await runCompiledCli(["ledger", "verify", ledgerPath, "--adjudication", r.path]);
    expect(verified.code, verified.stdout).toBe(0);
  });
});

describe("adjudicate a full run of the demo that was blocked", () => {
  // contract: R180
  it("gives every observation an outcome, the blocked attempt included, and the report shows the gaps", async () => {
    const ledgerPath = await runStudy("full", "--run", { attempts: { "7": { kind: "ok", subtype: "error_during_execution" } } });
    const ledger = await readLedger(ledgerPath);
    expect(ledger.status).toBe("blocked");
    expect(ledger.observations).toHaveLength(8);
    const r = await adjudicate("full", ledgerPath, {});
    expect(r.code).toBe(0);
    expect(r.record.items).toHaveLength(8);
    const blocked = r.record.items.find((i) => i.observationIndex === 7)!;
    expect(blocked).toMatchObject({ outcome: "blocked", score: null, decidedBy: "runner", run: null });
    expect(blocked.reason).toMatch(/^the attempt ended failed.*there is no answer to grade$/);
    expect(r.record.items.filter((i) => i.outcome === "correct")).toHaveLength(7);
    // The items were decided in the recorded shuffled order, not the run order.
    expect(r.record.items.map((i) => i.observationIndex)).toEqual(r.record.order.observationIndices);
    expect(r.record.order.observationIndices).not.toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(validateAgainstGeneratedSchema(r.record)).toEqual([]);
    // The runner's decision is derived again from the ledger and the transcripts: the record verifies (contract R180).
    const verified = await runCompiledCli(["ledger", "verify", ledgerPath, "--adjudication", r.path]);
    expect(verified.code, verified.stdout).toBe(0);

    const report = await runCompiledCli(["report", "--ledger", ledgerPath, "--adjudication", r.path, "--format", "json"]);
    expect(report.code).toBe(0);
    const data = JSON.parse(report.stdout);
    expect(data.attempts).toHaveLength(36);
    expect(data.attempts.filter((a: { status: string }) => a.status === "not run")).toHaveLength(28);
    expect(data.gaps).toEqual(expect.arrayContaining([expect.stringMatching(/attempt failed/), expect.stringMatching(/correctness blocked \(the attempt ended failed/)]));
    const md = await runCompiledCli(["report", "--ledger", ledgerPath, "--adjudication", r.path]);
    expect(md.stdout).toContain("There is no human review.");
    expect(md.stdout).toMatch(/\| blocked \| missing \|/);
    // Nothing private reaches a report.
    for (const o of ledger.observations) if (o.answer) expect(report.stdout + md.stdout).not.toContain(o.answer);
  }, 900_000);
});

describe("the fake claude as adjudicator (--json-schema)", () => {
  const prompt = buildAdjudicatorPrompt({ itemId: "item-0123456789ab", task: DEMO.tasks[2]!, maskedAnswer: "P9: not a proposition line of the prompt" });
  const args = adjudicatorArguments({ model: MODEL, maxBudgetUsd: 0.1, prompt });

  it("answers with structured_output and the same JSON in result, over the prompt's propositions", async () => {
    const f = await fake({});
    const r = await runFakeOnHost(args, { cwd: demo.roots.queuekit!, fakeDir: f.dir });
    expect(r.exitCode).toBe(0);
    const result = parseEvents(r.stdout).at(-1)!;
    expect(result.type).toBe("result");
    expect(JSON.parse(result.result)).toEqual(result.structured_output);
    expect(result.structured_output.propositions.map((p: { id: string }) => p.id)).toEqual(["P1", "P2"]);
    expect(readVerdict(result.structured_output, result.result, 2)).toMatchObject({ ok: true, verdict: { outcome: "correct" } });
  });

  it("takes a scripted verdict by the prompt's item id, and can leave structured_output out", async () => {
    const f = await fake({ default: { kind: "ok", structuredOutput: false, verdicts: { "item-0123456789ab": { outcome: "incorrect" } }, verdict: { outcome: "partial" } } });
    const r = await runFakeOnHost(args, { cwd: demo.roots.queuekit!, fakeDir: f.dir });
    const result = parseEvents(r.stdout).at(-1)!;
    expect(result.structured_output).toBeUndefined();
    expect(readVerdict(undefined, result.result, 2)).toMatchObject({ ok: true, verdict: { outcome: "incorrect" } });
  });
});

describe("the adjudicate command refuses before anything starts", () => {
  it("lists every missing flag and variable at once (exit 2)", async () => {
    const r = await runCli(["adjudicate"], { env: { STUDY_ADJUDICATOR_MODEL: undefined, STUDY_ADJUDICATION_BUDGET_USD: undefined } });
    expect(r.code).toBe(2);
    for (const needed of ["--ledger PATH is required", "--output PATH is required", "--approve-budget is required", "STUDY_ADJUDICATION_BUDGET_USD is not set"]) {
      expect(r.stderr).toContain(needed);
    }
  });

  it("refuses an alias and a model without a measured price row as the adjudicator", async () => {
    const ledgerPath = join(work, "pilot.ledger.json");
    const out = join(work, "refused-model.json");
    const alias = await runCli(["adjudicate", "--ledger", ledgerPath, "--output", out, "--approve-budget"], { env: { STUDY_ADJUDICATOR_MODEL: "sonnet", STUDY_ADJUDICATION_BUDGET_USD: "1" } });
    expect(alias.code).toBe(2);
    expect(alias.stderr).toMatch(/STUDY_ADJUDICATOR_MODEL 'sonnet' is an alias the CLI resolves on its own \(the pinned CLI runs it as claude-sonnet-5-5\)/);
    const unpriced = await runCli(["adjudicate", "--ledger", ledgerPath, "--output", out, "--approve-budget"], {
      env: { STUDY_ADJUDICATOR_MODEL: "claude-3-opus", STUDY_ADJUDICATION_BUDGET_USD: "1" },
    });
    expect(unpriced.code).toBe(2);
    expect(unpriced.stderr).toMatch(/'claude-3-opus' has no row in the measured price table/);
    await expect(stat(out)).rejects.toThrow(/ENOENT/);
  });

  // contract: R265
  it("refuses a --cli-version whose calibration shows no structured_output on the result, before anything starts", async () => {
    const cache = join(work, "cache-no-structured-output");
    const { sha256: _s, ...body } = structuredClone(activeProfile());
    await mkdir(join(cache, "profiles"), { recursive: true });
    await writeFile(cachedProfilePath("2.1.916", cache), profileText(sealProfile({ ...body, cliVersion: "2.1.916", structuredOutput: { ...body.structuredOutput, resultField: false } })));
    const out = join(work, "refused-structured-output.json");
    const r = await runCli(["adjudicate", "--ledger", join(work, "pilot.ledger.json"), ...roots(), "--output", out, "--approve-budget", "--force-same-model", "--cli-version", "2.1.916"], {
      env: { STUDY_ADJUDICATOR_MODEL: MODEL, STUDY_ADJUDICATION_BUDGET_USD: "1", STUDY_RUNNER_CACHE: cache },
    });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(
      /^study-runner: with --json-schema, Claude Code 2\.1\.916's result carries no structured_output \(measured by its calibration\), and the adjudicator reads its verdict there; nothing was reserved/m,
    );
    await expect(stat(out)).rejects.toThrow(/ENOENT/);
  });

  it("refuses the answering model without --force-same-model, and a ledger that is still running", async () => {
    const ledgerPath = join(work, "pilot.ledger.json");
    const out = join(work, "refused.json");
    const r = await runCli(["adjudicate", "--ledger", ledgerPath, "--output", out, "--approve-budget", "--seed", "x"], { env: { STUDY_ADJUDICATOR_MODEL: MODEL, STUDY_ADJUDICATION_BUDGET_USD: "1" } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/is the answering run's model; .* or pass --force-same-model/);
    expect(r.stderr).toMatch(/--seed must be a whole number/);
    await expect(stat(out)).rejects.toThrow(/ENOENT/);
    const running = JSON.parse(await readFile(ledgerPath, "utf8"));
    running.status = "running";
    const { writeFile } = await import("node:fs/promises");
    const runningPath = join(work, "running.ledger.json");
    await writeFile(runningPath, JSON.stringify(running));
    const s = await runCli(["adjudicate", "--ledger", runningPath, "--output", out, "--approve-budget", "--force-same-model"], {
      env: { STUDY_ADJUDICATOR_MODEL: MODEL, STUDY_ADJUDICATION_BUDGET_USD: "1" },
    });
    expect(s.code).toBe(2);
    expect(s.stderr).toMatch(/is still running/);
  });
});
