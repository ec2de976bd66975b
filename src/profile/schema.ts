import { z } from "zod";

/**
 * The calibration profile of one Claude Code version (contract R220): everything the runner's
 * guards compare a run of that version with, measured on its real binary
 * (`study-runner calibrate`, src/calibrate/): the init event of each kind of run, the request shapes the gateway
 * admits, the price table, the runner's flags as that version's `--help` lists them, the `@` imports it inlines (and what
 * `--restricted` changes), structured output, resume and retries, the binary's
 * sha256, the runner version that measured it, and the profile's own sha256 over its canonical
 * body. The same zod schema validates, types and documents it (docs/schemas/profile.schema.json).
 */

export const PROFILE_SCHEMA_VERSION = 1;

const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, "must be a lowercase hex sha256");
const Day = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, "must be YYYY-MM-DD");
const Rate = z.number().finite().nonnegative();

/** Every kind of CLI run the runner starts; each has its own argument list and so its own init. */
export const INIT_KINDS = ["attempt-repository", "attempt-mcp", "adjudicator", "session-start", "session-resume"] as const;
export type InitKind = (typeof INIT_KINDS)[number];

export const MeasuredInitKindSchema = z.strictObject({
  fields: z.record(z.string(), z.unknown()).meta({ description: "every field but those that vary per run and those a parameter sets, with its measured value" }),
  varying: z.array(z.string()).meta({ description: "the fields that vary per run (src/claude/init-expectation.ts) the measured event has: present, in their shape, not compared" }),
});
/** One kind's measured init: the compared fields, and which varying fields it has. */
export type MeasuredInitKind = z.infer<typeof MeasuredInitKindSchema>;

export const InitEventsSchema = z.strictObject({
  kinds: z.strictObject(Object.fromEntries(INIT_KINDS.map((k) => [k, MeasuredInitKindSchema])) as Record<InitKind, typeof MeasuredInitKindSchema>),
});
/** Per kind of run, the measured init. */
export type GeneratedInitEvents = z.infer<typeof InitEventsSchema>;

/** One position of a request body: the JSON kinds measured there. */
export interface ShapeNode {
  /** Data that is not the request's structure (a JSON Schema, a tool call's arguments): any JSON, for the reason given. */
  any?: string;
  null?: true;
  boolean?: true;
  number?: true;
  string?: true;
  /** The shape of every element (`{}`: only empty arrays were measured). */
  array?: ShapeNode;
  /**
   * Objects by the value of their `type` member (`""`: objects without a string `type`), each
   * with the members measured on it. An object whose `type` value was never measured here, or
   * with a member never measured on its kind, does not fit.
   */
  object?: Record<string, Record<string, ShapeNode>>;
}

export const ShapeNodeSchema: z.ZodType<ShapeNode> = z.lazy(() =>
  z.strictObject({
    any: z.string().optional(),
    null: z.literal(true).optional(),
    boolean: z.literal(true).optional(),
    number: z.literal(true).optional(),
    string: z.literal(true).optional(),
    array: ShapeNodeSchema.optional(),
    object: z.record(z.string(), z.record(z.string(), ShapeNodeSchema)).optional(),
  }),
);

export const MeasuredRequestSchema = z.strictObject({
  method: z.string().min(1),
  path: z.string().meta({ description: "the URL's path, as a WHATWG URL parser gives it" }),
  search: z.string().meta({ description: "the URL's query with its `?`, or \"\" (the parser's `search`)" }),
});
export type MeasuredRequest = z.infer<typeof MeasuredRequestSchema>;

export const RequestShapesSchema = z.strictObject({
  scenarios: z.array(z.string()).meta({ description: "what was run to measure them" }),
  requestCount: z.number().int().positive().meta({ description: "how many requests the shapes were inferred from" }),
  requests: z.array(MeasuredRequestSchema),
  headers: z.array(z.string().regex(/^[a-z0-9-]+$/)).meta({ description: "lower-case header names" }),
  anthropicBeta: z.array(z.string()).meta({ description: "every value of the comma-separated `anthropic-beta` header" }),
  body: ShapeNodeSchema,
});
export type RequestShapes = z.infer<typeof RequestShapesSchema>;

export const TierPricesSchema = z.strictObject({
  input: Rate,
  output: Rate,
  cacheRead: Rate,
  cacheWrite5m: Rate.meta({ description: "cache writes with a 5-minute TTL, and writes the API reported without a TTL split" }),
  cacheWrite1h: Rate.meta({ description: "cache writes with a 1-hour TTL" }),
});
export type TierPrices = z.infer<typeof TierPricesSchema>;

export interface ModelPrices {
  /** Prompt (input + cache read + cache write) of at most the model's boundary. */
  tier1: TierPrices;
  /** Prompt above the boundary; a model without a second tier has the first-tier rates here. */
  tier2: TierPrices;
}

const Outcome = z.strictObject({ initModel: z.string().nullable(), requestModel: z.string().nullable(), costBasis: z.string().nullable(), modelUsageKeys: z.array(z.string()) });

export const PriceTableSchema = z.strictObject({
  searchedUpToPromptTokens: z.number().int().nonnegative().meta({ description: "prompt size (tokens) up to which a second tier was searched for" }),
  toleranceUsdPerToken: z.number().positive(),
  models: z.record(z.string().min(1), z.strictObject({ tier1: TierPricesSchema, tier2: TierPricesSchema.nullable(), tier1MaxPromptTokens: z.number().int().positive().nullable() })).meta({
    description: 'USD per million tokens, per model the binary prices as "list" under its own name',
  }),
  notPricedAsList: z.record(z.string(), Outcome).meta({ description: 'names the binary carries that the CLI did not price as "list" under that name' }),
  aliases: z.record(z.string(), Outcome).meta({ description: "what the CLI does with a family alias given as --model" }),
});
export type GeneratedPriceTable = z.infer<typeof PriceTableSchema>;

export const HelpFlagSchema = z.strictObject({
  takesValue: z.boolean().meta({ description: "the help lists a required value (`<value>`)" }),
  optionalValue: z.boolean().meta({ description: "the help lists an optional value (`[value]`)" }),
  variadic: z.boolean().meta({ description: "the value is variadic (`<value...>`)" }),
});
export type HelpFlag = z.infer<typeof HelpFlagSchema>;

/** How many `@` imports deep the import probe's chain goes (CLAUDE.md → level1 → … → level IMPORT_CHAIN_PROBED). */
export const IMPORT_CHAIN_PROBED = 8;

export const ImportRulesSchema = z.strictObject({
  claudeMd: z.boolean().meta({ description: "the working folder's CLAUDE.md itself reached the first request" }),
  relative: z.boolean().meta({ description: "an import relative to the importing file (`@imports/relative.md`) was inlined" }),
  absoluteInWorkspace: z.boolean().meta({ description: "an absolute import inside the working folder (`@/workspace/…`) was inlined" }),
  absoluteOutside: z.boolean().meta({ description: "an absolute import outside the working folder (`@/home/agent/…`) was inlined" }),
  tilde: z.boolean().meta({ description: "an import by `~/` (HOME) was inlined" }),
  maxHops: z
    .number()
    .int()
    .min(0)
    .max(IMPORT_CHAIN_PROBED)
    .meta({ description: `how many imports away from CLAUDE.md a chain of nested relative imports was still inlined (probed up to ${IMPORT_CHAIN_PROBED})` }),
});
export type ImportRules = z.infer<typeof ImportRulesSchema>;

export const ImportsSchema = z.strictObject({
  plain: ImportRulesSchema.meta({ description: "with an attempt's arguments (the runner records what an export's instruction files inline by these rules)" }),
  restricted: ImportRulesSchema.meta({
    description: "the same with `--restricted` added (what session calls pass; a version whose `--help` lacks it is refused by the flag check, the runner needs it)",
  }),
});
export type Imports = z.infer<typeof ImportsSchema>;

export const StructuredOutputSchema = z.strictObject({
  initTool: z.boolean().meta({ description: "`--json-schema` added a `StructuredOutput` tool to the init's tools" }),
  resultField: z.boolean().meta({ description: "every grader run's result event carried `structured_output` (the adjudicator reads its verdict there)" }),
  equalsToolInput: z.boolean().meta({ description: "`structured_output` was the input of the run's StructuredOutput call" }),
  resultTextIsJson: z.boolean().meta({ description: "the result's `result` text was the same object as JSON" }),
});
export type StructuredOutput = z.infer<typeof StructuredOutputSchema>;

export const ResumeSchema = z.strictObject({
  completed: z.boolean().meta({ description: "`--resume` in a fresh container (HOME holding only the login and the session file) completed" }),
  sessionIdKept: z.boolean().meta({ description: "the resumed call's result named the session id passed" }),
  historySent: z.boolean().meta({ description: "the resumed call's first request carried the first call's assistant turns" }),
  cost: z
    .enum(["cumulative", "per-call", "other"])
    .meta({ description: "the resumed call's total_cost_usd: the session's (the first call's plus its own scripted usage priced), its own, or neither" }),
});
export type Resume = z.infer<typeof ResumeSchema>;

export const RetryEventSchema = z.strictObject({
  type: z.string(),
  subtype: z.string().nullable(),
  errorStatus: z.number().int().nullable().meta({ description: "the event's `error_status`" }),
  attempt: z.number().int().nullable(),
  maxRetries: z.number().int().nullable(),
  fields: z.array(z.string()).meta({ description: "the event's member names, sorted" }),
});

export const RetriesSchema = z.strictObject({
  served: z.array(z.number().int()).meta({ description: "the errors the scripted API answered the first requests with, before an answer" }),
  requests: z.number().int().nonnegative().meta({ description: "how many Messages requests the CLI made" }),
  events: z.array(RetryEventSchema).meta({ description: "every stream event the CLI wrote between its init and its first assistant message (its retry announcements), in order" }),
  retryAfter: z
    .enum(["exact", "longer", "shorter", "none"])
    .meta({ description: "the delay the retry after the 429 (served with `retry-after: 1`) announced: exactly 1000 ms, longer, shorter, or no such retry" }),
  result: z.strictObject({ subtype: z.string().nullable(), isError: z.boolean().nullable() }),
});
export type Retries = z.infer<typeof RetriesSchema>;

export const ProfileSchema = z.strictObject({
  schemaVersion: z.literal(PROFILE_SCHEMA_VERSION),
  cliVersion: z.string().regex(/^\d+\.\d+\.\d+$/, "must be a version like 2.1.296"),
  binarySha256: Sha256Hex.meta({ description: "sha256 of the native `claude` binary measured (the image's study-runner.claude-sha256 label)" }),
  npmIntegrity: z
    .string()
    .regex(/^sha512-[A-Za-z0-9+/]+=*$/, "must be an npm integrity string, sha512-…")
    .optional()
    .meta({ description: "the npm registry's integrity of the package tarball the binary was installed from (npm's own lock record), when it was installed by the runner" }),
  runnerVersion: z.string().min(1).meta({ description: "the study-runner version that measured it" }),
  measuredOn: Day,
  flags: z.record(z.string().regex(/^-/), HelpFlagSchema).meta({ description: "every flag the runner passes, as this version's `claude --help` lists it" }),
  initEvents: InitEventsSchema,
  requestShapes: RequestShapesSchema,
  prices: PriceTableSchema,
  imports: ImportsSchema.meta({ description: "which `@` imports of the working folder's CLAUDE.md reached the first request, without and with `--restricted`" }),
  structuredOutput: StructuredOutputSchema.meta({ description: "what `--json-schema` (the adjudicator) gives a run's result" }),
  resume: ResumeSchema.meta({ description: "a session's `--resume` in a fresh container, and the cost it reports" }),
  retries: RetriesSchema.meta({ description: "what the CLI does when the API answers 429, then 529, then a message" }),
  sha256: Sha256Hex.meta({ description: "sha256 of the profile's canonical JSON (keys sorted, no whitespace) without this field" }),
});
export type Profile = z.infer<typeof ProfileSchema>;
