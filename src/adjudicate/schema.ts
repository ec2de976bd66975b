import { isAbsolute } from "node:path";
import { z } from "zod";
import { positiveUsdAmount } from "../cost/money.ts";
import { ArmSchema, AttemptStatusSchema, CredentialModeSchema, ModeSchema } from "../terms/terms.ts";
import { Count, GatewayRecordSchema, refineBudgetTotals, refineSettledRun, RUN_FACTS_SHAPE, RunStatusSchema, Sha256, Usd } from "../ledger/schema.ts";

/**
 * The adjudication record: a private companion of one ledger (contract R93). It never changes the
 * ledger; it is bound to it by run id, protocol hash and the ledger's bytes, and each item to
 * one observation by index, task, scenario and repetition. Written like the ledger: before
 * every spend and after every outcome, so a crash leaves a file that parses and whose spend is
 * never below the truth.
 */

export const ADJUDICATION_SCHEMA_VERSION = 1;

/**
 * The five-outcome rubric (contract R89).
 * `blocked` is the missing outcome: the observation could not be graded, and it has no score.
 */
export const OutcomeSchema = z.enum(["correct", "partial", "incorrect", "incomplete", "blocked"]);
export type Outcome = z.infer<typeof OutcomeSchema>;

/** The score of each outcome; `blocked` is missing, never a zero. */
export const OUTCOME_SCORES: Readonly<Record<Outcome, number | null>> = Object.freeze({
  correct: 1,
  partial: 0.5,
  incorrect: 0,
  incomplete: 0,
  blocked: null,
});

export const PropositionVerdictSchema = z.enum(["supported", "partial", "contradicted", "missing"]);

/**
 * The two runs the arm guess chooses between, each with how it is described to the grader in
 * that question alone (src/adjudicate/prompt.ts buildArmGuessPrompt). The verdict call never
 * hears of them (contract R87, R142): the verdict prompt is checked against these words.
 */
export const ARM_GUESS_CHOICES = Object.freeze({
  "files-only": "it could read the repository's files and nothing else",
  "files-and-docs-server": "it could read the repository's files and also query the documentation server",
} as const);

/**
 * The grader's guess, asked in a call of its own after the verdict is recorded, of which arm
 * wrote the answer: how blinding is measured. A forced choice, so a blind grader is right half
 * the time.
 */
export const ArmGuessSchema = z.enum(Object.keys(ARM_GUESS_CHOICES) as ["files-only", "files-and-docs-server"]).meta({
  description: `which run wrote this answer: ${Object.entries(ARM_GUESS_CHOICES)
    .map(([k, d]) => `${k} (${d})`)
    .join(" or ")}; a guess, it changes nothing in the grade`,
});
export type ArmGuess = z.infer<typeof ArmGuessSchema>;
/** The ledger's arm each guess names. */
export const GUESSED_ARM: Readonly<Record<ArmGuess, z.infer<typeof ArmSchema>>> = Object.freeze({ "files-only": "repository", "files-and-docs-server": "mcp" });

/** What the arm-guess call returns through its own `--json-schema`. */
export const ArmGuessAnswerSchema = z.strictObject({ armGuess: ArmGuessSchema });

/**
 * What the adjudicator returns through `--json-schema` (the CLI's `structured_output`). It has
 * no `blocked`: only the runner decides that an item could not be graded.
 */
export const VerdictSchema = z.strictObject({
  outcome: z.enum(["correct", "partial", "incorrect", "incomplete"]).meta({
    description:
      "correct: every expected proposition supported and no contradiction; partial: some but not all; incorrect: none, or the answer is wrong; incomplete: the answer is cut off or does not attempt the question",
  }),
  propositions: z
    .array(
      z.strictObject({
        id: z.string().regex(/^P[1-9][0-9]*$/, "must be P1, P2, ... as numbered in the prompt"),
        verdict: PropositionVerdictSchema,
        citation: z.enum(["valid", "invalid"]).meta({
          description: "valid: the answer cites a file that exists in the working directory and supports this proposition; invalid otherwise (no citation included)",
        }),
        reason: z.string().max(2000),
      }),
    )
    .meta({ description: "one entry per expected proposition, each id once" }),
  contradictions: z.array(z.string().max(2000)).max(50).meta({ description: "statements of the answer that contradict an expected proposition or the files" }),
  reasons: z.string().max(4000),
});
export type Verdict = z.infer<typeof VerdictSchema>;

/** The adjudicator's own container run: the facts an attempt records, for money and audit. */
export const AdjudicatorRunSchema = z
  .strictObject({
    ...RUN_FACTS_SHAPE,
    reservationUsd: Usd.meta({ description: "the reservation, also passed as --max-budget-usd" }),
    status: AttemptStatusSchema.nullable().meta({ description: "the run's own status, by the attempt rules; null until settled" }),
    exitCode: z.number().int().nullable(),
    timedOut: z.boolean(),
    truncated: z.boolean(),
    gateway: GatewayRecordSchema.optional().meta({ description: "with --credentials gateway: every model request of this run, metered on the host" }),
  })
  .superRefine((r, ctx) => refineSettledRun(r, ctx, "run"));
export type AdjudicatorRun = z.infer<typeof AdjudicatorRunSchema>;

export const ItemSchema = z
  .strictObject({
    observationIndex: Count.meta({ description: "the observation's index in the ledger" }),
    task: z.string().min(1),
    scenario: z.string().min(1),
    repetition: z.number().int().min(1),
    itemId: z
      .string()
      .regex(/^item-[0-9a-f]{12}$/)
      .meta({ description: "the opaque id the prompt carries; it does not depend on the scenario or the order" }),
    position: Count.meta({ description: "0-based place in the shuffled order" }),
    outcome: OutcomeSchema.nullable().meta({ description: "null only while the adjudicator run of this item is open" }),
    score: z
      .union([z.literal(1), z.literal(0.5), z.literal(0)])
      .nullable()
      .meta({ description: "1, 0.5 or 0; null for blocked (missing)" }),
    decidedBy: z.enum(["runner", "adjudicator"]).nullable().meta({ description: "runner: blocked or incomplete without a model run; adjudicator: the structured verdict" }),
    reason: z.string().nullable().meta({ description: "why this outcome (runner reasons name the rule); private" }),
    verdict: VerdictSchema.nullable(),
    maskedTerms: z.record(z.string(), Count).meta({ description: "how many times each masked term was replaced in the answer shown to the adjudicator" }),
    armGuess: z
      .strictObject({
        guess: ArmGuessSchema.nullable(),
        arm: ArmSchema,
        correct: z.boolean().nullable(),
        reason: z.string().nullable().meta({ description: "why there is no guess (the call's output was unusable); null otherwise" }),
        run: AdjudicatorRunSchema.meta({ description: "the arm-guess call's own container run, after the verdict was recorded" }),
      })
      .optional()
      .meta({
        description: "adjudicator items: the arm guessed in a separate call after the verdict was recorded (null: no usable guess), the true arm, and whether the guess was right",
      }),
    run: AdjudicatorRunSchema.nullable(),
  })
  .superRefine((item, ctx) => {
    if (item.outcome === null) {
      if (item.run === null || item.run.phase === "settled") ctx.addIssue({ code: "custom", path: ["outcome"], message: "only an item whose adjudicator run is still open may lack an outcome" });
      return;
    }
    if (item.score !== OUTCOME_SCORES[item.outcome]) ctx.addIssue({ code: "custom", path: ["score"], message: `must be ${OUTCOME_SCORES[item.outcome]} for ${item.outcome}` });
    if (!item.reason) ctx.addIssue({ code: "custom", path: ["reason"], message: "every outcome says why" });
    if (item.decidedBy === "adjudicator") {
      if (item.verdict === null || item.run?.status !== "completed") ctx.addIssue({ code: "custom", path: ["verdict"], message: "an adjudicator outcome needs a completed run and its verdict" });
      else if (item.verdict.outcome !== item.outcome) ctx.addIssue({ code: "custom", path: ["outcome"], message: "differs from the verdict's outcome" });
    }
    if (item.decidedBy === "runner" && item.outcome !== "blocked" && item.outcome !== "incomplete") {
      ctx.addIssue({ code: "custom", path: ["decidedBy"], message: "the runner only decides blocked or incomplete" });
    }
    if (item.run !== null && item.run.phase !== "settled") ctx.addIssue({ code: "custom", path: ["run", "phase"], message: "an item with an outcome has a settled run" });
    if (item.armGuess !== undefined) {
      // The guess is a question of its own, asked only once the verdict is on record.
      if (item.decidedBy !== "adjudicator" || item.verdict === null) ctx.addIssue({ code: "custom", path: ["armGuess"], message: "the arm is guessed only after an adjudicator verdict is recorded" });
      if (item.armGuess.guess !== null && item.armGuess.run.status !== "completed") ctx.addIssue({ code: "custom", path: ["armGuess", "guess"], message: "a guess needs a completed arm-guess run" });
      const correct = item.armGuess.guess === null ? null : GUESSED_ARM[item.armGuess.guess] === item.armGuess.arm;
      if (item.armGuess.correct !== correct) ctx.addIssue({ code: "custom", path: ["armGuess", "correct"], message: `must be ${correct} for this guess and arm` });
    }
  });
export type Item = z.infer<typeof ItemSchema>;

export const AdjudicationBudgetSchema = z.strictObject({
  capUsd: positiveUsdAmount.meta({ description: "STUDY_ADJUDICATION_BUDGET_USD: the approved cumulative cap of this adjudication" }),
  itemBudgetUsd: positiveUsdAmount.meta({ description: "the per-item limit, reserved and passed as --max-budget-usd" }),
  reservedUsd: Usd,
  spentUsd: Usd.meta({ description: "settled charges plus open reservations" }),
  cumulativeCapExceeded: z.boolean(),
});

export const AdjudicationRecordSchema = z
  .strictObject({
    $schema: z.string().optional(),
    schemaVersion: z.literal(ADJUDICATION_SCHEMA_VERSION),
    kind: z.literal("adjudication"),
    adjudicationId: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/),
    createdAt: z.iso.datetime(),
    method: z.literal("agent"),
    humanReview: z.literal(false),
    ledger: z.strictObject({
      path: z.string().refine(isAbsolute, "must be an absolute path"),
      runId: z.string().min(1),
      protocolHash: Sha256,
      sha256: Sha256.meta({ description: "sha256 of the ledger file's bytes as read" }),
      status: RunStatusSchema,
      mode: ModeSchema,
      observations: Count,
    }),
    adjudicator: z.strictObject({
      model: z.string().min(1),
      answeringModel: z.string().min(1),
      sameModel: z.boolean().meta({ description: "the adjudicator used the answering run's model id" }),
      forcedSameModel: z.boolean().meta({ description: "--force-same-model was given" }),
      transport: z.literal("cli"),
      image: z.strictObject({ ref: z.string().min(1), id: z.string().min(1), binarySha256: Sha256.nullable() }),
      cliVersion: z.string().min(1),
      expectedCliVersion: z.string().min(1),
      isolation: z.string().min(1),
      runtime: z.string().min(1).optional().meta({
        description: "the OCI runtime every adjudicator container is created with (--runtime, default the ledger's; else the engine's default by name); absent in records made before it was recorded",
      }),
      credentials: CredentialModeSchema.optional().meta({
        description:
          "gateway = the login stayed on the host and every adjudicator request went through the runner's gateway (network none); login-copy = each container held a copy of the CLI login; absent in records made before the gateway",
      }),
    }),
    order: z.strictObject({
      seed: z.number().int().nonnegative().max(0xffffffff),
      observationIndices: z.array(Count).meta({ description: "the observations in the shuffled order the items were decided in" }),
    }),
    masking: z.strictObject({
      replacement: z.string().min(1),
      terms: z.array(z.string()).meta({ description: "labels of the terms removed from answers before the adjudicator sees them" }),
    }),
    budget: AdjudicationBudgetSchema,
    blinding: z
      .strictObject({
        guesses: Count.meta({ description: "arm-guess calls that returned a guess" }),
        correct: Count,
        missing: Count.meta({ description: "arm-guess calls that settled without a usable guess" }),
        accuracy: z.number().min(0).max(1).nullable(),
        interval95: z
          .tuple([z.number().min(0).max(1), z.number().min(0).max(1)])
          .nullable()
          .meta({ description: "exact binomial (Clopper-Pearson) 95% interval of the accuracy" }),
        method: z.string(),
      })
      .optional()
      .meta({ description: "how often the adjudicator told the arm from the masked answer; blind means an interval that holds 0.5" }),
    status: z.enum(["running", "blocked", "complete"]).meta({ description: "complete: every observation has an outcome; none of these approves a result" }),
    statusReason: z.string().min(1).optional(),
    items: z.array(ItemSchema).meta({ description: "in decision order (the shuffled order)" }),
  })
  .superRefine((r, ctx) => {
    const n = r.ledger.observations;
    const order = r.order.observationIndices;
    if (order.length !== n || new Set(order).size !== n || order.some((i) => i >= n)) {
      ctx.addIssue({ code: "custom", path: ["order", "observationIndices"], message: `must be a permutation of the ${n} observation indices` });
    }
    const seen = new Set<number>();
    r.items.forEach((item, i) => {
      if (seen.has(item.observationIndex)) ctx.addIssue({ code: "custom", path: ["items", i, "observationIndex"], message: "appears twice; one item per observation" });
      seen.add(item.observationIndex);
      if (item.position !== i || order[i] !== item.observationIndex) {
        ctx.addIssue({ code: "custom", path: ["items", i, "position"], message: "items follow order.observationIndices" });
      }
      if (item.outcome === null && i !== r.items.length - 1) ctx.addIssue({ code: "custom", path: ["items", i, "outcome"], message: "only the last item may be undecided" });
    });
    const runs = r.items.flatMap((it) => [it.run, it.armGuess?.run ?? null].flatMap((run) => (run ? [{ phase: run.phase, reservationUsd: run.reservationUsd, chargedUsd: run.chargedUsd }] : [])));
    refineBudgetTotals(r.budget, runs, ctx);
    if (r.status === "complete" && (r.items.length !== n || r.items.some((it) => it.outcome === null))) {
      ctx.addIssue({ code: "custom", path: ["status"], message: "complete needs one decided item per observation" });
    }
    if (r.status === "blocked" && !r.statusReason) ctx.addIssue({ code: "custom", path: ["statusReason"], message: "a blocked adjudication must say why" });
    if (r.adjudicator.sameModel !== (r.adjudicator.model === r.adjudicator.answeringModel)) {
      ctx.addIssue({ code: "custom", path: ["adjudicator", "sameModel"], message: "must say whether model equals answeringModel" });
    }
    if (r.adjudicator.sameModel && !r.adjudicator.forcedSameModel) {
      ctx.addIssue({ code: "custom", path: ["adjudicator", "forcedSameModel"], message: "the answering model may adjudicate only with --force-same-model" });
    }
  });

export type AdjudicationRecord = z.infer<typeof AdjudicationRecordSchema>;
