import { z } from "zod";
import { INPUT_CEILING_SLACK_TOKENS } from "../terms/limits.ts";

/**
 * What one Messages API reply says it used, and the most one request can use: the one reading
 * and the one bound behind both places the runner sends model requests (the CLI's gateway, the
 * http transport). Each prices the bound with its own prices (docs/gateway.md, "The ceiling").
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

export function cacheWriteTokens(u: MeteredUsage): number {
  return u.cacheWrite5mInputTokens + u.cacheWrite1hInputTokens;
}

const Tokens = z.int().min(0);

/**
 * Input and output are required; a cache field may be absent or null (the reply did not report
 * it: it counts as zero, and `cacheReported` says so), never anything but a count.
 */
const UsageSchema = z.looseObject({
  input_tokens: Tokens,
  output_tokens: Tokens,
  cache_creation_input_tokens: Tokens.nullable().optional(),
  cache_read_input_tokens: Tokens.nullable().optional(),
  cache_creation: z
    .looseObject({
      ephemeral_5m_input_tokens: Tokens.nullable().optional(),
      ephemeral_1h_input_tokens: Tokens.nullable().optional(),
    })
    .nullable()
    .optional(),
});

/** Which cache figures the reply gave; one it left out (absent or null) counts as zero. */
export interface CacheReported {
  read: boolean;
  write: boolean;
}

export type UsageReading = { ok: true; usage: MeteredUsage; cacheReported: CacheReported } | { ok: false; problem: string };

/**
 * The usage object of a reply (a JSON body's, or a stream's `message_start`). A usage that
 * cannot be read whole is refused rather than read in part, so a figure the reply garbled is
 * never counted as zero.
 */
export function parseUsage(raw: unknown): UsageReading {
  if (raw === undefined || raw === null) return { ok: false, problem: "the reply has no usage field" };
  const parsed = UsageSchema.safeParse(raw);
  if (!parsed.success) {
    const fields = [...new Set(parsed.error.issues.map((i) => i.path.join(".") || "usage"))].join(", ");
    return { ok: false, problem: `the reply's usage is invalid (${fields})` };
  }
  const u = parsed.data;
  const writes = u.cache_creation_input_tokens ?? 0;
  const w1h = u.cache_creation?.ephemeral_1h_input_tokens ?? 0;
  const w5mSplit = u.cache_creation?.ephemeral_5m_input_tokens ?? 0;
  // The same inconsistency the list-price check refuses (contract R55).
  if (w5mSplit + w1h > writes) return { ok: false, problem: `the reply's usage splits ${w5mSplit + w1h} cache-write tokens by TTL but reports ${writes} cache-write tokens` };
  return {
    ok: true,
    // Writes without a split are the CLI's 5-minute price (measured), so they count as 5-minute here.
    usage: { inputTokens: u.input_tokens, cacheReadInputTokens: u.cache_read_input_tokens ?? 0, cacheWrite5mInputTokens: writes - w1h, cacheWrite1hInputTokens: w1h, outputTokens: u.output_tokens },
    cacheReported: { read: u.cache_read_input_tokens != null, write: u.cache_creation_input_tokens != null },
  };
}

/** The most one request can use, in tokens (docs/gateway.md, "The ceiling", has the proof sketch). */
export interface RequestTokenBound {
  /** At most this many prompt tokens (input + cache read + cache writes). */
  promptTokens: number;
  /** At most this many output tokens: the request's own max_tokens. */
  outputTokens: number;
}

/**
 * A request of `bodyBytes` UTF-8 bytes asking for `maxTokens` output: every prompt token of the
 * body's text is at least one byte of the body, and the API adds a bounded preamble of its own
 * around tools (INPUT_CEILING_SLACK_TOKENS), so the prompt has at most `bodyBytes` + the slack
 * tokens; the API never returns more than `maxTokens` output tokens.
 */
export function requestTokenBound(bodyBytes: number, maxTokens: number): RequestTokenBound {
  if (!Number.isSafeInteger(bodyBytes) || bodyBytes < 0) throw new RangeError(`request size must be a non-negative integer, got ${bodyBytes}`);
  if (!Number.isSafeInteger(maxTokens) || maxTokens < 1) throw new RangeError(`max_tokens must be a positive integer, got ${maxTokens}`);
  return { promptTokens: bodyBytes + INPUT_CEILING_SLACK_TOKENS, outputTokens: maxTokens };
}
