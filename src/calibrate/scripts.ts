/**
 * Scripted conversations for the demo pilot's task (ledgerlite-rounding). The usage numbers are
 * arbitrary but distinct per turn, with cache reads and both cache-write TTLs, so that a sum
 * taken from the wrong place cannot match by chance.
 */
import type { ScriptInput } from "../stand-ins/scripted-api/script.ts";
import { itemIdFor, STRUCTURED_OUTPUT_TOOL } from "../adjudicate/prompt.ts";
import type { Ledger } from "../ledger/schema.ts";
import type { PlannedItem } from "../adjudicate/plan.ts";

/** Repository arm: Glob and Grep over the export, then three Reads (one of a file not exported). */
export const REPOSITORY_SCRIPT: ScriptInput = {
  name: "pilot-repository",
  turns: [
    {
      text: "Let me find where rounding is described.",
      toolCalls: [
        { name: "Glob", input: { pattern: "docs/*.md" } },
        { name: "Grep", input: { pattern: "roundMinor", path: "/workspace" } },
      ],
      usage: { input_tokens: 2400, output_tokens: 31, cache_creation_input_tokens: 600, cache_creation: { ephemeral_5m_input_tokens: 600, ephemeral_1h_input_tokens: 0 } },
    },
    {
      toolCalls: [
        { name: "Read", input: { file_path: "/workspace/src/money.js" } },
        { name: "Read", input: { file_path: "/workspace/docs/rounding.md" } },
        // The answer key is in the checkout but must not be in the export.
        { name: "Read", input: { file_path: "/workspace/eval/answer-key.md" } },
      ],
      usage: { input_tokens: 3100, output_tokens: 47, cache_read_input_tokens: 2400 },
    },
    {
      answer: "ledgerlite rounds half to even to the target currency's minor unit; roundMinor in src/money.js does it (docs/rounding.md).",
      usage: {
        input_tokens: 3900,
        output_tokens: 62,
        cache_read_input_tokens: 3000,
        cache_creation_input_tokens: 300,
        cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 300 },
      },
    },
  ],
};

/** doc-bridge arm: doc.search, then doc.get of the hit, through the runner's bridge. */
export const MCP_SCRIPT: ScriptInput = {
  name: "pilot-mcp",
  turns: [
    {
      toolCalls: [{ name: "mcp__doc-bridge__doc_search", input: { query: "rounding currencies" } }],
      usage: { input_tokens: 2500, output_tokens: 23, cache_creation_input_tokens: 400, cache_creation: { ephemeral_5m_input_tokens: 150, ephemeral_1h_input_tokens: 250 } },
    },
    {
      toolCalls: [{ name: "mcp__doc-bridge__doc_get", input: { path: "docs/rounding.md" } }],
      usage: { input_tokens: 3050, output_tokens: 19, cache_read_input_tokens: 2500 },
    },
    { answer: "Half to even (banker's rounding), implemented by roundMinor in src/money.js.", usage: { input_tokens: 3475, output_tokens: 41, cache_read_input_tokens: 2900 } },
  ],
};

/** The pilot runs the repository arm first (plan order), and each conversation claims the next script. */
export function pilotScripts(): ScriptInput[] {
  return [REPOSITORY_SCRIPT, MCP_SCRIPT];
}

/**
 * The adjudicator's second call per item, the arm guess asked after the verdict (contract R143):
 * one script an item, chosen by its prompt's item line and question, answering `guess` at once.
 */
export function armGuessScripts(items: readonly PlannedItem[], guess = "files-only"): ScriptInput[] {
  return items
    .filter((p) => p.guessPrompt !== null)
    .map((p) => ({
      name: `guess-${p.observationIndex}`,
      marker: p.guessPrompt!.slice(p.guessPrompt!.indexOf("Item: "), p.guessPrompt!.indexOf("<<<ANSWER")),
      turns: [{ toolCalls: [{ name: STRUCTURED_OUTPUT_TOOL, input: { armGuess: guess } }], usage: { input_tokens: 900 + p.observationIndex, output_tokens: 20 } }],
    }));
}

/**
 * The adjudicator's verdict call per observation: one script an item, chosen by its item id, calling
 * StructuredOutput at once with a correct verdict over `expected` propositions; input tokens
 * 1800 + the observation's index, so each item's usage is its own.
 */
export function correctVerdictScripts(ledger: Ledger, expected: number, reason = "stated and cited"): ScriptInput[] {
  return ledger.observations.map((o) => ({
    name: `grader-${o.index}`,
    marker: itemIdFor(ledger.runId, o.index),
    turns: [
      {
        toolCalls: [
          {
            name: STRUCTURED_OUTPUT_TOOL,
            input: {
              outcome: "correct",
              propositions: Array.from({ length: expected }, (_, i) => ({ id: `P${i + 1}`, verdict: "supported", citation: "valid", reason })),
              contradictions: [],
              reasons: "every proposition is stated and cited",
            },
          },
        ],
        usage: { input_tokens: 1800 + o.index, output_tokens: 140 },
      },
    ],
  }));
}
