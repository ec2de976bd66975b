import { isAbsolute } from "node:path";
import { z } from "zod";
import { pico, picoToUsd, positiveUsdAmount, usdAmount } from "../cost/money.ts";
import { COMMIT_RE } from "../manifest/schema.ts";
import { ArmSchema, AttemptStatusSchema, CredentialModeSchema, ModeSchema, ModelApiSchema, TransportSchema } from "../terms/terms.ts";

/**
 * The private ledger of one run (contract R80). It is written
 * before every spend and after every outcome, so a crash leaves a file that parses and whose
 * spend is never below the truth. The object shapes are strict and the cross-field rules below
 * restate seed rules, so that a runner bug fails before the write instead of producing a ledger
 * that silently misstates money or status.
 */

export const SHA256_RE = /^[0-9a-f]{64}$/;
export const Sha256 = z.string().regex(SHA256_RE, "must be a lowercase hex sha256");
/** Every USD amount a record holds: an exact pico-USD amount (contract R201), compared and summed in pico-USD (contract R202). */
export const Usd = usdAmount;
export const Count = z.number().int().nonnegative();
/** A usage figure the transcript did not report is null, never zero (architecture: fail closed). */
export const TokenCount = Count.nullable();

export const LEDGER_SCHEMA_VERSION = 1;

export const PhaseSchema = z.enum(["reserved", "running", "settled"]).meta({
  description: "reserved: budget held, nothing started; running: the child may be spending; settled: charged and final",
});
export const RunStatusSchema = z.enum(["running", "blocked", "awaiting-adjudication"]).meta({
  description: "none of these is an approval of a result",
});

/** USD per million tokens, per model, per tier (e.g. "base", "above-100k"), per rate name. */
export const PriceTableSchema = z.record(z.string().min(1), z.record(z.string().min(1), z.record(z.string().min(1), Usd)));

export const McpServerStatusSchema = z.looseObject({ name: z.string(), status: z.string() });

export const PermissionDenialSchema = z.strictObject({
  toolName: z.string(),
  toolUseId: z.string().nullable(),
});

/**
 * One paid call of the http transport (contract R29): its conservative reservation, persisted before
 * the call, and what it was charged once its outcome was known.
 */
export const HttpCallSchema = z.strictObject({
  turn: z.number().int().min(1),
  requestBytes: Count.meta({ description: "UTF-8 bytes of the request body" }),
  inputCeilingTokens: Count.meta({ description: "requestBytes + 8192: every prompt token (input, cache read, cache write) the request can bring" }),
  outputCeilingTokens: Count.meta({ description: "max_tokens of the request" }),
  reservationUsd: Usd.meta({ description: "the ceiling at the upper prices, rounded up to 1e-6 USD" }),
  chargedUsd: Usd.nullable().meta({ description: "null while the call is open; the measured cost, or the reservation when usage is unknown" }),
  inputTokens: TokenCount,
  outputTokens: TokenCount,
  cacheReadInputTokens: TokenCount.optional().meta({ description: "null when unknown; absent in ledgers written before cache tokens were priced" }),
  cacheCreationInputTokens: TokenCount.optional().meta({ description: "cache writes of every TTL; null when unknown; absent in ledgers written before cache tokens were priced" }),
  usageComplete: z.boolean(),
  outcome: z.enum(["message", "bad-message", "invalid-usage", "api-error", "lost"]).nullable().meta({ description: "null while the call is open" }),
  httpStatus: z.number().int().nullable(),
  problem: z.string().nullable(),
});

/**
 * One request to the strict profile's egress proxy (contract R72, src/isolation/proxy.ts): what was
 * asked for, whether the policy let it through, and what flowed. `allowed` is the policy's
 * verdict; a tunnel the policy allowed can still fail to open (then `error` says why).
 */
export const EgressRequestSchema = z.strictObject({
  host: z.string().meta({ description: "the host name or IP literal asked for, as sent (lowercased; empty when unparseable)" }),
  port: z.number().int().min(0).max(65535).meta({ description: "0 when the request named no parseable port" }),
  allowed: z.boolean(),
  bytesUp: Count.meta({ description: "bytes from the container to the upstream host" }),
  bytesDown: Count.meta({ description: "bytes from the upstream host to the container" }),
  startedAt: z.iso.datetime(),
  ms: Count.meta({ description: "from the request to its refusal or the tunnel's close" }),
  error: z.string().optional().meta({ description: "why it was refused, or why an allowed tunnel failed" }),
});

/**
 * What one attempt asked of the strict egress proxy. Totals count every request; `entries` keeps
 * the first ones up to the proxy's bound and `entriesDropped` counts the rest, so a flood is
 * visible without an unbounded ledger.
 */
export const EgressRecordSchema = z
  .strictObject({
    requests: Count,
    allowed: Count,
    refused: Count,
    bytesUp: Count,
    bytesDown: Count,
    entries: z.array(EgressRequestSchema),
    entriesDropped: Count,
    droppedConnections: Count.meta({ description: "connections closed unread because the proxy's connection bound was reached" }),
  })
  .superRefine((e, ctx) => {
    if (e.allowed + e.refused !== e.requests) ctx.addIssue({ code: "custom", path: ["requests"], message: `is ${e.requests}, but allowed + refused is ${e.allowed + e.refused}` });
    if (e.entries.length + e.entriesDropped !== e.requests) {
      ctx.addIssue({ code: "custom", path: ["entriesDropped"], message: `${e.entries.length} entries + ${e.entriesDropped} dropped differ from ${e.requests} requests` });
    }
  });

const MeteredTokens = Count.nullable();

/** One request through the model gateway (docs/gateway.md, src/gateway/gateway.ts). */
export const GatewayRequestSchema = z.strictObject({
  seq: Count,
  method: z.string(),
  path: z.string(),
  status: z.number().int().meta({ description: "the HTTP status the CLI got" }),
  requestBytes: Count,
  requestModel: z.string().nullable(),
  messageId: z.string().nullable(),
  model: z.string().nullable().meta({ description: "the reply's model" }),
  inputTokens: MeteredTokens,
  cacheReadInputTokens: MeteredTokens,
  cacheWrite5mInputTokens: MeteredTokens.meta({ description: "5-minute cache writes, and writes the reply gave no TTL split for" }),
  cacheWrite1hInputTokens: MeteredTokens,
  outputTokens: MeteredTokens,
  complete: z.boolean().meta({ description: "the stream ended with message_stop" }),
  boundUsd: Usd.nullable().meta({ description: "the worst-case cost checked against the limit before sending" }),
  costUsd: Usd.nullable().meta({ description: "list-price cost of the metered usage (the bound when the reply broke off)" }),
  ttfbMs: z.number().nonnegative().nullable(),
  durationMs: z.number().nonnegative(),
  refused: z
    .strictObject({
      kind: z.enum(["budget", "unknown-token", "foreign-placeholder", "model", "path", "header", "size", "body", "upstream-redirect", "upstream-unreachable"]),
      reason: z.string(),
    })
    .nullable(),
  // Absent in ledgers written before the gateway bound replies to transcripts (contract R176).
  requestSha256: Sha256.nullable().optional().meta({ description: "sha256 of the request body as forwarded; null when it was not read" }),
  replySha256: Sha256.nullable().optional().meta({ description: "sha256 of the reply body's bytes as relayed to the CLI" }),
  contentSha256: Sha256.nullable().optional().meta({ description: "sha256 of the reply message's canonical content (text, tool calls), which ledger verify recomputes from the transcript" }),
});

/** What the model gateway saw of one attempt: every request, metered. */
export const GatewayRecordSchema = z.strictObject({
  requests: z.array(GatewayRequestSchema),
  dropped: Count,
  forwarded: Count,
  refused: Count,
  meteredCostUsd: Usd,
  budgetRefused: z.boolean(),
  setupProblems: z.array(z.string()),
});

/**
 * What every paid run of the CLI records, an attempt of the study or a run of the adjudicator:
 * its money, its container and the facts of its transcript. The observation and the adjudicator
 * run are both built on this part and its settlement rule, so the two cannot drift apart.
 */
export const RUN_FACTS_SHAPE = {
  phase: PhaseSchema,
  reservationUsd: Usd.meta({
    description: "the hold: cli the reservation, also passed as --max-budget-usd; http the settled call charges plus the open call's reservation",
  }),
  startedAt: z.iso.datetime().nullable(),
  containerId: z.string().min(1).nullable(),
  runtime: z.string().min(1).optional().meta({
    description:
      "cli: the OCI runtime the engine ran this run's container under, as the engine reports it (runc, runsc for gVisor); absent before the container ran and in records written before it existed",
  }),
  exportHash: Sha256.nullable(),
  model: z.string().nullable().meta({ description: "the init event's model" }),
  tools: z.array(z.string()).nullable().meta({ description: "the init event's tools" }),
  toolCallsByName: z.record(z.string(), Count),
  toolCalls: Count.meta({ description: "every tool_use counted once by id, refused calls included" }),
  inputTokens: TokenCount,
  outputTokens: TokenCount,
  cacheCreationInputTokens: TokenCount,
  cacheReadInputTokens: TokenCount,
  numTurns: Count.nullable(),
  cliSubtype: z.string().nullable(),
  isError: z.boolean().nullable(),
  usageComplete: z.boolean(),
  cliReportedCostUsd: Usd.nullable().meta({ description: "the CLI's total_cost_usd, or null" }),
  computedCostUsd: Usd.nullable().meta({ description: "list-price cost from modelUsage and the price table" }),
  costBasis: z.record(z.string(), z.unknown()).nullable().meta({ description: "how computedCostUsd was priced (tier and its source)" }),
  setupProblems: z.array(z.string()),
  costProblem: z.string().nullable(),
  instructionFiles: z.array(z.string()).optional().meta({
    description:
      "paths of the files the CLI takes as instructions (CLAUDE.md, CLAUDE.local.md, AGENTS.md) that the export held, and every file the CLI inlines from them through @ imports (contract R129); attempts keep them as part of the corpus, the adjudicator's export holds none. Absent in records written before it existed",
  }),
  wallTimeMs: Count.nullable(),
  status: AttemptStatusSchema.nullable().meta({ description: "null until settled" }),
  chargedUsd: Usd.nullable().meta({ description: "null until settled; then the final charge" }),
  transcriptSha256: Sha256.optional().meta({
    description: "sha256 of the run's raw stream-json, kept privately beside its record (<ledger or record>.transcripts/NNNN.jsonl); `ledger verify` reads it again",
  }),
};

// Through an object schema, so that an optional field stays optional in the type.
const RunFactsObject = z.strictObject(RUN_FACTS_SHAPE);
type RunFactsShape = z.infer<typeof RunFactsObject>;
/** The shared part of an observation and of an adjudicator run. */
export type RunFacts = RunFactsShape;

/**
 * The settlement rules every paid run obeys: settled exactly when it has a status and a charge; a
 * completed run is charged at least each valid cost and has no setup or cost problem; any other
 * status keeps at least its reservation charged and says why.
 */
export function refineSettledRun(o: RunFactsShape, ctx: z.core.$RefinementCtx, noun = "attempt"): void {
  const settled = o.phase === "settled";
  if (settled !== (o.status !== null)) {
    ctx.addIssue({ code: "custom", path: ["status"], message: settled ? `a settled ${noun} must have a status` : `must be null until the ${noun} is settled` });
  }
  if (settled !== (o.chargedUsd !== null)) {
    ctx.addIssue({ code: "custom", path: ["chargedUsd"], message: settled ? `a settled ${noun} must have a charge` : `must be null until the ${noun} is settled` });
  }
  if (o.status === null || o.chargedUsd === null) return;
  if (o.status === "completed") {
    // Contract R23: a completed run settles to the larger of total_cost_usd and the computed cost.
    for (const key of ["cliReportedCostUsd", "computedCostUsd"] as const) {
      const cost = o[key];
      if (cost !== null && pico(o.chargedUsd) < pico(cost)) {
        ctx.addIssue({ code: "custom", path: ["chargedUsd"], message: `is below ${key}; a completed ${noun} is charged the larger valid cost` });
      }
    }
    if (o.setupProblems.length) ctx.addIssue({ code: "custom", path: ["status"], message: "is completed despite setup problems; any setup problem makes the attempt invalid-setup" });
    if (o.costProblem !== null) ctx.addIssue({ code: "custom", path: ["status"], message: "is completed despite a cost problem; that is invalid-cost" });
  } else if (pico(o.chargedUsd) < pico(o.reservationUsd)) {
    // Contract R24: any other outcome is charged max(reservation, every valid cost).
    ctx.addIssue({ code: "custom", path: ["chargedUsd"], message: `is below the reservation; a ${o.status} ${noun} keeps its reservation charged` });
  }
  if (o.status === "invalid-setup" && o.setupProblems.length === 0) {
    ctx.addIssue({ code: "custom", path: ["setupProblems"], message: "is empty; invalid-setup must say which setup check failed" });
  }
  if (o.status === "invalid-cost" && o.costProblem === null) {
    ctx.addIssue({ code: "custom", path: ["costProblem"], message: "is null; invalid-cost must say why the cost could not be trusted" });
  }
}

export const ObservationSchema = z
  .strictObject({
    index: Count.meta({ description: "0-based position in run order; equals the position in `observations`" }),
    task: z.string().min(1),
    scenario: z.string().min(1),
    arm: ArmSchema,
    repository: z.string().min(1),
    pin: z.string().regex(COMMIT_RE),
    repetition: z.number().int().min(1),
    transport: TransportSchema,
    cliVersion: z.string().nullable(),
    expectedCliVersion: z.string().nullable(),
    attemptBudgetUsd: Usd.nullable().meta({ description: "cli: the per-attempt limit; http: null (it reserves per call)" }),
    ...RUN_FACTS_SHAPE,
    mcpServers: z.array(McpServerStatusSchema).nullable().meta({ description: "the init event's mcp_servers" }),
    permissionDenials: z.array(PermissionDenialSchema),
    toolErrorsByName: z.record(z.string(), Count),
    answer: z.string().nullable().meta({ description: "private: never printed" }),
    correctness: z.null(),
    adjudication: z.literal("pending"),
    // Extension fields; absent until the stage that records them ran.
    mcp: z.record(z.string(), z.unknown()).optional().meta({ description: "the doc-bridge server's own record of the attempt" }),
    egress: EgressRecordSchema.optional().meta({ description: "strict isolation only: every request to the egress proxy" }),
    gateway: GatewayRecordSchema.optional().meta({ description: "cli with --credentials gateway: every model request, metered on the host" }),
    exitCode: z.number().int().nullable().optional(),
    timedOut: z.boolean().optional(),
    truncated: z.boolean().optional(),
    oomKilled: z.boolean().optional(),
    calls: z.array(HttpCallSchema).optional().meta({ description: "http transport: every paid call in order" }),
  })
  .superRefine((o, ctx) => {
    refineSettledRun(o, ctx);
    if (o.attemptBudgetUsd !== null && pico(o.reservationUsd) > pico(o.attemptBudgetUsd)) {
      ctx.addIssue({ code: "custom", path: ["reservationUsd"], message: "exceeds attemptBudgetUsd" });
    }
    if (o.transport === "cli") {
      if (o.attemptBudgetUsd === null) ctx.addIssue({ code: "custom", path: ["attemptBudgetUsd"], message: "the cli transport reserves a per-attempt limit" });
      if (o.calls !== undefined) ctx.addIssue({ code: "custom", path: ["calls"], message: "only the http transport records calls" });
    } else {
      checkHttpCalls(o, ctx);
    }
    if (o.status === "completed" && o.answer === null) ctx.addIssue({ code: "custom", path: ["answer"], message: "is null; completed means an answer was returned" });
  });

/**
 * The http transport's per-call arithmetic: the observation's hold is what its calls hold (a
 * settled call its charge, the open one its reservation), only the last call may be open, and
 * a settled attempt is charged exactly its calls' charges.
 */
function checkHttpCalls(
  o: { attemptBudgetUsd: number | null; reservationUsd: number; chargedUsd: number | null; phase: string; calls?: Array<{ reservationUsd: number; chargedUsd: number | null }> },
  ctx: z.core.$RefinementCtx,
) {
  if (o.attemptBudgetUsd !== null) ctx.addIssue({ code: "custom", path: ["attemptBudgetUsd"], message: "must be null for the http transport, which reserves per call" });
  if (o.calls === undefined) {
    ctx.addIssue({ code: "custom", path: ["calls"], message: "the http transport records every call" });
    return;
  }
  let hold = 0n;
  o.calls.forEach((c, i) => {
    hold += pico(c.chargedUsd ?? c.reservationUsd);
    if (c.chargedUsd === null && (i !== o.calls!.length - 1 || o.phase === "settled")) {
      ctx.addIssue({ code: "custom", path: ["calls", i, "chargedUsd"], message: "only the last call of an unsettled attempt may be open" });
    }
  });
  if (pico(o.reservationUsd) !== hold) {
    ctx.addIssue({ code: "custom", path: ["reservationUsd"], message: `is ${o.reservationUsd}, but the calls hold ${picoToUsd(hold)}` });
  }
  if (o.chargedUsd !== null && pico(o.chargedUsd) !== hold) {
    ctx.addIssue({ code: "custom", path: ["chargedUsd"], message: `is ${o.chargedUsd}, but the calls were charged ${picoToUsd(hold)}` });
  }
}

export const BudgetSchema = z.strictObject({
  capUsd: positiveUsdAmount,
  attemptBudgetUsd: positiveUsdAmount.nullable().meta({ description: "cli: the per-attempt limit; http: null" }),
  reservedUsd: Usd.meta({ description: "sum of the reservationUsd of unsettled observations" }),
  spentUsd: Usd.meta({
    description: "sum of settled charges plus open reservations, so that a crash never under-counts the spend",
  }),
  cumulativeCapExceeded: z.boolean(),
});

/**
 * How attempts were scheduled: how many could run at once, whether the two arms of a task and
 * repetition were started together, and every change of the running limit a rate limit caused.
 */
export const SchedulingSchema = z.strictObject({
  concurrency: z.number().int().min(1).meta({ description: "--concurrency: how many attempts could run at once (1: one after another)" }),
  pairs: z.enum(["sequential", "together"]).meta({
    description: "together: both arms of a task x repetition were reserved and started at the same moment, so a stop never left a pair half-run; sequential: one after another",
  }),
  rateEvents: z
    .array(
      z.strictObject({
        at: z.iso.datetime(),
        event: z.enum(["backoff", "recover"]),
        observation: Count.meta({ description: "the attempt that met the limit (backoff) or whose clean settlement raised it (recover)" }),
        httpStatus: z.number().int().nullable().meta({ description: "429 or 529 for a backoff; null for a recover" }),
        concurrency: z.number().int().min(1).meta({ description: "how many attempts could start from then on" }),
      }),
    )
    .meta({ description: "a 429 or 529 seen in an attempt's transcript halves the running limit; never retried by the runner" }),
});

/** Where a run's containers ran: the sandbox provider, its channel and the engine (contract R244). */
export const SandboxHeaderSchema = z.object({
  provider: z.string().min(1),
  channel: z.enum(["host-paths", "engine-api"]),
  endpoint: z.string().min(1),
  os: z.string().min(1).nullable(),
  arch: z.string().min(1).nullable(),
});

export const LedgerSchema = z
  .strictObject({
    $schema: z.string().optional(),
    schemaVersion: z.literal(LEDGER_SCHEMA_VERSION),
    runId: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/, "must be 1-128 letters, digits, '.', '_' or '-'"),
    createdAt: z.iso.datetime(),
    protocol: z.strictObject({
      manifestPath: z.string().min(1),
      protocolHash: Sha256.meta({ description: "sha256 of the manifest file's bytes" }),
    }),
    runnerHash: Sha256.meta({ description: "sha256 over the runner's shipped files (computeRunnerHash)" }),
    corpus: z.array(
      z.strictObject({
        repository: z.string().min(1),
        pin: z.string().regex(COMMIT_RE),
        root: z.string().refine(isAbsolute, "must be an absolute path").optional(),
      }),
    ),
    docBridge: z
      .strictObject({
        engineRevision: z.string().nullable().meta({ description: "the revision every checkout's doc.search reported; null when they differ or none reports one (see engineRevisions)" }),
        engineRevisions: z
          .record(z.string().min(1), z.string().nullable())
          .optional()
          .meta({ description: "repository -> the engine revision its checkout's doc.search reported (null: none); absent in ledgers written before it existed" }),
        bundleHash: Sha256.nullable().meta({
          description:
            "sha256 of what the engine command runs: its executable, every argument naming a file and, for the bundled reference server, its project files and package-lock.json (docs/doc-bridge.md, Provenance); null only in ledgers written before it was computed",
        }),
        denyList: z.array(z.string()).meta({ description: "the mcp__doc-bridge__* names passed to --disallowedTools in both arms" }),
      })
      .nullable(),
    image: z
      .strictObject({
        ref: z.string().min(1),
        id: z.string().min(1),
        binarySha256: Sha256.nullable(),
      })
      .nullable(),
    cliVersion: z.string().nullable().meta({ description: "the probed `claude --version`" }),
    expectedCliVersion: z.string().nullable(),
    profileSha256: Sha256.optional().meta({
      description: "cli: the sha256 of the calibration profile of the CLI version every guard compared the attempts with (contract R221); absent in ledgers written before profiles existed",
    }),
    transport: TransportSchema,
    isolation: z.string().min(1),
    runtime: z.string().min(1).nullable().optional().meta({
      description:
        "cli: the OCI runtime every attempt container is created with: --runtime, checked by a probe container in the preflight, or the engine's default by name; null in ledgers written before the default was recorded by name",
    }),
    sandbox: SandboxHeaderSchema.optional().meta({
      description:
        "cli: where the attempt containers ran: the sandbox provider, the channel (host-paths: the runner's folders and sockets bound in; engine-api: content copied in and the sockets carried as streams over the engine's API), the engine's endpoint, OS and architecture; absent in ledgers written before it was recorded",
    }),
    attemptCpus: z.number().positive().optional().meta({ description: "cli: the CPUs each attempt container could use (--cpus, Docker's NanoCpus / 1e9)" }),
    modelApi: ModelApiSchema.optional().meta({
      description:
        "who answered: the model through the real API (anthropic), or a test stand-in (the fake claude image, a scripted API on a unix socket, a test-only --api-base-url): such a run is no evidence about the model",
    }),
    egressAllow: z.array(z.string().min(1)).optional().meta({ description: "strict isolation: the host names the egress proxy allowed, port 443 only" }),
    credentials: CredentialModeSchema.optional().meta({
      description: "cli: gateway = the credential stayed on the host and every request went through the runner's gateway (network none); login-copy = each container held a copy of the CLI login",
    }),
    model: z.string().min(1),
    prices: PriceTableSchema,
    mode: ModeSchema,
    scheduling: SchedulingSchema.optional().meta({ description: "absent in ledgers of runs that ran one attempt at a time before concurrency existed" }),
    budget: BudgetSchema,
    spendLabel: z
      .strictObject({ usd: z.string().min(1), tokens: z.string().min(1) })
      .optional()
      .meta({
        description:
          "what the USD figures and token counts of this ledger are: for the cli transport the CLI's own list-price estimate (not a bill on a subscription login), and token counts that include the Claude Code system prompt and harness, comparable only between the two scenarios. The runner always writes it; ledgers written before it existed lack it",
      }),
    adjudication: z.strictObject({ method: z.literal("agent"), humanReview: z.literal(false) }),
    status: RunStatusSchema,
    statusReason: z.string().min(1).optional(),
    observations: z.array(ObservationSchema),
  })
  .superRefine((l, ctx) => {
    if (l.transport === "cli") {
      // Contract R13: the probed version must equal the expected one before any attempt.
      if (l.cliVersion === null || l.expectedCliVersion === null) {
        ctx.addIssue({ code: "custom", path: ["cliVersion"], message: "the cli transport records the probed and the expected CLI version" });
      } else if (l.cliVersion !== l.expectedCliVersion) {
        ctx.addIssue({ code: "custom", path: ["cliVersion"], message: `'${l.cliVersion}' differs from expectedCliVersion '${l.expectedCliVersion}'; no attempt may run` });
      }
      if (l.image === null) ctx.addIssue({ code: "custom", path: ["image"], message: "the cli transport records the image it ran" });
      if (l.budget.attemptBudgetUsd === null) ctx.addIssue({ code: "custom", path: ["budget", "attemptBudgetUsd"], message: "the cli transport reserves a per-attempt limit" });
    } else if (l.budget.attemptBudgetUsd !== null) {
      ctx.addIssue({ code: "custom", path: ["budget", "attemptBudgetUsd"], message: "must be null for the http transport, which reserves per call" });
    }
    // With attempts in flight, each running attempt holds its own open reservation.
    const concurrency = l.scheduling?.concurrency ?? 1;
    const open = l.observations.filter((o) => o.phase !== "settled").length;
    if (open > concurrency) {
      ctx.addIssue({ code: "custom", path: ["observations"], message: `${open} observations are unsettled, but at most ${concurrency} attempts run at once (scheduling.concurrency)` });
    }
    l.observations.forEach((o, i) => {
      if (o.index !== i) ctx.addIssue({ code: "custom", path: ["observations", i, "index"], message: `is ${o.index}, expected ${i}; observations are appended in run order` });
      if (o.transport !== l.transport) ctx.addIssue({ code: "custom", path: ["observations", i, "transport"], message: `differs from the run's transport '${l.transport}'` });
      // One at a time: only the newest may still hold an open reservation.
      if (concurrency === 1 && o.phase !== "settled" && i !== l.observations.length - 1) {
        ctx.addIssue({ code: "custom", path: ["observations", i, "phase"], message: "only the last observation may be unsettled" });
      }
      if (o.status !== null && o.status !== "completed" && l.status !== "blocked") {
        ctx.addIssue({ code: "custom", path: ["status"], message: `is '${l.status}' but observations[${i}] is ${o.status}; any status but completed stops the run (blocked)` });
      }
    });
    refineBudgetTotals(l.budget, l.observations, ctx);
    if (l.status === "awaiting-adjudication" && l.observations.some((o) => o.status !== "completed")) {
      ctx.addIssue({ code: "custom", path: ["status"], message: "awaiting-adjudication needs every observation settled and completed" });
    }
    if (l.status === "blocked" && !l.statusReason) {
      ctx.addIssue({ code: "custom", path: ["statusReason"], message: "a blocked run must say why" });
    }
  });

/** A record's budget must equal what its entries imply, and say when the cap was passed. */
export function refineBudgetTotals(
  budget: { capUsd: number; reservedUsd: number; spentUsd: number; cumulativeCapExceeded: boolean },
  entries: readonly Pick<Observation, "phase" | "reservationUsd" | "chargedUsd">[],
  ctx: z.core.$RefinementCtx,
): void {
  const totals = budgetTotalsPico(entries);
  if (pico(budget.reservedUsd) !== totals.reserved) {
    ctx.addIssue({ code: "custom", path: ["budget", "reservedUsd"], message: `is ${budget.reservedUsd}, but the open reservations sum to ${picoToUsd(totals.reserved)}` });
  }
  if (pico(budget.spentUsd) !== totals.spent) {
    ctx.addIssue({ code: "custom", path: ["budget", "spentUsd"], message: `is ${budget.spentUsd}, but settled charges plus open reservations sum to ${picoToUsd(totals.spent)}` });
  }
  if (pico(budget.spentUsd) > pico(budget.capUsd) && !budget.cumulativeCapExceeded) {
    ctx.addIssue({ code: "custom", path: ["budget", "cumulativeCapExceeded"], message: "is false although spentUsd passed capUsd" });
  }
}

/**
 * The budget figures the observations imply, in exact pico-USD: open reservations, and settled
 * charges plus open reservations. The ledger schema requires `budget` to equal these.
 */
export function budgetTotalsPico(observations: readonly Pick<Observation, "phase" | "reservationUsd" | "chargedUsd">[]): { reserved: bigint; spent: bigint } {
  let reserved = 0n;
  let charged = 0n;
  for (const o of observations) {
    if (o.phase === "settled") charged += pico(o.chargedUsd ?? 0);
    else reserved += pico(o.reservationUsd);
  }
  return { reserved, spent: charged + reserved };
}

export type Ledger = z.infer<typeof LedgerSchema>;
export type Observation = z.infer<typeof ObservationSchema>;
export type HttpCall = z.infer<typeof HttpCallSchema>;
export type EgressRecord = z.infer<typeof EgressRecordSchema>;
export type EgressRequest = z.infer<typeof EgressRequestSchema>;
export type Budget = z.infer<typeof BudgetSchema>;
