import { z } from "zod";

/**
 * What a scripted Messages API answers, as data. A script is one attempt's conversation:
 * turn k answers the request whose `messages` already hold k assistant messages, so a retried
 * request gets the same turn again (the CLI retries on its own; a queue cursor would skip).
 */

const count = z.int().min(0);

export const ScriptedUsageSchema = z
  .strictObject({
    input_tokens: count,
    output_tokens: count,
    cache_read_input_tokens: count.default(0),
    cache_creation_input_tokens: count.default(0),
    /** Omitted: the answer carries no split (measured: the CLI then prices writes at the 5-minute rate). */
    cache_creation: z.strictObject({ ephemeral_5m_input_tokens: count, ephemeral_1h_input_tokens: count }).optional(),
  })
  .refine((u) => u.cache_creation === undefined || u.cache_creation.ephemeral_5m_input_tokens + u.cache_creation.ephemeral_1h_input_tokens === u.cache_creation_input_tokens, {
    message: "cache_creation split must sum to cache_creation_input_tokens",
  });

export const ToolCallSchema = z.strictObject({
  name: z.string().min(1),
  input: z.record(z.string(), z.unknown()),
});

/**
 * Usage figures restated in `message_delta` (the API may restate the prompt side there): lets a
 * test make the stream carry more than message_start said, to see who reads which.
 */
const DeltaUsageSchema = z.strictObject({ input_tokens: count.optional(), cache_read_input_tokens: count.optional(), cache_creation_input_tokens: count.optional() }).optional();

/** One or more `tool_use` blocks (optionally after a thinking block and a text block); stop_reason `tool_use`. */
export const ToolTurnSchema = z.strictObject({
  toolCalls: z.array(ToolCallSchema).min(1),
  /** A `thinking` block first, with a random signature, as a model with adaptive thinking answers. */
  thinking: z.string().min(1).optional(),
  text: z.string().min(1).optional(),
  usage: ScriptedUsageSchema,
  deltaUsage: DeltaUsageSchema,
});

/** The final answer: one text block, stop_reason `end_turn`. */
export const AnswerTurnSchema = z.strictObject({
  answer: z.string().min(1),
  usage: ScriptedUsageSchema,
  deltaUsage: DeltaUsageSchema,
});

/**
 * An HTTP error with an Anthropic-style body instead of a message. It is served to the first
 * `times` requests that reach it (default: every one); afterwards the script goes on with the
 * turn after it for the same request. It never counts as an assistant turn, because a failed
 * request adds no assistant message to the conversation.
 */
export const ErrorTurnSchema = z.strictObject({
  error: z.strictObject({
    status: z.int().min(400).max(599),
    type: z.string().min(1),
    message: z.string().min(1),
  }),
  times: z.int().min(1).optional(),
  /** Send a `retry-after` header of this many seconds, as the API does on 429 and 529. */
  retryAfterSeconds: z.int().min(0).optional(),
  /** Append the x-api-key the request carried to the message, as a careless proxy would. */
  echoApiKey: z.boolean().optional(),
});

/**
 * A failure of the exchange itself, served like an error turn (first `times` requests, never
 * an assistant turn): `connection-reset` reads the request and destroys the connection without
 * a reply; `hang` reads it and never replies; `missing-usage` replies with an answer message
 * that has no `usage` field.
 */
export const FaultTurnSchema = z.strictObject({
  fault: z.enum(["connection-reset", "hang", "missing-usage"]),
  times: z.int().min(1).optional(),
});

export const TurnSchema = z.union([ToolTurnSchema, AnswerTurnSchema, ErrorTurnSchema, FaultTurnSchema]);

export const ScriptSchema = z
  .strictObject({
    /** Shown in records; unique within one server. */
    name: z.string().min(1),
    /**
     * Selects this script for a conversation whose first user message contains this text.
     * Without it the script is taken from the queue: the next unclaimed one, claimed by the
     * first conversation no marker matched, and kept for all its later requests.
     */
    marker: z.string().min(1).optional(),
    /**
     * Selects this script for a request that offers a tool of this name (with `marker`, both must
     * match), e.g. to tell apart two arms that send the same first message.
     */
    tool: z.string().min(1).optional(),
    turns: z.array(TurnSchema).min(1),
    /**
     * After the last turn, answer every further request with the last tool turn again, so the
     * CLI never ends the turn (measured: it then loops until killed).
     */
    neverEnd: z.boolean().default(false),
  })
  .refine((s) => !s.neverEnd || s.turns.some((t) => "toolCalls" in t), {
    message: "a neverEnd script needs a tool turn to repeat",
  });

export type ScriptedUsage = z.output<typeof ScriptedUsageSchema>;
export type Turn = z.output<typeof TurnSchema>;
export type Script = z.output<typeof ScriptSchema>;
/** What callers write: defaults (zero cache tokens, neverEnd false) may be left out. */
export type ScriptInput = z.input<typeof ScriptSchema>;

/** Validates scripts (throws a zod error naming the field) and checks names are unique. */
export function parseScripts(input: ScriptInput | readonly ScriptInput[]): Script[] {
  const scripts = z
    .array(ScriptSchema)
    .min(1)
    .parse(Array.isArray(input) ? input : [input]);
  const names = new Set<string>();
  for (const s of scripts) {
    if (names.has(s.name)) throw new Error(`script name ${JSON.stringify(s.name)} is used twice`);
    names.add(s.name);
  }
  return scripts;
}
