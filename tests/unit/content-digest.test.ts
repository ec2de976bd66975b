import { describe, expect, it } from "vitest";
import { SseMeter } from "../../src/gateway/meter.ts";
import { contentDigest, transcriptMessages } from "../../src/transcript/content.ts";

/** A streamed reply as the Messages API sends it: a text block, then a tool call whose input arrives in pieces. */
function sse(text: string, input: string[]): string {
  const events: unknown[] = [
    { type: "message_start", message: { id: "msg_1", model: "claude-haiku-5-5", usage: { input_tokens: 10, output_tokens: 1 } } },
    { type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "" } },
    { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "private reasoning" } },
    { type: "content_block_stop", index: 0 },
    { type: "content_block_start", index: 1, content_block: { type: "text", text: "" } },
    ...[text.slice(0, 5), text.slice(5)].map((t) => ({ type: "content_block_delta", index: 1, delta: { type: "text_delta", text: t } })),
    { type: "content_block_stop", index: 1 },
    { type: "content_block_start", index: 2, content_block: { type: "tool_use", id: "toolu_1", name: "Read", input: {} } },
    ...input.map((p) => ({ type: "content_block_delta", index: 2, delta: { type: "input_json_delta", partial_json: p } })),
    { type: "content_block_stop", index: 2 },
    { type: "message_delta", delta: { stop_reason: "tool_use" }, usage: { output_tokens: 20 } },
    { type: "message_stop" },
  ];
  return events.map((e) => `event: x\ndata: ${JSON.stringify(e)}\n\n`).join("");
}

/** The CLI's stream-json of that message: one assistant event per content block, the same id (measured on 2.1.296). */
function transcript(text: string, input: Record<string, unknown>): string[] {
  const event = (block: unknown) => JSON.stringify({ type: "assistant", message: { id: "msg_1", model: "claude-haiku-5-5", content: [block], usage: { input_tokens: 10 } } });
  return [event({ type: "thinking", thinking: "", signature: "s" }), event({ type: "text", text }), event({ type: "tool_use", id: "toolu_1", name: "Read", input })];
}

function relayed(stream: string): string | null {
  const meter = new SseMeter();
  // In odd-sized chunks, as a stream arrives.
  const bytes = Buffer.from(stream);
  for (let i = 0; i < bytes.length; i += 37) meter.push(bytes.subarray(i, i + 37));
  meter.end();
  return meter.facts.contentSha256;
}

describe("the canonical content of a message", () => {
  // contract: R175
  // contract: R176
  it("is the same digest from the relayed stream and from the CLI's transcript events, and differs when text or a tool input is rewritten", () => {
    const gateway = relayed(sse("The answer is in README.md.", ['{"file_pa', 'th": "/workspace/README.md", "limit"', ": 20}"]));
    expect(gateway).toMatch(/^[0-9a-f]{64}$/);
    // Key order in the CLI's re-serialised input does not matter.
    const kept = transcriptMessages(transcript("The answer is in README.md.", { limit: 20, file_path: "/workspace/README.md" })).get("msg_1")!;
    expect(contentDigest(kept.blocks)).toBe(gateway);
    const text = transcriptMessages(transcript("The answer is in CHANGES.md.", { limit: 20, file_path: "/workspace/README.md" })).get("msg_1")!;
    expect(contentDigest(text.blocks)).not.toBe(gateway);
    const tool = transcriptMessages(transcript("The answer is in README.md.", { limit: 20, file_path: "/etc/passwd" })).get("msg_1")!;
    expect(contentDigest(tool.blocks)).not.toBe(gateway);
  });

  // contract: R175
  it("is unknown (null) when an event of the stream could not be read, so a partial reading never stands for the reply", () => {
    const stream = sse("ok", ['{"file_path": "/a"}']).replace('"text_delta","text":"ok"', '"text_delta","text":"ok"BROKEN');
    expect(relayed(stream)).toBeNull();
  });
});
