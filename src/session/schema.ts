import { z } from "zod";
import { COMMIT_RE, unsafePathReason } from "../manifest/schema.ts";
import { AttemptStatusSchema } from "../terms/terms.ts";
import { pico, picoToUsd, sumPico } from "../cost/money.ts";
import { Count, GatewayRecordSchema, RUN_FACTS_SHAPE, SandboxHeaderSchema, Sha256, Usd } from "../ledger/schema.ts";

/**
 * Session tasks: a working agent with edit tools that either finishes or asks one clarifying
 * question through structured output, is answered later (by a person with `study-runner answer`,
 * or in a study by a scripted answer) and continues the same CLI session with `--resume` in a
 * fresh container. They have a manifest and a private ledger of their own: a session is not a
 * paired attempt (no scenarios, no expected propositions, no adjudication), and the study's rule
 * that nothing is retried or resumed stays as it is for ordinary tasks (docs/sessions.md).
 */

const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const Name = z.string().regex(NAME_RE, "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit");

/** At most this many questions per session; the next one ends it `too-many-questions`. */
export const MAX_QUESTIONS = 3;
/** A question, its summary or an answer: enough for a paragraph, never a file. */
export const TEXT_LIMIT_BYTES = 4096;

const boundedText = (what: string) =>
  z
    .string()
    .min(1, `must hold the ${what}`)
    .refine((t) => Buffer.byteLength(t, "utf8") <= TEXT_LIMIT_BYTES, `is longer than ${TEXT_LIMIT_BYTES} bytes; shorten the ${what}`)
    .refine((t) => !t.includes("\0"), "contains a NUL byte");

export const SessionTaskSchema = z.strictObject({
  id: Name,
  kind: z.literal("session").meta({ description: "a working agent that may ask, is answered, and resumes the same session" }),
  repository: Name,
  prompt: boundedText("prompt").meta({ description: "what the agent is asked to do; passed on stdin" }),
  testCommand: z
    .array(
      z
        .string()
        .min(1)
        .refine((a) => !a.includes("\0"), "contains a NUL byte"),
    )
    .min(1, 'must name the program, e.g. ["node", "--test"]')
    .optional()
    .meta({ description: "argv run after `done` in its own hardened container over the worktree (no shell); exit code and bounded output recorded" }),
  answers: z
    .array(boundedText("answer"))
    .max(MAX_QUESTIONS, `holds more than ${MAX_QUESTIONS} answers; a session asks at most ${MAX_QUESTIONS} questions`)
    .optional()
    .meta({ description: "scripted answers for a study: the n-th question of the session gets the n-th answer" }),
});

export const SessionManifestSchema = z
  .strictObject({
    $schema: z.string().optional(),
    title: z.string().optional(),
    version: z.union([z.string().min(1), z.number().int().nonnegative()]),
    repositories: z.record(Name, z.string().regex(COMMIT_RE, "must be a full 40-character lowercase hex commit id (get it with `git rev-parse HEAD` in the checkout)")),
    tasks: z.array(SessionTaskSchema).min(1, "must list at least one session task").max(100, "lists more than 100 session tasks"),
    answerKeys: z.record(Name, z.array(z.string().refine((p) => unsafePathReason(p) === undefined, "must be a safe relative path"))).optional(),
  })
  .superRefine((m, ctx) => {
    const seen = new Map<string, number>();
    m.tasks.forEach((t, i) => {
      const first = seen.get(t.id);
      if (first !== undefined) ctx.addIssue({ code: "custom", path: ["tasks", i, "id"], message: `duplicates tasks[${first}].id '${t.id}'; task ids must be unique` });
      else seen.set(t.id, i);
      if (!Object.hasOwn(m.repositories, t.repository)) {
        ctx.addIssue({ code: "custom", path: ["tasks", i, "repository"], message: `'${t.repository}' is not pinned; add it to "repositories" with its 40-hex commit` });
      }
    });
  });

export type SessionTask = z.infer<typeof SessionTaskSchema>;
export type SessionManifest = z.infer<typeof SessionManifestSchema>;

/** What the agent returns through `--json-schema`: finished, or one question. */
export const SessionResultSchema = z.discriminatedUnion("status", [
  z.object({ status: z.literal("done"), summary: z.string().min(1).meta({ description: "what was changed and why" }) }),
  z.strictObject({
    status: z.literal("question"),
    question: z.string().min(1).meta({ description: "one clarifying question that blocks the work" }),
    summary: z.string().min(1).meta({ description: "what was done so far" }),
  }),
]);
export type SessionResult = z.infer<typeof SessionResultSchema>;

export const SessionStateSchema = z.enum(["new", "awaiting-answer", "answered", "done", "too-many-questions", "budget-spent", "failed"]).meta({
  description: "new: not called yet; awaiting-answer: parked on a question; answered: ready to resume; done: the agent finished; too-many-questions, budget-spent, failed: ended without finishing",
});
export type SessionState = z.infer<typeof SessionStateSchema>;
/** The states a retry may follow: the session ended without a result to keep (contract R115). */
export const RETRYABLE_STATES: ReadonlySet<SessionState> = new Set(["too-many-questions", "failed"]);

/**
 * Untrusted text from the agent (its question and summaries): kept verbatim for the record,
 * shown only fenced, never run or read as an instruction.
 */
export const UntrustedTextSchema = z.strictObject({ untrusted: z.literal(true), text: z.string() });

const { status: _status, chargedUsd: _charged, ...runFacts } = RUN_FACTS_SHAPE;

export const SessionCallSchema = z
  .strictObject({
    ...runFacts,
    index: Count.meta({ description: "0-based call number within the session" }),
    mode: z.enum(["start", "resume"]),
    sessionIdReported: z.string().nullable().meta({ description: "the result's session_id; must equal the session's id" }),
    resultStatus: z.enum(["done", "question"]).nullable(),
    durationMs: Count.nullable(),
    callCostUsd: Usd.nullable().meta({ description: "total_cost_usd minus the session's previous result's (the CLI reports the session's cumulative cost)" }),
    callComputedCostUsd: Usd.nullable().meta({ description: "the list-price cost of modelUsage minus the previous result's" }),
    meteredCostUsd: Usd.nullable()
      .optional()
      .meta({ description: "what the model gateway metered for this call's requests (null with the login copy, or when the call never reached the gateway); must equal callCostUsd" }),
    gateway: GatewayRecordSchema.nullable().optional().meta({ description: "--credentials gateway: every model request of this call, checked and metered on the host (null with the login copy)" }),
    exitCode: z.number().int().nullable(),
    timedOut: z.boolean().nullable(),
    truncated: z.boolean().nullable(),
    status: AttemptStatusSchema.nullable(),
    chargedUsd: Usd.nullable(),
    statusReason: z.string().nullable(),
  })
  .superRefine((c, ctx) => {
    const settled = c.phase === "settled";
    if (settled !== (c.status !== null) || settled !== (c.chargedUsd !== null)) {
      ctx.addIssue({ code: "custom", path: ["status"], message: "status and chargedUsd are set exactly when the call is settled" });
    }
    if (c.status === "completed" && c.chargedUsd !== null && c.callCostUsd !== null && pico(c.chargedUsd) < pico(c.callCostUsd)) {
      ctx.addIssue({ code: "custom", path: ["chargedUsd"], message: "is below callCostUsd; a completed call is charged at least its own cost" });
    }
    if (c.status !== null && c.status !== "completed" && c.chargedUsd !== null && pico(c.chargedUsd) < pico(c.reservationUsd)) {
      ctx.addIssue({ code: "custom", path: ["chargedUsd"], message: "is below the reservation; a call that did not complete keeps its reservation charged" });
    }
  });
export type SessionCall = z.infer<typeof SessionCallSchema>;

export const QuestionSchema = z.strictObject({
  cycle: z.number().int().min(1).meta({ description: "1 for the session's first question" }),
  question: UntrustedTextSchema,
  summary: UntrustedTextSchema,
  askedAt: z.iso.datetime(),
  answer: z.strictObject({ source: z.enum(["person", "scripted"]), text: z.string(), answeredAt: z.iso.datetime() }).nullable(),
});

export const TestRunSchema = z.strictObject({
  command: z.array(z.string()),
  exitCode: z.number().int().nullable(),
  timedOut: z.boolean(),
  output: z.string().meta({ description: "the last bytes of stdout and stderr, at most 16 KiB" }),
  truncated: z.boolean(),
  wallTimeMs: Count,
});

export const SessionSchema = z.strictObject({
  id: z.uuid().meta({ description: "the CLI session id the runner generated and passed as --session-id / --resume" }),
  taskId: Name,
  repository: Name,
  attempt: z.number().int().min(1).meta({ description: "1 for a task's first session; a retry starts a new session with the next number" }),
  retryOf: z.uuid().optional().meta({ description: "a retry: the id of the task's earlier session, which ended too-many-questions or failed" }),
  state: SessionStateSchema,
  stateReason: z.string().nullable(),
  worktree: z.string().nullable().meta({ description: "the session's private writable copy of the export; null once removed" }),
  exportHash: Sha256,
  questions: z.array(QuestionSchema),
  calls: z.array(SessionCallSchema),
  spentUsd: Usd.meta({ description: "sum of the calls' charges, open calls at their reservation" }),
  lastTotalCostUsd: Usd.meta({ description: "total_cost_usd of the session's last result (0 before the first)" }),
  lastComputedCostUsd: Usd,
  messageUsage: z
    .array(z.strictObject({ messageId: z.string(), inputTokens: Count, cacheReadInputTokens: Count, cacheCreationInputTokens: Count }))
    .meta({ description: "prompt usage of every message of the session's calls so far: the next call's cost check adds it to its own stream's" }),
  summary: UntrustedTextSchema.nullable().meta({ description: "the done result's summary" }),
  test: TestRunSchema.nullable(),
});
export type Session = z.infer<typeof SessionSchema>;

const EventBase = { at: z.iso.datetime(), session: z.uuid() };
export const HarnessEventSchema = z.discriminatedUnion("type", [
  z.strictObject({ ...EventBase, type: z.literal("harness.start"), task: Name, attempt: z.number().int().min(1), retry_of: z.uuid().optional() }),
  z.strictObject({ ...EventBase, type: z.literal("harness.resume"), waited_s: z.number().nonnegative().meta({ description: "from the question to its answer" }) }),
  z.strictObject({
    ...EventBase,
    type: z.literal("harness.result"),
    status: z.string(),
    num_turns: Count.nullable(),
    duration_ms: Count.nullable(),
    total_cost_usd: Usd.nullable(),
    call_cost_usd: Usd.nullable(),
  }),
  z.strictObject({ ...EventBase, type: z.literal("harness.question"), item: z.number().int().min(0).meta({ description: "index of the question in the session" }), cycle: z.number().int().min(1) }),
  z.strictObject({ ...EventBase, type: z.literal("harness.too_many_questions"), questions: z.number().int().min(1) }),
  z.strictObject({ ...EventBase, type: z.literal("harness.budget_spent"), spent_usd: Usd, budget_usd: Usd }),
  z.strictObject({ ...EventBase, type: z.literal("account.lock_wait"), waited_s: z.number().nonnegative(), gave_up: z.boolean() }),
  z.strictObject({ ...EventBase, type: z.literal("harness.test"), exit_code: z.number().int().nullable() }),
]);
export type HarnessEvent = z.infer<typeof HarnessEventSchema>;

export const SESSION_LEDGER_KIND = "session-ledger";

export const SessionLedgerSchema = z
  .strictObject({
    kind: z.literal(SESSION_LEDGER_KIND),
    schemaVersion: z.literal(1),
    runId: z.string().min(1),
    createdAt: z.iso.datetime(),
    manifestPath: z.string(),
    manifestSha256: Sha256,
    roots: z.record(Name, z.string()),
    model: z.string().min(1),
    image: z.string().min(1),
    runtime: z.string().min(1).optional().meta({
      description:
        "the OCI runtime every container of these sessions is created with (--runtime at the start, checked by a probe container then and at every resume; else the engine's default by name); absent in ledgers made before it was recorded",
    }),
    sandbox: SandboxHeaderSchema.optional().meta({
      description:
        "where the calls' and test commands' containers ran in the latest pass: the sandbox provider, the channel (host-paths: the worktree, staged files and sockets bound in; engine-api: content copied into volumes, the worktree copied back, the sockets carried as streams over the engine's API), the engine's endpoint, OS and architecture; absent in ledgers made before it was recorded",
    }),
    expectedCliVersion: z.string().min(1),
    capUsd: Usd,
    callBudgetUsd: Usd.meta({ description: "per call: reserved and passed as --max-budget-usd (it caps the call, not the session: measured)" }),
    sessionBudgetUsd: Usd,
    maxQuestions: z.literal(MAX_QUESTIONS),
    storageDir: z.string().meta({ description: "private folder (mode 700) holding the worktrees and the session files between calls" }),
    status: z.enum(["running", "parked", "finished", "blocked"]).meta({
      description: "running: a pass is writing; parked: a session awaits an answer; finished: every session ended; blocked: a pass stopped (a call did not complete, the cap)",
    }),
    statusReason: z.string().optional(),
    budget: z.strictObject({ reservedUsd: Usd, spentUsd: Usd, cumulativeCapExceeded: z.boolean() }),
    sessions: z.array(SessionSchema),
    events: z.array(HarnessEventSchema),
  })
  .superRefine((l, ctx) => {
    const held = (calls: readonly SessionCall[]) => sumPico(calls.map((c) => c.chargedUsd ?? c.reservationUsd));
    const spent = held(l.sessions.flatMap((s) => s.calls));
    if (pico(l.budget.spentUsd) !== spent) {
      ctx.addIssue({ code: "custom", path: ["budget", "spentUsd"], message: `is ${l.budget.spentUsd}, but the calls' charges and open reservations add up to ${picoToUsd(spent)}` });
    }
    l.sessions.forEach((s, i) => {
      const own = held(s.calls);
      if (pico(s.spentUsd) !== own) ctx.addIssue({ code: "custom", path: ["sessions", i, "spentUsd"], message: `is ${s.spentUsd}, but its calls add up to ${picoToUsd(own)}` });
      s.calls.forEach((c, j) => {
        if (c.phase === "settled" && c.sessionIdReported !== null && c.sessionIdReported !== s.id && c.status !== "invalid-setup") {
          ctx.addIssue({ code: "custom", path: ["sessions", i, "calls", j, "status"], message: "a result with another session_id must be invalid-setup" });
        }
        // Completed means the result named this session (contract R126): a missing session_id is not that.
        if (c.phase === "settled" && c.status === "completed" && c.sessionIdReported !== s.id) {
          ctx.addIssue({
            code: "custom",
            path: ["sessions", i, "calls", j, "sessionIdReported"],
            message: `is ${JSON.stringify(c.sessionIdReported)}; a completed call's result must report the session's id ${s.id}`,
          });
        }
      });
      if (s.questions.length > MAX_QUESTIONS + 1) ctx.addIssue({ code: "custom", path: ["sessions", i, "questions"], message: `holds more than ${MAX_QUESTIONS + 1} questions` });
    });
    l.sessions.forEach((s, i) => {
      const earlier = s.retryOf === undefined ? undefined : l.sessions.slice(0, i).find((e) => e.id === s.retryOf);
      if (s.retryOf !== undefined && (!earlier || earlier.taskId !== s.taskId || earlier.attempt + 1 !== s.attempt || !RETRYABLE_STATES.has(earlier.state))) {
        ctx.addIssue({
          code: "custom",
          path: ["sessions", i, "retryOf"],
          message: "a retry must follow an earlier session of the same task that ended too-many-questions or failed, with the next attempt number",
        });
      }
      if (s.retryOf === undefined && s.attempt !== 1) ctx.addIssue({ code: "custom", path: ["sessions", i, "attempt"], message: "only a retry (retryOf) has an attempt number above 1" });
    });
    const ids = new Set(l.sessions.map((s) => s.id));
    l.events.forEach((e, i) => {
      if (!ids.has(e.session)) ctx.addIssue({ code: "custom", path: ["events", i, "session"], message: "names no session of this ledger" });
    });
  });
export type SessionLedger = z.infer<typeof SessionLedgerSchema>;
