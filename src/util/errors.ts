/**
 * The runner's own error types. Attempt outcomes (timeouts, non-zero exits, bad
 * transcripts) are results, not exceptions; these are for what stops the runner itself.
 */

/** Exit codes of the `study-runner` command. */
export const ExitCode = {
  /** The run reached `awaiting-adjudication`, or a command that only reads succeeded. */
  ok: 0,
  /** An attempt ended with a status other than `completed`; the run is `blocked`. */
  blocked: 1,
  /** Bad input or a refused start: nothing was spent. */
  usage: 2,
  /** The runner's own fault (Docker unreachable, disk full, a bug). */
  fault: 3,
  /** Interrupted by SIGINT (128 + 2). */
  sigint: 130,
  /** Interrupted by SIGTERM (128 + 15). */
  sigterm: 143,
} as const;

/** An error that carries every problem found, each one line naming the field and the fix. */
abstract class ProblemsError extends Error {
  constructor(
    message: string,
    readonly problems: readonly string[] = [message],
  ) {
    super(message);
  }
}

/** Input that cannot be used as given; the message names the field and the fix. */
export class UsageError extends ProblemsError {
  override readonly name = "UsageError";
}

/** A check before anything is spent failed (preflight); nothing was charged. */
export class RefusalError extends ProblemsError {
  override readonly name = "RefusalError";
}

/**
 * The runner could not finish for a reason of the host (a full disk, a file size limit), and says
 * what it left behind and what to do: exit 3 with its message alone.
 */
export class FaultError extends Error {
  override readonly name = "FaultError";
}

/**
 * Private evidence that is not what the runner writes (a transcript that is a folder, a FIFO, a
 * link, above its bound, or a name the runner never uses): each problem names the file. Exit 1,
 * as `ledger verify` exits for a difference (contract R183).
 */
export class EvidenceError extends ProblemsError {
  override readonly name = "EvidenceError";
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
