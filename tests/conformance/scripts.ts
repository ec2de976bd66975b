/**
 * The conformance suite's view of the calibration's scripted conversations (src/calibrate/scripts.ts):
 * the conversations themselves, and what a run of one must report.
 */
import { parseScripts, type ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import { scriptedTotals } from "../support/scripted-totals.ts";

export { armGuessScripts, correctVerdictScripts, MCP_SCRIPT, pilotScripts, REPOSITORY_SCRIPT } from "../../src/calibrate/scripts.ts";

/** What the result of a run of `script` must report, in the ledger's field names. */
export function expectedTokens(script: ScriptInput) {
  const t = scriptedTotals(parseScripts(script)[0]!);
  return {
    inputTokens: t.input_tokens,
    outputTokens: t.output_tokens,
    cacheReadInputTokens: t.cache_read_input_tokens,
    cacheCreationInputTokens: t.cache_creation_input_tokens,
  };
}

/** Tool calls per name that `script` makes. */
export function expectedToolCalls(script: ScriptInput): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const turn of script.turns) if ("toolCalls" in turn) for (const c of turn.toolCalls) counts[c.name] = (counts[c.name] ?? 0) + 1;
  return counts;
}
