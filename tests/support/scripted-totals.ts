import type { Script, ScriptedUsage } from "../../src/stand-ins/scripted-api/script.ts";

/** The sums a run of the whole script should report (every tool and answer turn once). */
export function scriptedTotals(script: Script): Required<Omit<ScriptedUsage, "cache_creation">> & {
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
} {
  const total = {
    input_tokens: 0,
    output_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
  };
  for (const turn of script.turns) {
    if ("error" in turn || "fault" in turn) continue;
    const u = turn.usage;
    total.input_tokens += u.input_tokens;
    total.output_tokens += u.output_tokens;
    total.cache_read_input_tokens += u.cache_read_input_tokens;
    total.cache_creation_input_tokens += u.cache_creation_input_tokens;
    total.cache_creation.ephemeral_5m_input_tokens += u.cache_creation?.ephemeral_5m_input_tokens ?? 0;
    total.cache_creation.ephemeral_1h_input_tokens += u.cache_creation?.ephemeral_1h_input_tokens ?? 0;
  }
  return total;
}
