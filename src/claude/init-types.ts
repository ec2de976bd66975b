/** The shape of the measured init events, held in the calibration profile (src/profile/schema.ts); see init-expectation.ts. */
export { INIT_KINDS, type GeneratedInitEvents, type InitKind, type MeasuredInitKind } from "../profile/schema.ts";
