import { z } from "zod";

/**
 * The stream-json events of Claude Code 2.1.296 (`--output-format stream-json --verbose`),
 * only the fields the runner reads. Objects are loose: the CLI adds fields between versions
 * (see the stream sample in the facts), and an unknown field is not a broken stream. Unknown
 * event types (e.g. `rate_limit_event`) are not described here at all; the reader skips them.
 */

/** A token count: a non-negative safe integer. A missing count is never read as zero. */
export const TokenCount = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

/** An entry of the init event's `mcp_servers`, e.g. `{"name":"doc-bridge","status":"connected"}`. */
export const McpServerSchema = z.looseObject({
  name: z.string(),
  status: z.string(),
});

/** `{"type":"system","subtype":"init",...}`: the model, tools and MCP servers the CLI loaded. */
export const InitEventSchema = z.looseObject({
  type: z.literal("system"),
  subtype: z.literal("init"),
  model: z.string(),
  tools: z.array(z.string()),
  mcp_servers: z.array(McpServerSchema),
  apiKeySource: z.string().optional(),
  claude_code_version: z.string().optional(),
});

/** `usage.cache_creation`: the cache writes split by TTL. */
export const CacheCreationSchema = z.looseObject({
  ephemeral_5m_input_tokens: TokenCount,
  ephemeral_1h_input_tokens: TokenCount,
});

/**
 * The usage of one API message as it appears in `assistant` events. Measured on 2.1.296: it
 * is the `message_start` usage, so the prompt side is final but `output_tokens` is a
 * placeholder (1); only the prompt side is read.
 */
export const MessageUsageSchema = z.looseObject({
  input_tokens: TokenCount,
  cache_read_input_tokens: TokenCount,
  cache_creation_input_tokens: TokenCount,
  output_tokens: TokenCount.optional(),
});

/** A content block that calls a tool. `server_tool_use`/`mcp_tool_use` are read the same way. */
export const ToolUseBlockSchema = z.looseObject({
  type: z.string(),
  id: z.string(),
  name: z.string(),
  input: z.unknown(),
});

const ContentBlockSchema = z.looseObject({ type: z.string() });

/** Each content block is its own `assistant` event; blocks of one API message share `message.id`. */
export const AssistantEventSchema = z.looseObject({
  type: z.literal("assistant"),
  message: z.looseObject({
    id: z.string(),
    model: z.string().optional(),
    content: z.array(ContentBlockSchema),
    usage: z.unknown().optional(),
  }),
});

export const ToolResultBlockSchema = z.looseObject({
  type: z.literal("tool_result"),
  tool_use_id: z.string(),
  is_error: z.boolean().optional(),
});

/** A `user` event carries the tool results; its content may also be a plain string. */
export const UserEventSchema = z.looseObject({
  type: z.literal("user"),
  message: z.looseObject({
    content: z.union([z.string(), z.array(ContentBlockSchema)]),
  }),
});

/** An entry of the result's `permission_denials`. */
export const PermissionDenialSchema = z.looseObject({
  tool_name: z.string(),
  tool_use_id: z.string(),
  tool_input: z.unknown(),
});

/**
 * The shape fields of the final `result` event. The cost fields (`total_cost_usd`, `usage`,
 * `modelUsage`) are read separately with the schemas below, so that a malformed shape field
 * never hides a cost that must still be charged (contract R31: the last result event is still
 * read so that its cost is charged).
 */
export const ResultEventSchema = z.looseObject({
  type: z.literal("result"),
  subtype: z.string(),
  is_error: z.boolean(),
  num_turns: TokenCount.optional(),
  result: z.string().optional(),
  permission_denials: z.array(PermissionDenialSchema),
});

/** The result's aggregate `usage`. */
export const ResultUsageSchema = z.looseObject({
  input_tokens: TokenCount,
  output_tokens: TokenCount,
  cache_creation_input_tokens: TokenCount,
  cache_read_input_tokens: TokenCount,
  cache_creation: CacheCreationSchema.optional(),
});

/** One entry of the result's `modelUsage`, keyed by model name. */
export const ModelUsageEntrySchema = z.looseObject({
  inputTokens: TokenCount,
  outputTokens: TokenCount,
  cacheReadInputTokens: TokenCount,
  cacheCreationInputTokens: TokenCount,
  costUSD: z.number().optional(),
  /** `"list"` when the CLI priced the model from its own table; `"unknown"` for an unknown model. */
  costBasis: z.string().optional(),
});

/**
 * The result's `modelUsage`, keyed by model name, or `null` when it is not an object of
 * well-formed entries. Read key by key rather than with `z.record`, which drops an own
 * `__proto__` key: a model hidden that way would escape the foreign-model check.
 */
export function parseModelUsage(raw: unknown): Record<string, ModelUsageEntry> | null {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return null;
  const entries: Array<[string, ModelUsageEntry]> = [];
  for (const key of Object.keys(raw)) {
    const entry = ModelUsageEntrySchema.safeParse((raw as Record<string, unknown>)[key]);
    if (!entry.success) return null;
    entries.push([key, entry.data]);
  }
  return Object.fromEntries(entries);
}

export type ResultEvent = z.infer<typeof ResultEventSchema>;
export type ModelUsageEntry = z.infer<typeof ModelUsageEntrySchema>;
