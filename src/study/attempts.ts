import type { Ledger, Observation } from "../ledger/schema.ts";
import type { PlannedAttempt } from "../plan/plan.ts";
import type { CredentialMode, ModelApi } from "../terms/terms.ts";
import { runLoop, type Checkpoint, type LoopEnd, type LoopProgress, type RunKind } from "../loop/loop.ts";

/** What a transport tells the loop about its attempts; the naming and the plan are the study's. */
export type AttemptKind = Omit<RunKind<PlannedAttempt, Observation>, "noun" | "number" | "describe">;

/**
 * Why `--concurrency` cannot be used as asked, or null. With the login copied into each attempt,
 * two attempts at once would hold the same single-use refresh token: whichever refreshes first
 * invalidates the other's login. So only one at a time, unless no real login is used (a test
 * stand-in answers: the fake image or a scripted API); a gateway mode that keeps the login on the
 * host has nothing to serialise.
 */
export function concurrencyProblem(o: { concurrency: number; credentials: CredentialMode; modelApi: ModelApi }): string | null {
  if (!Number.isSafeInteger(o.concurrency) || o.concurrency < 1) return `--concurrency must be a whole number of at least 1, got ${o.concurrency}`;
  if (o.concurrency === 1 || o.credentials === "gateway" || o.modelApi === "test") return null;
  return (
    `--concurrency ${o.concurrency} is refused: attempts get a copy of the CLI login, and two containers at once would hold the same ` +
    `single-use refresh token (the first refresh invalidates the other's login). Run with --concurrency 1; nothing was charged`
  );
}

/** The HTTP status of a rate limit (429) or an overloaded API (529) one transcript line reports, or null. */
export function rateLimitStatus(line: string): number | null {
  if (!line.includes("api_retry") && !line.includes("api_error_status")) return null;
  let event: unknown;
  try {
    event = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof event !== "object" || event === null) return null;
  const e = event as { type?: unknown; subtype?: unknown; error_status?: unknown; api_error_status?: unknown };
  // The CLI announces each of its own retries (docs/claude-cli-observations.md) and, when it
  // gives up, names the status in the result.
  const status = e.type === "system" && e.subtype === "api_retry" ? e.error_status : e.type === "result" ? e.api_error_status : undefined;
  return status === 429 || status === 529 ? status : null;
}

/** A transcript line handler that tells the loop of each 429 or 529 the attempt meets. */
export function rateLimitWatch(ctx: { rateLimited(httpStatus: number): void }): (line: string) => void {
  return (line) => {
    const status = rateLimitStatus(line);
    if (status !== null) ctx.rateLimited(status);
  };
}

/**
 * One lock taken by the first of several holders and released by the last: attempts running at
 * once share the run's hold on the CLI login instead of waiting for each other.
 */
export function sharedHold<L extends { release(): Promise<void> }>(take: () => Promise<L>): () => Promise<{ lock: L; release(): Promise<void> }> {
  let current: Promise<L> | undefined;
  let holders = 0;
  let releasing: Promise<void> = Promise.resolve();
  return async () => {
    if (!current) {
      const previous = releasing;
      current = previous.then(take);
      current.catch(() => (current = undefined));
    }
    const mine = current;
    const lock = await mine;
    holders++;
    let released = false;
    return {
      lock,
      release: async () => {
        if (released) return;
        released = true;
        if (--holders > 0) return;
        if (current === mine) current = undefined;
        releasing = lock.release();
        await releasing;
      },
    };
  };
}

/** Runs a study's planned attempts, in plan order, through the one bookkeeping loop. */
export function runAttempts(o: {
  kind: AttemptKind;
  plan: readonly PlannedAttempt[];
  ledger: Ledger;
  capUsd: number;
  persist(): Promise<void>;
  progress: LoopProgress<PlannedAttempt, Observation>;
  signal?: AbortSignal;
  checkpoint?: (point: Checkpoint) => void;
  /** How many attempts may run at once (1: one after another). Above 1 the two arms of a task and repetition start together. */
  concurrency?: number;
  now?: () => Date;
}): Promise<LoopEnd> {
  const concurrency = o.concurrency ?? 1;
  const scheduling = { concurrency, pairs: concurrency > 1 ? ("together" as const) : ("sequential" as const), rateEvents: [] as NonNullable<Ledger["scheduling"]>["rateEvents"] };
  o.ledger.scheduling = scheduling;
  return runLoop({
    kind: {
      noun: "attempt",
      number: (a) => a.index + 1,
      describe: (a) => `attempt ${a.index + 1} (${a.taskId}, ${a.scenario}, repetition ${a.repetition})`,
      ...o.kind,
    },
    units: o.plan,
    book: o.ledger,
    capUsd: o.capUsd,
    doneStatus: "awaiting-adjudication",
    persist: o.persist,
    progress: o.progress,
    signal: o.signal,
    checkpoint: o.checkpoint,
    concurrency,
    // Plan order keeps the two arms of one task x repetition next to each other, in their
    // counterbalanced order: one pair.
    groupKey: (a) => `${a.taskIndex}/${a.repetition}`,
    onRateEvent: (e) => {
      scheduling.rateEvents.push({ at: (o.now?.() ?? new Date()).toISOString(), event: e.event, observation: e.unit.index, httpStatus: e.httpStatus, concurrency: e.concurrency });
    },
  });
}
