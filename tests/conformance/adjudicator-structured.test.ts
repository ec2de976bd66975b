/**
 * The adjudicator with the REAL Claude Code 2.1.296 and the scripted Messages API: how the CLI
 * asks for `--json-schema` output (measured: a `StructuredOutput` tool whose input schema is the
 * verdict's, listed in init; the model answers by calling it and the CLI ends the run with the
 * call's input as `structured_output`), and what the grader is sent: the masked answer, and no
 * word of either arm's vocabulary. The answers of the pilot are scripted to carry both arms'
 * vocabularies in spellings that slip past a naive mask (Unicode dashes, a double space, dots).
 */
import { createHash } from "node:crypto";
import { CLI_MAX_TOKENS } from "../../src/gateway/run.ts";
import { mkdtemp, readFile } from "node:fs/promises";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runAdjudication } from "../../src/adjudicate/run.ts";
import { planAdjudication } from "../../src/adjudicate/plan.ts";
import { adjudicatorInitTools, STRUCTURED_OUTPUT_TOOL } from "../../src/adjudicate/prompt.ts";
import { clopperPearson } from "../../src/adjudicate/blinding.ts";
import { readRecord } from "../../src/adjudicate/store.ts";
import type { AdjudicationRecord } from "../../src/adjudicate/schema.ts";
import { DEFAULT_ADJUDICATOR_MODELS } from "../../src/cost/models.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import type { ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { armGuessScripts, correctVerdictScripts, MCP_SCRIPT, REPOSITORY_SCRIPT } from "./scripts.ts";
import { messageRequests, TEST_TOKEN, prepareCorpus, realImage, runConformanceStudy, runtime, startStudyApi, type Corpus, type StudyApi, type StudyRun } from "./support.ts";

/** Both arms' answers name their tools, the server and a scenario, in spellings a naive mask lets through. */
const REPOSITORY_ANSWER = "With Grep and GLOB, then Read of src/money.js, as the repository\u2013only run: ledgerlite rounds half to even with roundMinor (docs/rounding.md).";
const MCP_ANSWER =
  'doc\u2010bridge\'s doc\u00b7search and mcp__doc-bridge__doc_get (MCP, "snippet": "half to even") showed docs/rounding.md: ledgerlite rounds half to even with roundMinor in src/money.js. Doc  Bridge agreed.';

/** The scripted pilot with the answers above in place of the shared scripts' answers. */
function withAnswer(script: ScriptInput, name: string, answer: string): ScriptInput {
  const turns = script.turns.map((t) => ("answer" in t ? { ...t, answer } : t));
  return { ...script, name, turns };
}

/** Words that tell an arm: either arm's tools, the doc-bridge server and its tools, MCP, a scenario, an engine field. */
const ARM_VOCABULARY = [/grep/i, /glob/i, /\bRead\b/, /\bREAD\b/, /doc\W{0,3}bridge/i, /doc\W{0,3}(search|get)/i, /mcp/i, /repository\W{0,3}only/i, /snippet/i];

let image = "";
let corpus: Corpus;
let studyApi: StudyApi;
let graderApi: StudyApi;
let run: StudyRun;
let record: AdjudicationRecord;
let code = -1;
let stderr = "";
let prompts: Map<number, string>;

beforeAll(async () => {
  image = (await realImage()).id; // by id: other checkouts on this engine retag the same name
  corpus = await prepareCorpus("adjudicator");
  studyApi = await startStudyApi([withAnswer(REPOSITORY_SCRIPT, "pilot-repository-vocabulary", REPOSITORY_ANSWER), withAnswer(MCP_SCRIPT, "pilot-mcp-vocabulary", MCP_ANSWER)]);
  run = await runConformanceStudy({ corpus, api: studyApi, image, plan: "pilot" });
  expect(run.code, run.stderr).toBe(0);
  const loaded = await loadManifest(DEMO_MANIFEST);
  const expected = loaded.manifest.tasks[0]!.expected.length;
  const ledger = run.ledger;
  const seed = 5;
  const planned = planAdjudication(ledger, loaded.manifest, seed).items;
  prompts = new Map(planned.map((p) => [p.observationIndex, p.prompt!]));
  // Two scripts per item, chosen by the prompt: the model calls StructuredOutput at once. The
  // arm-guess call's prompt (its item line, question and its own answer sentence) is matched
  // first; the verdict's by the item id. Both observations are guessed files-only: observation 0
  // (files only) right, observation 1 (with the docs server) wrong.
  const guessScripts = armGuessScripts(planned);
  const scripts = correctVerdictScripts(ledger, expected, "the answer states it and cites docs/rounding.md");
  // Through the gateway too, as `adjudicate` runs by default: the grader holds a placeholder login.
  graderApi = await startStudyApi([...guessScripts, ...scripts], { recordBodies: true });
  const bytes = await readFile(run.summary.ledger);
  const output = join(await mkdtemp(join(corpus.work, "adjudication-")), "adjudication.json");
  code = await runAdjudication(
    {
      ledgerPath: run.summary.ledger,
      ledger,
      ledgerSha256: createHash("sha256").update(bytes).digest("hex"),
      loaded,
      roots: corpus.roots,
      model: DEFAULT_ADJUDICATOR_MODELS[0]!,
      forceSameModel: false,
      // Through the gateway an item must hold the bound of one request before it is sent: for the
      // default adjudicator model, with the CLI's max_tokens, about 1.4 USD (docs/gateway.md).
      capUsd: 5,
      itemBudgetUsd: 2,
      seed,
      output,
      image,
      expectedCliVersion: CLAUDE_CODE_VERSION,
      isolation: "offline",
      claudeConfigDir: corpus.loginDir,
      ...(graderApi.route === "gateway" ? { credentials: "gateway" as const, gatewayUpstream: graderApi.gateway } : { modelApi: { socketPath: graderApi.socketPath } }),
      timeoutMs: 120_000,
      quiet: true,
    },
    {
      runtime,
      stdout: () => {},
      stderr: new Writable({
        write(chunk, _enc, cb) {
          stderr += String(chunk);
          cb();
        },
      }),
    },
  );
  record = await readRecord(output);
}, 600_000);

afterAll(async () => {
  await studyApi?.close();
  await graderApi?.close();
  await corpus?.cleanup();
});

/** The text blocks of a request's first user message (where the CLI puts the prompt). */
function firstUserTexts(body: any): string[] {
  const first = (body.messages as any[]).find((m) => m.role === "user");
  if (typeof first.content === "string") return [first.content];
  return (first.content as any[]).filter((b) => b.type === "text").map((b) => b.text as string);
}

/** The answer a prompt embeds: the JSON string literal on the line after its start marker. */
const answerSection = (prompt: string) => JSON.parse(/^<<<ANSWER\n(.*)\nANSWER>>>$/m.exec(prompt)![1]!) as string;

describe("the adjudicator on the real CLI (--json-schema through the scripted API)", () => {
  it("is asked for a StructuredOutput tool call; its verdicts reach the record, then a call of its own per item guesses the arm, and blinding is measured", () => {
    expect(code, `${stderr}\n${record.items.map((i) => i.reason).join("\n")}`).toBe(0);
    expect(record.status).toBe("complete");
    const requests = messageRequests(graderApi);
    // Two requests per item, the verdict's and the guess's: the CLI ends each run at the StructuredOutput call, with no further request.
    expect(requests).toHaveLength(2 * run.ledger.observations.length);
    const asked = requests.map((r) => {
      const tools = (r.rawBody as any).tools as Array<{ name: string; input_schema: any }>;
      expect(tools.map((t) => t.name).sort()).toEqual(adjudicatorInitTools());
      return (tools.find((t) => t.name === STRUCTURED_OUTPUT_TOOL)!.input_schema.required as string[]).join(",");
    });
    expect(asked.filter((a) => a === "outcome,propositions,contradictions,reasons")).toHaveLength(run.ledger.observations.length);
    expect(asked.filter((a) => a === "armGuess")).toHaveLength(run.ledger.observations.length);
    for (const item of record.items) {
      const arm = run.ledger.observations[item.observationIndex]!.arm;
      expect(item).toMatchObject({ decidedBy: "adjudicator", outcome: "correct", reason: "adjudicator verdict (from structured_output)" });
      expect(item.run).toMatchObject({ status: "completed", tools: adjudicatorInitTools(), toolCallsByName: { [STRUCTURED_OUTPUT_TOOL]: 1 }, instructionFiles: [] });
      expect(item.armGuess).toMatchObject({ guess: "files-only", arm, correct: arm === "repository", reason: null, run: { status: "completed", toolCallsByName: { [STRUCTURED_OUTPUT_TOOL]: 1 } } });
    }
    expect(record.blinding).toMatchObject({ guesses: 2, correct: 1, missing: 0, interval95: clopperPearson(1, 2) });
  });

  it("runs each grader through the gateway: a placeholder login, network none, the metered usage equal to the transcript's", () => {
    expect(record.adjudicator.credentials).toBe("gateway");
    for (const item of record.items) {
      for (const [itemRun, inputTokens] of [
        [item.run!, 1800 + item.observationIndex],
        [item.armGuess!.run, 900 + item.observationIndex],
      ] as const) {
        const g = itemRun.gateway!;
        expect(g).toMatchObject({ refused: 0, budgetRefused: false, setupProblems: [] });
        expect(g.forwarded).toBeGreaterThanOrEqual(1);
        const metered = g.requests.filter((r) => r.messageId !== null);
        expect(metered.reduce((n, r) => n + r.inputTokens!, 0)).toBe(itemRun.inputTokens);
        expect(metered.reduce((n, r) => n + r.outputTokens!, 0)).toBe(itemRun.outputTokens);
        expect(itemRun.inputTokens).toBe(inputTokens);
        // Each request was admitted under its bound, which the item's limit had to hold.
        for (const r of g.requests) expect(r.costUsd!).toBeLessThanOrEqual(r.boundUsd!);
        expect(Math.max(...g.requests.map((r) => r.boundUsd!))).toBeLessThanOrEqual(record.budget.itemBudgetUsd);
      }
    }
    // The upstream saw the runner's (test) credential, never a placeholder; the bodies hold neither.
    const sha12 = (t: string) => createHash("sha256").update(t).digest("hex").slice(0, 12);
    for (const r of messageRequests(graderApi)) {
      // Measured: the max_tokens the gateway's start-up check assumes for the adjudicator's model.
      expect(r.body?.maxTokens).toBe(CLI_MAX_TOKENS);
      expect(r.auth).toEqual({ bearer: true, bearerSha256Prefix: sha12(TEST_TOKEN), apiKey: false });
      expect(JSON.stringify(r.rawBody)).not.toContain(TEST_TOKEN);
    }
  });

  it("sends the grader the masked answer and no word of either arm's vocabulary", () => {
    const requests = messageRequests(graderApi);
    const answers = [REPOSITORY_ANSWER, MCP_ANSWER];
    for (const o of run.ledger.observations) {
      expect(o.answer).toBe(answers[o.index]);
      const prompt = prompts.get(o.index)!;
      const r = requests.find((q) => JSON.stringify(q.rawBody).includes(JSON.stringify(prompt).slice(1, -1)))!;
      const texts = firstUserTexts(r.rawBody);
      // The body carries exactly the runner's prompt, with the answer in its masked form.
      expect(texts.some((t) => t.includes(prompt))).toBe(true);
      const masked = answerSection(prompt);
      expect(masked).toContain("[masked]");
      expect(masked).toContain("half to even with roundMinor");
      for (const word of ARM_VOCABULARY) expect(masked, `${word} in the masked answer of observation ${o.index}`).not.toMatch(word);
      // Nothing the grader is told as a user names a scenario, the docs server by name, or MCP; the verdict call hears nothing of the two runs.
      for (const t of texts) expect(t).not.toMatch(/files-only|files-and-docs-server|armGuess/);
      for (const t of texts) for (const word of [/doc\W{0,3}bridge/i, /mcp/i, /repository\W{0,3}only/i]) expect(t).not.toMatch(word);
    }
  });
});
