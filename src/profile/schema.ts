import { z } from "zod";

/**
 * The calibration profile of one Claude Code version (contract R220): everything the runner's
 * guards compare a run of that version with, measured on its real binary
 * (`study-runner calibrate`, src/calibrate/): the init event of each kind of run, the request shapes the gateway
 * admits, the price table, the runner's flags as that version's `--help` lists them, the binary's
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
  sha256: Sha256Hex.meta({ description: "sha256 of the profile's canonical JSON (keys sorted, no whitespace) without this field" }),
});
export type Profile = z.infer<typeof ProfileSchema>;
