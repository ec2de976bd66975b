import type { Arm } from "../terms/terms.ts";
import { activeProfile } from "../profile/load.ts";
import type { GeneratedInitEvents, InitKind } from "./init-types.ts";

export { INIT_KINDS, type GeneratedInitEvents, type InitKind, type MeasuredInitKind } from "./init-types.ts";

/**
 * The init event the pinned CLI writes for each kind of run the runner starts, as measured on the
 * real binary and kept in the version's calibration profile (contract R220; src/calibrate/). The
 * transcript check compares every field of a run's init with it (contract R125): a field is either
 * measured (equal to the data), set by the run's own arguments (equal to that value), or one that
 * varies per run by nature (named below with the reason, never compared). Anything else is a
 * difference, and the attempt is `invalid-setup`.
 */

export interface VaryingField {
  /** Why its value differs between runs. */
  reason: string;
  /** The shape every value has (the value itself is not compared). */
  shape: RegExp;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Fields that vary per run by nature, with the reason and the shape they must have; their values
 * are never compared, their presence and shape are.
 */
export const INIT_FIELDS_VARYING_PER_RUN: Readonly<Record<string, VaryingField>> = {
  uuid: { reason: "the event's own random id, new on every run", shape: UUID },
  messaging_socket_path: {
    reason: "embeds the CLI's process id inside the container, which depends on how many processes started before it (measured: /tmp/cc-socks/16.sock and 17.sock in two adjudicator runs)",
    shape: /^\/tmp\/cc-socks\/[0-9]{1,7}\.sock$/,
  },
};

/** `session_id` outside a session: a fresh random id per run (the runner passes none). */
const FRESH_SESSION_ID: VaryingField = { reason: "a fresh random session id per run: the runner passes none outside a session", shape: UUID };

/** Fields a value of the run's arguments sets, with where the value comes from. */
export const INIT_PARAMETER_FIELDS: Readonly<Record<string, string>> = {
  model: "the --model value the runner passed (the protocol's or the adjudicator's model)",
  session_id: "in a session call, the --session-id/--resume value the runner passed; elsewhere it varies per run",
};

/** The parameters of one run: what its arguments set. */
export interface InitParameters {
  model: string;
  /** The session id passed with --session-id/--resume; absent outside a session. */
  sessionId?: string;
}

export interface ExpectedInit {
  kind: InitKind;
  /** Every compared field and its value. */
  fields: Readonly<Record<string, unknown>>;
  /** The fields present in every run whose value is not compared, only their shape. */
  varying: Readonly<Record<string, VaryingField>>;
}

export const isSessionKind = (kind: InitKind): boolean => kind === "session-start" || kind === "session-resume";

/** The fields of `kind` whose values vary per run, with the reason and shape. */
export function varyingFields(kind: InitKind): Record<string, VaryingField> {
  return { ...INIT_FIELDS_VARYING_PER_RUN, ...(isSessionKind(kind) ? {} : { session_id: FRESH_SESSION_ID }) };
}

/** What the init of a run of `kind` with these parameters must be. */
export function expectedInit(kind: InitKind, params: InitParameters, data: GeneratedInitEvents = activeProfile().initEvents): ExpectedInit {
  if (isSessionKind(kind) && params.sessionId === undefined) throw new Error(`a ${kind} init needs the session id the runner passed`);
  const measured = data.kinds[kind];
  const fields: Record<string, unknown> = { ...structuredClone(measured.fields), model: params.model };
  if (isSessionKind(kind)) fields.session_id = params.sessionId;
  const all = varyingFields(kind);
  return { kind, fields, varying: Object.fromEntries(measured.varying.map((k) => [k, all[k]!])) };
}

/** The kind of an attempt of `arm`. */
export const attemptInitKind = (arm: Arm): InitKind => (arm === "mcp" ? "attempt-mcp" : "attempt-repository");
