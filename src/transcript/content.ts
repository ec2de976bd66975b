import { createHash } from "node:crypto";
import { canonicalJson } from "../util/canonical-json.ts";

/**
 * What the model said in one message, in one canonical form that the gateway computes from the
 * reply it relayed and `ledger verify` from the kept transcript (contract R176): the message's
 * text blocks (their text) and tool calls (name and input), in order. Thinking blocks, ids,
 * usage and stop reasons are not part of it; an empty text block is skipped (the CLI need not
 * write one). A tool input is written with its object keys sorted, so the CLI's re-serialising of
 * the input it parsed does not change the digest.
 */

export { canonicalJson };

export type CanonicalBlock = { type: "text"; text: string } | { type: "tool_use"; name: string; input: unknown };

/** The blocks of a message's content that the canonical form keeps, from the API's (or the transcript's) content array. */
export function canonicalBlocks(content: unknown): CanonicalBlock[] {
  if (!Array.isArray(content)) return [];
  const out: CanonicalBlock[] = [];
  for (const b of content as unknown[]) {
    if (typeof b !== "object" || b === null) continue;
    const block = b as Record<string, unknown>;
    if (block.type === "text" && typeof block.text === "string" && block.text !== "") out.push({ type: "text", text: block.text });
    else if (block.type === "tool_use" && typeof block.name === "string") out.push({ type: "tool_use", name: block.name, input: block.input ?? {} });
  }
  return out;
}

/** The sha256 (hex) of a message's canonical content. */
export function contentDigest(blocks: readonly CanonicalBlock[]): string {
  const form = canonicalJson(blocks.map((b) => (b.type === "text" ? ["text", b.text] : ["tool_use", b.name, b.input])));
  return createHash("sha256").update(form, "utf8").digest("hex");
}

/**
 * Each assistant message of a stream-json transcript, by message id, with its content blocks in
 * order: the CLI writes each block as its own `assistant` event repeating the message's id
 * (measured on 2.1.296), so the blocks of every event with that id are joined.
 */
export function transcriptMessages(lines: readonly string[]): Map<string, { model: unknown; usage: Record<string, unknown>; blocks: CanonicalBlock[]; ordinal: number }> {
  const messages = new Map<string, { model: unknown; usage: Record<string, unknown>; blocks: CanonicalBlock[]; ordinal: number }>();
  for (const line of lines) {
    if (!line.includes('"assistant"')) continue;
    let event: { type?: unknown; message?: { id?: unknown; model?: unknown; usage?: unknown; content?: unknown } };
    try {
      event = JSON.parse(line) as typeof event;
    } catch {
      continue;
    }
    const m = event?.type === "assistant" ? event.message : undefined;
    if (!m || typeof m.id !== "string") continue;
    let entry = messages.get(m.id);
    if (!entry) {
      entry = { model: m.model, usage: typeof m.usage === "object" && m.usage !== null ? (m.usage as Record<string, unknown>) : {}, blocks: [], ordinal: messages.size };
      messages.set(m.id, entry);
    }
    entry.blocks.push(...canonicalBlocks(m.content));
  }
  return messages;
}

/**
 * The content blocks of a streamed reply, rebuilt from its server-sent events as they pass
 * (content_block_start, then text and input_json deltas). Holds the reply's text and tool inputs
 * only up to `maxChars`; beyond it (or on an event it could not read) the digest is unknown.
 */
export class StreamContent {
  private readonly blocks = new Map<number, { type: string; text: string; name: string; json: string; input: unknown }>();
  private chars = 0;
  private broken = false;

  constructor(private readonly maxChars = 16 * 1024 * 1024) {}

  /** A parsed event of the stream. */
  event(json: Record<string, unknown>): void {
    const index = typeof json.index === "number" ? json.index : undefined;
    if (json.type === "content_block_start" && index !== undefined && typeof json.content_block === "object" && json.content_block !== null) {
      const b = json.content_block as Record<string, unknown>;
      this.blocks.set(index, { type: String(b.type), text: typeof b.text === "string" ? b.text : "", name: typeof b.name === "string" ? b.name : "", json: "", input: b.input });
    } else if (json.type === "content_block_delta" && index !== undefined && typeof json.delta === "object" && json.delta !== null) {
      const d = json.delta as Record<string, unknown>;
      const b = this.blocks.get(index);
      if (!b) return;
      const add = d.type === "text_delta" && typeof d.text === "string" ? d.text : d.type === "input_json_delta" && typeof d.partial_json === "string" ? d.partial_json : "";
      this.chars += add.length;
      if (this.chars > this.maxChars) {
        this.broken = true;
        this.blocks.clear();
        return;
      }
      if (d.type === "text_delta") b.text += add;
      else if (d.type === "input_json_delta") b.json += add;
    }
  }

  /** An event of the stream could not be read: the content is not known whole. */
  lost(): void {
    this.broken = true;
  }

  /** The digest of the content as relayed, or null when it is not known whole. */
  digest(): string | null {
    if (this.broken) return null;
    const content: unknown[] = [];
    for (const [, b] of [...this.blocks].sort((x, y) => x[0] - y[0])) {
      if (b.type === "text") content.push({ type: "text", text: b.text });
      else if (b.type === "tool_use") {
        let input: unknown = b.input ?? {};
        if (b.json !== "") {
          try {
            input = JSON.parse(b.json);
          } catch {
            return null;
          }
        }
        content.push({ type: "tool_use", name: b.name, input });
      }
    }
    return contentDigest(canonicalBlocks(content));
  }
}
