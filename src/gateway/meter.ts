import { picoToUsd } from "../cost/money.ts";
import { pricesFor, tier1MaxPromptTokens, type TierPrices } from "../cost/prices.ts";
import { INPUT_CEILING_SLACK_TOKENS } from "../terms/limits.ts";

/**
 * Metering of Messages API replies as they pass through the runner (the CLI's gateway, the http
 * transport): what one reply says it used, read from its server-sent events or its JSON body,
 * and the cost rules the host enforces before a request is sent (docs/gateway.md).
 */

/** What one request used, as the reply reported it. */
export interface MeteredUsage {
  inputTokens: number;
  cacheReadInputTokens: number;
  /** Cache writes the reply attributed to the 5-minute TTL, plus writes it gave no TTL split for. */
  cacheWrite5mInputTokens: number;
  cacheWrite1hInputTokens: number;
  outputTokens: number;
}

export function promptTokens(u: MeteredUsage): number {
  return u.inputTokens + u.cacheReadInputTokens + u.cacheWrite5mInputTokens + u.cacheWrite1hInputTokens;
}

const count = (v: unknown): number | undefined => (typeof v === "number" && Number.isSafeInteger(v) && v >= 0 ? v : undefined);

/** The usage object of a reply (message_start's, or a JSON body's), or undefined when it is not one. */
export function parseUsage(raw: unknown): MeteredUsage | undefined {
  if (typeof raw !== "object" || raw === null) return undefined;
  const u = raw as Record<string, unknown>;
  const input = count(u.input_tokens);
  if (input === undefined) return undefined;
  const writes = count(u.cache_creation_input_tokens) ?? 0;
  const split = typeof u.cache_creation === "object" && u.cache_creation !== null ? (u.cache_creation as Record<string, unknown>) : undefined;
  const w1h = split ? (count(split.ephemeral_1h_input_tokens) ?? 0) : 0;
  // Writes without a split are the CLI's 5-minute price (measured), so they count as 5-minute here.
  const w5m = Math.max(0, writes - w1h);
  return { inputTokens: input, cacheReadInputTokens: count(u.cache_read_input_tokens) ?? 0, cacheWrite5mInputTokens: w5m, cacheWrite1hInputTokens: w1h, outputTokens: count(u.output_tokens) ?? 0 };
}

/** What a reply's stream (or body) told about the message. */
export interface ReplyFacts {
  messageId: string | null;
  model: string | null;
  usage: MeteredUsage | null;
  /** message_stop was seen (a stream), or a JSON message body was read whole. */
  complete: boolean;
}

/**
 * Reads server-sent events chunk by chunk without holding the stream: only the current,
 * unfinished event is kept. message_start gives the id, the model and the prompt side;
 * message_delta the final output count (the start's output figure is the API's placeholder).
 */
export class SseMeter {
  readonly facts: ReplyFacts = { messageId: null, model: null, usage: null, complete: false };
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
    // A huge content delta need not be parsed; drop what cannot be a usage event.
    if (this.pending.length > SseMeter.MAX_EVENT_CHARS) this.pending = "";
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
      return;
    }
    if (json.type === "message_start" && typeof json.message === "object" && json.message !== null) {
      const m = json.message as Record<string, unknown>;
      if (typeof m.id === "string") this.facts.messageId = m.id.slice(0, 200);
      if (typeof m.model === "string") this.facts.model = m.model.slice(0, 200);
      this.facts.usage = parseUsage(m.usage) ?? null;
    } else if (json.type === "message_delta" && typeof json.usage === "object" && json.usage !== null) {
      const u = json.usage as Record<string, unknown>;
      const output = count(u.output_tokens);
      if (this.facts.usage && output !== undefined) this.facts.usage.outputTokens = output;
      // Later API versions may restate the prompt side here; the newest figure is the reply's word.
      const input = count(u.input_tokens);
      if (this.facts.usage && input !== undefined) this.facts.usage.inputTokens = input;
      const read = count(u.cache_read_input_tokens);
      if (this.facts.usage && read !== undefined) this.facts.usage.cacheReadInputTokens = read;
    } else if (json.type === "message_stop") {
      this.facts.complete = true;
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
      usage: parseUsage(m.usage) ?? null,
      complete: m.type === "message",
    };
  } catch {
    return { messageId: null, model: null, usage: null, complete: false };
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
export interface RequestBound {
  /** At most this many prompt tokens (input + cache read + cache writes). */
  promptTokens: number;
  /** At most this many output tokens: the request's own max_tokens. */
  outputTokens: number;
  tier: 1 | 2;
  costPico: bigint;
}

/**
 * The most a request of `bodyBytes` UTF-8 bytes asking for `maxTokens` output can cost:
 * every prompt token of the body's text is at least one byte of the body, and the API adds a
 * bounded preamble of its own around tools (the http transport's slack, the same constant), so
 * the prompt has at most `bodyBytes` + INPUT_CEILING_SLACK_TOKENS tokens; each is priced at the
 * dearest prompt rate (a 1-hour cache write), at the second tier when that many tokens would pass
 * the boundary; output at most `maxTokens` at the same tier.
 */
export function requestBound(model: string, bodyBytes: number, maxTokens: number): RequestBound {
  const row = pricesFor(model);
  if (!row) throw new Error(`no price row for ${model}`);
  const prompt = bodyBytes + INPUT_CEILING_SLACK_TOKENS;
  const tier: 1 | 2 = prompt > tier1MaxPromptTokens(model)! ? 2 : 1;
  const p = tier === 2 ? row.tier2 : row.tier1;
  const promptRate = [p.input, p.cacheRead, p.cacheWrite5m, p.cacheWrite1h].reduce((a, b) => (rate(b) > rate(a) ? b : a));
  const costPico = BigInt(prompt) * rate(promptRate) + BigInt(maxTokens) * rate(p.output);
  return { promptTokens: prompt, outputTokens: maxTokens, tier, costPico };
}
