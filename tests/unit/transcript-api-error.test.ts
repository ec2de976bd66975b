import { describe, expect, it } from "vitest";
import { baseEvents, evaluate, toText, MODEL, type Event } from "./transcript-fixtures.ts";

/**
 * The transcript the real 2.1.296 writes when the API answers its first request with an error
 * (recorded by the conformance suite against the scripted API): the init event, one synthetic
 * assistant message, and a result with subtype "success", is_error true, total_cost_usd 0 and an
 * empty modelUsage.
 */
function apiErrorBeforeAnyAnswer(edit: (result: Event) => void = () => {}): string {
  const zero = { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, cache_creation: { ephemeral_1h_input_tokens: 0, ephemeral_5m_input_tokens: 0 } };
  const result: Event = {
    type: "result",
    subtype: "success",
    is_error: true,
    api_error_status: 400,
    terminal_reason: "api_error",
    num_turns: 1,
    result: "API Error: 400 scripted bad request",
    total_cost_usd: 0,
    usage: zero,
    modelUsage: {},
    permission_denials: [],
  };
  edit(result);
  return toText([
    baseEvents("repository")[0]!,
    {
      type: "assistant",
      message: {
        id: "9ad82f6d-4330-42bc-81b1-3c053c2d768d",
        model: "<synthetic>",
        role: "assistant",
        type: "message",
        usage: zero,
        content: [{ type: "text", text: "API Error: 400 scripted bad request" }],
      },
      is_api_error_message: true,
    },
    result,
  ]);
}

describe("an API error before any answer", () => {
  it("is failed (seed 000: any other error), with usage incomplete, not invalid-cost", () => {
    const ev = evaluate(apiErrorBeforeAnyAnswer(), "repository", { exitCode: 1 });
    expect(ev.classification.status).toBe("failed");
    expect(ev.facts.usageComplete).toBe(false);
    // The cost check still says why no cost could be computed; the ledger keeps that.
    expect(ev.cost.problems).toEqual([`modelUsage has no entry for the requested model "${MODEL}"`]);
  });

  it("stays invalid-cost when the CLI reports a cost it has no usage for", () => {
    const ev = evaluate(
      apiErrorBeforeAnyAnswer((r) => void (r.total_cost_usd = 0.01)),
      "repository",
      { exitCode: 1 },
    );
    expect(ev.classification.status).toBe("invalid-cost");
  });

  it("stays invalid-cost when the result is not an error", () => {
    const ev = evaluate(
      apiErrorBeforeAnyAnswer((r) => void (r.is_error = false)),
      "repository",
      { exitCode: 0 },
    );
    expect(ev.classification.status).toBe("invalid-cost");
  });

  it("a setup problem still wins", () => {
    const text = apiErrorBeforeAnyAnswer().replace(`"model":"${MODEL}"`, '"model":"claude-sonnet-5"');
    expect(evaluate(text, "repository", { exitCode: 1 }).classification.status).toBe("invalid-setup");
  });
});
