/** The shape of the measured init events (src/claude/init-events.generated.ts); see init-expectation.ts. */

/** Every kind of CLI run the runner starts; each has its own argument list and so its own init. */
export const INIT_KINDS = ["attempt-repository", "attempt-mcp", "adjudicator", "session-start", "session-resume"] as const;
export type InitKind = (typeof INIT_KINDS)[number];

/** One kind's measured init: the compared fields, and which varying fields it has. */
export interface MeasuredInitKind {
  /** Every field but those that vary per run and those a parameter sets, with its measured value. */
  fields: Record<string, unknown>;
  /** The fields of INIT_FIELDS_VARYING_PER_RUN the measured event has (present, in their shape, but not compared). */
  varying: string[];
}

/** The generated data: per kind, the measured init. */
export interface GeneratedInitEvents {
  cliVersion: string;
  command: string;
  kinds: Record<InitKind, MeasuredInitKind>;
}
