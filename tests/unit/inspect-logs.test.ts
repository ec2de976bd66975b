import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { Ledger } from "../../src/ledger/schema.ts";
import { buildReport } from "../../src/report/build.ts";
import { buildInspectLogs, INSPECT_SCORER, readTranscript } from "../../src/report/inspect.ts";
import type { AdjudicationRecord } from "../../src/adjudicate/schema.ts";
import { DEMO, syntheticLedger, syntheticRecord } from "../support/adjudication-fixtures.ts";
import { inspectLogValidator } from "../support/inspect-schema.ts";

// The study as Inspect eval logs, checked against the eval-log schema Inspect published
// (tests/fixtures/inspect/log-schema.json), not against our reading of it.

const validate = inspectLogValidator();
const sha = (ledger: Ledger) =>
  createHash("sha256")
    .update(`${JSON.stringify(ledger, null, 2)}\n`)
    .digest("hex");

type Sample = {
  id: string;
  epoch: number;
  input: string;
  target: string[];
  messages: Array<{ role: string; content: unknown; tool_calls?: Array<{ id: string; function: string; arguments: unknown }> | null; tool_call_id?: unknown; function?: unknown; error?: unknown }>;
  events: Array<{ event: string; function?: string; result?: unknown; error?: unknown; input?: unknown; output?: { choices: Array<{ message: { tool_calls: unknown } }> } }>;
  scores: Record<string, { value: string; metadata: { score: number | null } }> | null;
  output: { completion: string };
  error: { message: string } | null;
  model_usage: Record<string, { input_tokens: number; output_tokens: number; total_cost: number | null }>;
  attachments: Record<string, string>;
  metadata: { arm: string; outcome: string };
};

function logsFor(ledger: Ledger, record: AdjudicationRecord | null, transcripts = new Map<number, string[]>()) {
  const ledgerFileSha256 = sha(ledger);
  const report = buildReport({ ledger, ledgerSha256: ledgerFileSha256, record, manifest: DEMO });
  return { report, logs: buildInspectLogs({ report, ledger, ledgerFileSha256, record, manifest: DEMO, transcripts }) };
}

/** A stream-json transcript: init, a turn with thinking, text and two tool calls (one failing), the results, the answer. */
function transcript(answer: string): string[] {
  const long = "x".repeat(500);
  const assistant = (content: object[]) =>
    JSON.stringify({
      type: "assistant",
      message: { id: "msg_1", model: "claude-haiku-5-5", content, usage: { input_tokens: 100, output_tokens: 20, cache_creation_input_tokens: 5, cache_read_input_tokens: 7 } },
      timestamp: "2026-11-30T05:01:01.000Z",
    });
  return [
    JSON.stringify({ type: "system", subtype: "init", model: "claude-haiku-5-5", tools: ["Read", "Grep"], mcp_servers: [], claude_code_version: "2.1.296" }),
    assistant([{ type: "thinking", thinking: "where is it?", signature: "sig" }]),
    assistant([{ type: "text", text: "Looking." }]),
    assistant([{ type: "tool_use", id: "toolu_a", name: "Read", input: { file_path: "/workspace/README.md" } }]),
    assistant([{ type: "tool_use", id: "toolu_b", name: "Grep", input: { pattern: "round" } }]),
    JSON.stringify({ type: "user", message: { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: long }] }, timestamp: "2026-11-30T05:01:02.000Z" }),
    JSON.stringify({ type: "user", message: { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_b", is_error: true, content: [{ type: "text", text: "no such file" }] }] } }),
    "not json",
    JSON.stringify({ type: "assistant", message: { id: "msg_2", model: "claude-haiku-5-5", content: [{ type: "text", text: answer }] } }),
    JSON.stringify({ type: "result", subtype: "success", result: answer }),
  ];
}

describe("report --format inspect: the logs", () => {
  // contract: R167
  it("every log of a full study, a blocked run with missing items and an unadjudicated pilot is accepted by Inspect's published eval-log schema", () => {
    const full = syntheticLedger({ mode: "full" });
    const blocked = syntheticLedger({ mode: "full", failAt: 7 });
    const pilot = syntheticLedger({ mode: "pilot" });
    const cases = [
      logsFor(full, syntheticRecord(full, sha(full), { outcomes: { 1: "partial", 2: "incorrect", 3: "incomplete" } }), new Map(full.observations.map((o) => [o.index, transcript(o.answer ?? "")]))),
      logsFor(blocked, syntheticRecord(blocked, sha(blocked), { omit: [5] })),
      logsFor(pilot, null),
    ];
    for (const { logs } of cases) {
      expect(logs.map((l) => l.arm)).toEqual(["repository", "mcp"]);
      for (const l of logs) expect(validate(l.log), `${l.name}: ${validate(l.log).errors.join("\n")}`).toEqual({ valid: true, errors: [] });
    }
    // The blocked run: its log says so, the failed attempt carries its error, the unadjudicated ones have no score.
    const [repo] = cases[1]!.logs;
    expect(repo!.log.status).toBe("error");
    const samples = repo!.log.samples as Sample[];
    const failed = samples.find((s) => s.error !== null)!;
    expect(failed.error!.message).toMatch(/^attempt failed/);
    // Exactly the attempts with no item are unscored; a blocked one would carry the outcome `blocked`.
    expect(samples.map((s) => s.scores === null)).toEqual(samples.map((s) => s.metadata.outcome === "missing"));
    expect(samples.some((s) => s.scores === null)).toBe(true);
  });

  // contract: R166
  it("one sample per attempt: the task's question, the answer, the adjudicated outcome and its score, the repetition as epoch, tokens and cost", () => {
    const ledger = syntheticLedger({ mode: "full" });
    const record = syntheticRecord(ledger, sha(ledger), { outcomes: { 0: "partial", 1: "incorrect", 2: "incomplete" } });
    const { report, logs } = logsFor(ledger, record);
    for (const l of logs) {
      const samples = l.log.samples as Sample[];
      const observations = ledger.observations.filter((o) => o.arm === l.arm);
      expect(samples).toHaveLength(observations.length);
      const evalSpec = l.log.eval as { task: string; dataset: { samples: number }; config: { epochs: number }; metadata: Record<string, unknown> };
      expect(evalSpec.task).toBe(report.scenarios[l.arm]);
      expect(evalSpec.dataset.samples).toBe(DEMO.tasks.length);
      expect(evalSpec.config.epochs).toBe(DEMO.repetitions);
      expect(evalSpec.metadata).toMatchObject({ protocol_hash: ledger.protocol.protocolHash, ledger_file_sha256: sha(ledger), pinned_cli_version: ledger.expectedCliVersion });
      observations.forEach((o, k) => {
        const s = samples[k]!;
        const row = report.attempts.find((a) => a.index === o.index)!;
        expect([s.id, s.epoch, s.input]).toEqual([o.task, o.repetition, DEMO.tasks.find((t) => t.id === o.task)!.question]);
        expect(s.target).toEqual(DEMO.tasks.find((t) => t.id === o.task)!.expected);
        expect(s.output.completion).toBe(o.answer);
        expect(s.scores![INSPECT_SCORER]!.value).toBe(row.outcome);
        expect(s.scores![INSPECT_SCORER]!.metadata.score).toBe(row.score);
        expect(Object.values(s.model_usage)[0]).toMatchObject({ input_tokens: o.inputTokens, output_tokens: o.outputTokens, total_cost: o.chargedUsd });
      });
      const metrics = (l.log.results as { scores: Array<{ metrics: Record<string, { value: number }> }> }).scores[0]!.metrics;
      expect(metrics.mean!.value).toBe(report.outcomes[report.scenarios[l.arm]]!.meanScore);
      expect(metrics.partial!.value).toBe(report.outcomes[report.scenarios[l.arm]]!.counts.partial);
    }
    const repoSamples = logs[0]!.log.samples as Sample[];
    expect(repoSamples.slice(0, 3).map((s) => [s.scores![INSPECT_SCORER]!.value, s.scores![INSPECT_SCORER]!.metadata.score])).toEqual([
      ["partial", 0.5],
      ["correct", 1],
      ["correct", 1],
    ]);
  });

  // contract: R166
  it("a transcript's turns, tool calls and results become the sample's messages and events; long strings of the events are attachments", () => {
    const ledger = syntheticLedger({ mode: "pilot" });
    const answer = ledger.observations[0]!.answer!;
    const { logs } = logsFor(ledger, syntheticRecord(ledger, sha(ledger)), new Map([[0, transcript(answer)]]));
    const s = (logs[0]!.log.samples as Sample[])[0]!;
    expect(s.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "tool", "assistant"]);
    const turn = s.messages[1]!;
    expect((turn.content as Array<{ type: string }>).map((c) => c.type)).toEqual(["reasoning", "text"]);
    expect(turn.tool_calls!.map((c) => [c.id, c.function, c.arguments])).toEqual([
      ["toolu_a", "Read", { file_path: "/workspace/README.md" }],
      ["toolu_b", "Grep", { pattern: "round" }],
    ]);
    expect(s.messages[2]).toMatchObject({ tool_call_id: "toolu_a", function: "Read", content: "x".repeat(500), error: null });
    expect(s.messages[3]).toMatchObject({ tool_call_id: "toolu_b", function: "Grep", content: "no such file", error: { type: "unknown", message: "no such file" } });
    expect(s.events.map((e) => e.event)).toEqual(["sample_init", "info", "model", "tool", "tool", "model", "score"]);
    const [readEvent, grepEvent] = s.events.filter((e) => e.event === "tool");
    expect(readEvent!.result).toMatch(/^attachment:\/\/[0-9a-f]{32}$/);
    expect(s.attachments[(readEvent!.result as string).slice("attachment://".length)]).toBe("x".repeat(500));
    expect(grepEvent).toMatchObject({ function: "Grep", result: "no such file", error: { type: "unknown" } });
    expect(validate(logs[0]!.log).valid).toBe(true);
    // The reader keeps order and skips what is not JSON.
    expect(readTranscript(transcript(answer)).steps.map((x) => x.kind)).toEqual(["turn", "tool", "tool", "turn"]);
  });

  // contract: R167
  it("a log missing a field Inspect requires, or carrying one it does not know, fails the schema (the check can fail)", () => {
    const ledger = syntheticLedger({ mode: "pilot" });
    const { logs } = logsFor(ledger, syntheticRecord(ledger, sha(ledger)));
    const broken = structuredClone(logs[0]!.log) as { samples: Array<Record<string, unknown>>; eval: Record<string, unknown> };
    delete broken.samples[0]!.epoch;
    expect(validate(broken).valid).toBe(false);
    expect(validate(broken).errors.join("\n")).toMatch(/epoch/);
    const extra = structuredClone(logs[1]!.log) as { eval: Record<string, unknown> };
    extra.eval.arm = "mcp";
    expect(validate(extra).valid).toBe(false);
    const badScore = structuredClone(logs[1]!.log) as { samples: Array<{ scores: Record<string, { value: unknown }> }> };
    badScore.samples[0]!.scores[INSPECT_SCORER]!.value = null;
    expect(validate(badScore).valid).toBe(false);
  });
});
