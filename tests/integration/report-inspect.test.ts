import { createHash } from "node:crypto";
import { chmod, cp, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { Browser, Page } from "puppeteer-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Ledger } from "../../src/ledger/schema.ts";
import type { ReportData } from "../../src/report/build.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { DEMO } from "../support/adjudication-fixtures.ts";
import { runCompiledCli } from "../support/cli.ts";
import { demoCopy } from "../support/shared-demo.ts";
import { decodePng } from "../support/png.ts";
import { inspectLogValidator } from "../support/inspect-schema.ts";
import { buildInspectViewer, launchChromium, serveInspectViewer } from "../support/inspect-viewer.ts";

// A fresh demo study (fake model, 36 attempts; the suite's shared demo, copied into this file's own
// folder: tests/support/shared-demo.ts) written as Inspect eval logs, checked with Inspect's
// own artefacts: the eval-log schema it published, and its log viewer (the npm package) running in
// headless Chromium. The screenshots are kept (mode 600) in $STUDY_TEST_ARTEFACTS, by default
// study-runner-artefacts under the system temp folder.

const ARTEFACTS = process.env.STUDY_TEST_ARTEFACTS ?? join(tmpdir(), "study-runner-artefacts");

interface Written {
  inspect: string;
  logs: Array<{ arm: "repository" | "mcp"; path: string; samples: number }>;
}

let work = "";
let demo: { ledger: string; adjudication: string; report: { json: string } };
let written: Written;
let browser: Browser | undefined;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-inspect-"));
  const r = await demoCopy(join(work, "demo"));
  expect(r.run.code, r.run.stderr).toBe(0);
  demo = r.demo;
  const w = await runCompiledCli(["report", "--format", "inspect", "--ledger", demo.ledger, "--adjudication", demo.adjudication]);
  expect(w.code, w.stderr).toBe(0);
  written = JSON.parse(w.stdout) as Written;
}, 900_000);
afterAll(async () => {
  await browser?.close();
  await rm(work, { recursive: true, force: true });
});

const readLog = async (path: string) => JSON.parse(await readFile(path, "utf8")) as Record<string, any>;
const sha256 = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");

describe("report --format inspect on a fresh demo study", () => {
  // contract: R166
  // contract: R167
  it("writes one private log per arm beside the ledger, each accepted by Inspect's published schema, one sample per attempt", async () => {
    expect(written.inspect).toBe(`${demo.ledger}.inspect`);
    expect((await stat(written.inspect)).mode & 0o777).toBe(0o700);
    expect(written.logs.map((l) => l.arm)).toEqual(["repository", "mcp"]);
    expect((await readdir(written.inspect)).sort()).toEqual(written.logs.map((l) => basename(l.path)).sort());
    const ledger = JSON.parse(await readFile(demo.ledger, "utf8")) as Ledger;
    const report = JSON.parse(await readFile(demo.report.json, "utf8")) as ReportData;
    const validate = inspectLogValidator();
    for (const l of written.logs) {
      expect((await stat(l.path)).mode & 0o777).toBe(0o600);
      const log = await readLog(l.path);
      const result = validate(log);
      expect(result.errors).toEqual([]);
      expect(result.valid).toBe(true);
      const observations = ledger.observations.filter((o) => o.arm === l.arm);
      expect(log.samples).toHaveLength(18);
      expect(l.samples).toBe(18);
      for (const [k, o] of observations.entries()) {
        const s = log.samples[k];
        const task = DEMO.tasks.find((t) => t.id === o.task)!;
        expect([s.id, s.epoch, s.input, s.output.completion]).toEqual([o.task, o.repetition, task.question, o.answer]);
        expect(s.scores.adjudicator.value).toBe(report.attempts.find((a) => a.index === o.index)!.outcome);
        expect(s.model_usage[`anthropic/${o.model}`]).toMatchObject({ input_tokens: o.inputTokens, output_tokens: o.outputTokens, total_cost: o.chargedUsd });
        // Every tool call of the transcript is a tool call of a message and a tool event.
        const calls = s.messages.flatMap((m: { tool_calls?: unknown[] | null }) => m.tool_calls ?? []);
        expect(calls).toHaveLength(o.toolCalls);
        expect(s.events.filter((e: { event: string }) => e.event === "tool")).toHaveLength(o.toolCalls);
      }
    }
    // Never overwritten: a second run into the same folder refuses (exit 2) and leaves the logs as they were.
    const before = await readFile(written.logs[0]!.path);
    const again = await runCompiledCli(["report", "--format", "inspect", "--ledger", demo.ledger, "--adjudication", demo.adjudication]);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/already exists/);
    expect(await readFile(written.logs[0]!.path)).toEqual(before);
    // Private: refused inside the project (exit 2), and the folder it would have made is not left behind.
    const inside = join(PROJECT_ROOT, "out", `inspect-${basename(work)}`);
    const refused = await runCompiledCli(["report", "--format", "inspect", "--ledger", demo.ledger, "--out", inside]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(`is inside the project ${PROJECT_ROOT}`);
    await expect(stat(inside)).rejects.toThrow(/ENOENT/);
  }, 120_000);

  // contract: R169
  it("carries the ledger file's sha256, the protocol hash and the pinned CLI version; a log made from an edited ledger carries the edit's digest, and the ledger fails `ledger verify` as before", async () => {
    const bytes = await readFile(demo.ledger);
    const ledger = JSON.parse(bytes.toString("utf8")) as Ledger;
    for (const l of written.logs) {
      expect((await readLog(l.path)).eval.metadata).toMatchObject({ ledger_file_sha256: sha256(bytes), protocol_hash: ledger.protocol.protocolHash, pinned_cli_version: CLAUDE_CODE_VERSION });
    }
    // The logs beside the ledger change nothing for verify.
    expect((await runCompiledCli(["ledger", "verify", demo.ledger])).code).toBe(0);

    const dir = join(work, "edited");
    await cp(join(demo.ledger, ".."), dir, { recursive: true });
    const edited = join(dir, basename(demo.ledger));
    await rm(`${edited}.inspect`, { recursive: true });
    ledger.observations[3]!.answer = "an answer the attempt never gave";
    const editedBytes = Buffer.from(`${JSON.stringify(ledger, null, 2)}\n`);
    await writeFile(edited, editedBytes);
    const w = await runCompiledCli(["report", "--format", "inspect", "--ledger", edited]);
    expect(w.code, w.stderr).toBe(0);
    const logs = (JSON.parse(w.stdout) as Written).logs;
    const log = await readLog(logs.find((l) => l.arm === ledger.observations[3]!.arm)!.path);
    expect(log.eval.metadata.ledger_file_sha256).toBe(sha256(editedBytes));
    expect(log.eval.metadata.ledger_file_sha256).not.toBe(sha256(bytes));
    const v = await runCompiledCli(["ledger", "verify", edited]);
    expect(v.code).not.toBe(0);
    expect(v.stdout + v.stderr).toMatch(/observations\[3\] \(.*\)\.answer: the ledger.s value differs/);
  }, 300_000);

  /** What Inspect's viewer throws when it syncs its log database before it has opened it (seen once in about twenty runs). */
  const VIEWER_START_RACE = "Error: No database available for replication.";

  // contract: R168
  it("Inspect's log viewer in Chromium shows both arms with their scores, every sample with its score, and a sample's transcript", async () => {
    const viewer = join(work, "viewer");
    await buildInspectViewer(viewer);
    const server = await serveInspectViewer(viewer, written.inspect);
    await mkdir(ARTEFACTS, { recursive: true, mode: 0o700 });
    const report = JSON.parse(await readFile(demo.report.json, "utf8")) as ReportData;
    const errors: string[] = [];
    browser = await launchChromium();
    const open = async (hash: string, wait: (page: Page) => Promise<unknown>, shot: string, again = true): Promise<Page> => {
      const page = await browser!.newPage();
      const own: string[] = [];
      page.on("pageerror", (e) => {
        own.push(String(e));
        errors.push(String(e));
      });
      await page.setViewport({ width: 1400, height: 2400 });
      await page.goto(`${server.url}#${hash}`, { waitUntil: "networkidle0", timeout: 120_000 });
      await wait(page);
      // The viewer's own start-up race, whatever the logs: two of its syncLogs calls at once, the
      // second syncing before the first has started replication. A page that met only that is
      // loaded once more, and must then load without any error.
      if (again && own.length > 0 && own.every((e) => e === VIEWER_START_RACE)) {
        await page.close();
        for (const e of own) errors.splice(errors.indexOf(e), 1);
        return open(hash, wait, shot, false);
      }
      const png = join(ARTEFACTS, `inspect-viewer-${shot}.png`);
      await rm(png, { force: true });
      await page.screenshot({ path: png });
      await chmod(png, 0o600);
      const image = decodePng(await readFile(png));
      expect(image.width).toBe(1400);
      return page;
    };
    try {
      // The log list: one row per arm, its task (the scenario), model and mean score.
      // (The grid draws a row's pinned column apart: its text is in the centre container.)
      const rowSelector = ".ag-center-cols-container .ag-row";
      const list = await open("/", (p) => p.waitForFunction((sel) => document.querySelectorAll(sel).length >= 2, { timeout: 60_000 }, rowSelector), "logs");
      const rows = await list.$$eval(rowSelector, (els) => els.map((e) => e.textContent ?? ""));
      expect(rows).toHaveLength(2);
      for (const l of written.logs) {
        const scenario = report.scenarios[l.arm];
        const row = rows.find((r) => r.includes(basename(l.path)));
        expect(row, rows.join("\n")).toBeDefined();
        expect(row).toContain(scenario);
        expect(row).toContain(report.outcomes[scenario]!.meanScore!.toFixed(3));
      }

      // Each arm's samples: every attempt listed with its epoch and the outcome the report gives it.
      for (const l of written.logs) {
        const file = `logs/${basename(l.path)}`;
        const page = await open(`/logs/${file}/samples`, (p) => p.waitForSelector('a[href*="/samples/sample/"]', { timeout: 60_000 }), `samples-${l.arm}`);
        const shown = await page.$$eval('a[href*="/samples/sample/"]', (links) =>
          links.map((a) => ({ href: decodeURIComponent(a.getAttribute("href") ?? ""), score: a.querySelector('[class*="_score_"]')?.textContent?.trim() ?? "" })),
        );
        const expected = report.attempts
          .filter((a) => a.arm === l.arm)
          .map((a) => `${a.task}/${a.repetition} ${a.outcome}`)
          .sort();
        const seen = shown.map((s) => `${/\/samples\/sample\/([^/]+\/\d+)\//.exec(s.href)![1]} ${s.score}`).sort();
        expect(seen).toEqual(expected);
      }

      // A sample's transcript: the question, the tool calls in order with their results, the score.
      const repo = written.logs.find((l) => l.arm === "mcp")!;
      const sample = (await readLog(repo.path)).samples[1];
      const page = await open(
        `/logs/logs/${basename(repo.path)}/samples/sample/${encodeURIComponent(sample.id)}/${sample.epoch}/transcript`,
        (p) => p.waitForFunction(() => document.body.textContent?.includes("Tool: "), { timeout: 60_000 }),
        "transcript",
      );
      const text = (await page.evaluate(() => document.body.textContent ?? "")).replace(/\s+/g, " ");
      expect(text).toContain(sample.input);
      const toolNames = sample.messages.flatMap((m: { tool_calls?: Array<{ function: string }> | null }) => (m.tool_calls ?? []).map((c) => c.function));
      expect(toolNames.length).toBeGreaterThan(2);
      // Each tool event in order: its header and the call with its input.
      let at = 0;
      for (const name of toolNames) {
        const next = text.indexOf(`Tool: ${name}`, at);
        expect(next, `Tool: ${name} at or after offset ${at}`).toBeGreaterThanOrEqual(at);
        expect(text.indexOf(`${name}(`, next)).toBeGreaterThan(next);
        at = next + 1;
      }
      expect(text).toContain(`Score${sample.scores.adjudicator.value}`);
      expect(errors).toEqual([]);
    } finally {
      await server.close();
    }
  }, 600_000);
});
