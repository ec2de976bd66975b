import { describe, expect, it } from "vitest";
import { observationExtras } from "../../src/study/observation.ts";
import { runFactsFrom } from "../../src/transport/cli/record.ts";
import { computeCost, type CostResult } from "../../src/cost/compute.ts";
import { readTranscript, type TranscriptFacts } from "../../src/transcript/reader.ts";
import { baseEvents, expectation, toText } from "./transcript-fixtures.ts";

const costOf = (facts: ReturnType<typeof readTranscript>) => computeCost({ ...facts, model: facts.requestedModel });
/** What a study records of a transcript: the run's facts and cost check (as the CLI stage reads them), and the attempt's own fields. */
const factsToObservation = (facts: TranscriptFacts, cost: CostResult) => ({ ...runFactsFrom(facts, cost), ...observationExtras(facts) });

describe("observation token counts", () => {
  it("take modelUsage when the result's usage was zeroed (measured on error_max_budget_usd)", () => {
    const events = baseEvents("repository");
    const result = events.at(-1) as any;
    result.subtype = "error_max_budget_usd";
    result.is_error = true;
    result.usage = { ...result.usage, input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
    const facts = readTranscript(toText(events), expectation("repository"));
    const obs = factsToObservation(facts, costOf(facts));
    const mu = Object.values(result.modelUsage)[0] as any;
    expect(obs.inputTokens).toBe(mu.inputTokens);
    expect(obs.outputTokens).toBe(mu.outputTokens);
    expect(obs.cacheReadInputTokens).toBe(mu.cacheReadInputTokens);
    expect(obs.inputTokens).toBeGreaterThan(0);
  });

  it("stay null, never zero, when the transcript has no result", () => {
    const facts = readTranscript(toText(baseEvents("repository").slice(0, -1)), expectation("repository"));
    const obs = factsToObservation(facts, costOf(facts));
    expect([obs.inputTokens, obs.outputTokens, obs.cacheCreationInputTokens, obs.cacheReadInputTokens]).toEqual([null, null, null, null]);
    expect(obs.usageComplete).toBe(false);
  });
});
