import { picoToUsd } from "../cost/money.ts";
import { pricesFor, tier1MaxPromptTokens, type TierPrices } from "../cost/prices.ts";
import { canonicalBlocks, contentDigest, StreamContent } from "../transcript/content.ts";
import { parseUsage, promptTokens, requestTokenBound, type MeteredUsage, type RequestTokenBound } from "../cost/usage.ts";

/**
 * Metering of Messages API replies as they pass through the gateway: what one reply says it used,
 * read from its server-sent events or its JSON body, and the cost rules the host enforces before
 * a request is sent (docs/gateway.md). The usage reading and the request's token bound are the
 * http transport's too (src/cost/usage.ts); only the prices differ.
 */

const count = (v: unknown): number | undefined => (typeof v === "number" && Number.isSafeInteger(v) && v >= 0 ? v : undefined);

/** A reply's usage through the one reading the http transport uses too, or undefined when it is not usable. */
const usageOf = (raw: unknown): MeteredUsage | undefined => {
  const reading = parseUsage(raw);
  return reading.ok ? reading.usage : undefined;
};

/** What a reply's stream (or body) told about the message. */
export interface ReplyFacts {
  messageId: string | null;
  model: string | null;
  usage: MeteredUsage | null;
  /** message_stop was seen (a stream), or a JSON message body was read whole. */
  complete: boolean;
  /**
   * The reply's usage reports server-tool use (`usage.server_tool_use` with a count above zero,
   * e.g. `web_search_requests`): as `name=count` pairs, else null. The runner offers no server
   * tool and meters none of their fees, so such a reply makes the attempt invalid-setup.
   */
  serverToolUse: string | null;
  /** The sha256 of the message's canonical content as relayed (src/transcript/content.ts), or null when it is not known whole. */
  contentSha256: string | null;
}

/** `name=count` for every positive count under `usage.server_tool_use`, or null. */
export function serverToolUseOf(usage: unknown): string | null {
  if (typeof usage !== "object" || usage === null) return null;
  const s = (usage as Record<string, unknown>).server_tool_use;
  if (typeof s !== "object" || s === null) return null;
  const used = Object.entries(s as Record<string, unknown>).filter(([, v]) => typeof v === "number" && v > 0);
  return used.length > 0 ? used.map(([k, v]) => `${k.slice(0, 60)}=${v}`).join(", ") : null;
}

/**
 * Reads server-sent events chunk by chunk without holding the stream: only the current,
 * unfinished event is kept. message_start gives the id, the model and the prompt side;
 * message_delta the final output count (the start's output figure is the API's placeholder).
 */
export class SseMeter {
  readonly facts: ReplyFacts = { messageId: null, model: null, usage: null, complete: false, serverToolUse: null, contentSha256: null };
  private readonly content = new StreamContent();
  private pending = "";
  private readonly decoder = new TextDecoder();
  /** An event larger than this is not parsed (a text delta can be long; usage events are small). */
  private static readonly MAX_EVENT_CHARS = 1024 * 1024;

  push(chunk: Uint8Array): void {
    this.pending += this.decoder.decode(chunk, { stream: true });
    for (;;) {
      const end = this.pending.search(/\r?\n\r?\n/);
      if (end < 0) break;
      const event = this.pending.slice(0, end);
      this.pending = this.pending.slice(end).replace(/^\r?\n\r?\n/, "");
      this.event(event);
    }
    // A huge content delta need not be parsed; drop what cannot be a usage event (the content is then not known whole).
    if (this.pending.length > SseMeter.MAX_EVENT_CHARS) {
      this.pending = "";
      this.content.lost();
    }
  }

  end(): void {
    this.pending += this.decoder.decode();
    if (this.pending.trim() !== "") this.event(this.pending);
    this.pending = "";
  }

  private event(text: string): void {
    const data = text
      .split(/\r?\n/)
      .filter((l) => l.startsWith("data:"))
      .map((l) => l.slice(5).replace(/^ /, ""))
      .join("\n");
    if (data === "") return;
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(data) as Record<string, unknown>;
    } catch {
      this.content.lost();
      return;
    }
    this.content.event(json);
    if (json.type === "message_start" && typeof json.message === "object" && json.message !== null) {
      const m = json.message as Record<string, unknown>;
      if (typeof m.id === "string") this.facts.messageId = m.id.slice(0, 200);
      if (typeof m.model === "string") this.facts.model = m.model.slice(0, 200);
      this.facts.usage = usageOf(m.usage) ?? null;
      this.facts.serverToolUse = serverToolUseOf(m.usage) ?? this.facts.serverToolUse;
    } else if (json.type === "message_delta" && typeof json.usage === "object" && json.usage !== null) {
      const u = json.usage as Record<string, unknown>;
      this.facts.serverToolUse = serverToolUseOf(u) ?? this.facts.serverToolUse;
      const output = count(u.output_tokens);
      if (this.facts.usage && output !== undefined) this.facts.usage.outputTokens = output;
      // Later API versions may restate the prompt side here; the newest figure is the reply's word.
      const input = count(u.input_tokens);
      if (this.facts.usage && input !== undefined) this.facts.usage.inputTokens = input;
      const read = count(u.cache_read_input_tokens);
      if (this.facts.usage && read !== undefined) this.facts.usage.cacheReadInputTokens = read;
    } else if (json.type === "message_stop") {
      this.facts.complete = true;
      this.facts.contentSha256 = this.content.digest();
    }
  }
}

/** The facts of a non-streamed JSON reply body. */
export function jsonReplyFacts(body: Buffer): ReplyFacts {
  try {
    const m = JSON.parse(body.toString("utf8")) as Record<string, unknown>;
    return {
      messageId: typeof m.id === "string" ? m.id.slice(0, 200) : null,
      model: typeof m.model === "string" ? m.model.slice(0, 200) : null,
      usage: usageOf(m.usage) ?? null,
      complete: m.type === "message",
      serverToolUse: serverToolUseOf(m.usage),
      contentSha256: m.type === "message" ? contentDigest(canonicalBlocks(m.content)) : null,
    };
  } catch {
    return { messageId: null, model: null, usage: null, complete: false, serverToolUse: null, contentSha256: null };
  }
}

/** USD per million tokens as pico-USD per token (exact: the table's rates have at most 6 decimals). */
const rate = (usdPerMtok: number) => BigInt(Math.round(usdPerMtok * 1e6));

function tierFor(model: string, prompt: number): TierPrices {
  const row = pricesFor(model);
  if (!row) throw new Error(`no price row for ${model}`);
  return prompt > tier1MaxPromptTokens(model)! ? row.tier2 : row.tier1;
}

/**
 * The list-price cost of one metered reply, in pico-USD: the tier is chosen by this request's own
 * prompt (the CLI prices each message by its own size, measured), every kind at its rate.
 */
export function meteredCostPico(model: string, u: MeteredUsage): bigint {
  const p = tierFor(model, promptTokens(u));
  return (
    BigInt(u.inputTokens) * rate(p.input) +
    BigInt(u.outputTokens) * rate(p.output) +
    BigInt(u.cacheReadInputTokens) * rate(p.cacheRead) +
    BigInt(u.cacheWrite5mInputTokens) * rate(p.cacheWrite5m) +
    BigInt(u.cacheWrite1hInputTokens) * rate(p.cacheWrite1h)
  );
}

export function meteredCostUsd(model: string, u: MeteredUsage): number {
  return picoToUsd(meteredCostPico(model, u));
}

/** How the host bounds a request before it is sent (docs/gateway.md has the proof sketch). */
export interface RequestBound extends RequestTokenBound {
  tier: 1 | 2;
  costPico: bigint;
}

/**
 * The most a request of `bodyBytes` UTF-8 bytes asking for `maxTokens` output can cost: the
 * shared token bound (`requestTokenBound`), each prompt token priced at the dearest prompt rate
 * (a 1-hour cache write), at the second tier when that many tokens would pass the boundary;
 * output at the same tier.
 */
export function requestBound(model: string, bodyBytes: number, maxTokens: number): RequestBound {
  const row = pricesFor(model);
  if (!row) throw new Error(`no price row for ${model}`);
  const tokens = requestTokenBound(bodyBytes, maxTokens);
  const tier: 1 | 2 = tokens.promptTokens > tier1MaxPromptTokens(model)! ? 2 : 1;
  const p = tier === 2 ? row.tier2 : row.tier1;
  const promptRate = [p.input, p.cacheRead, p.cacheWrite5m, p.cacheWrite1h].reduce((a, b) => (rate(b) > rate(a) ? b : a));
  const costPico = BigInt(tokens.promptTokens) * rate(promptRate) + BigInt(tokens.outputTokens) * rate(p.output);
  return { ...tokens, tier, costPico };
}
