/**
 * The bounds the study's runner contract sets on every attempt, named once. The CLI attempt,
 * the HTTP attempt, the manifest check and the messages that report a bound all read these.
 */

/** stdout of one attempt is read up to this many bytes; past it the container is killed and the attempt is failed. */
export const STDOUT_LIMIT_BYTES = 4 * 1024 * 1024;

/** Wall-clock time of one attempt, from its start; past it the attempt is killed and timed-out. */
export const ATTEMPT_TIMEOUT_MS = 5 * 60 * 1000;

/** The whole prompt, in bytes of UTF-8. */
export const PROMPT_LIMIT_BYTES = 8 * 1024;

/** One task's question, in bytes of UTF-8: the rest of the prompt limit is left for the runner's wording around it. */
export const QUESTION_LIMIT_BYTES = 6 * 1024;

/** A byte bound as a person writes it: "4 MiB", "64 KiB", or "1000 bytes" when it is not a whole number of either. */
export function formatByteBound(bytes: number): string {
  if (bytes > 0 && bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
  if (bytes > 0 && bytes % 1024 === 0) return `${bytes / 1024} KiB`;
  return `${bytes} bytes`;
}

/**
 * Added to a byte-based bound of a request's input tokens: the tool definitions' and system
 * prompt's overhead on the API side (the http transport's ceiling and the gateway's bound).
 */
export const INPUT_CEILING_SLACK_TOKENS = 8192;
