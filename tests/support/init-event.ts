import type { ExpectedInit } from "../../src/claude/init-expectation.ts";

/** Values for the varying fields of an init built from the measurement (tests, the bench, the fake's data). */
export interface VaryingValues {
  sessionId: string;
  uuid: string;
  /** The process id in `messaging_socket_path`. */
  pid: number;
}

/**
 * A whole init event that the check accepts: the measured fields, and the varying ones the measured
 * event has, with these values. What a stand-in for the CLI (the fake image, fixtures, the bench)
 * writes so that it is not a hand-kept copy of the measurement.
 */
export function initEventFrom(expected: ExpectedInit, values: VaryingValues): Record<string, unknown> {
  const sample: Record<string, string> = { session_id: values.sessionId, uuid: values.uuid, messaging_socket_path: `/tmp/cc-socks/${values.pid}.sock` };
  // A copy: a caller that changes the event (a test's mutation) never changes the measurement.
  const event: Record<string, unknown> = structuredClone({ ...expected.fields });
  for (const key of Object.keys(expected.varying)) {
    const value = sample[key];
    if (value === undefined || !expected.varying[key]!.shape.test(value)) throw new Error(`no sample value in the shape of the varying init field ${key}`);
    event[key] = value;
  }
  return event;
}
