import { isDeepStrictEqual } from "node:util";
import { INIT_KINDS, type GeneratedInitEvents, type InitKind } from "../claude/init-expectation.ts";
import { measuredPart, type MeasuredInit } from "./init.ts";

/**
 * The init events a calibration starts from (contract R223): the pin's, with the version each
 * kind names set to the one being measured. The runner's init check compares every run with
 * them, so a run of a new version whose init differs is `invalid-setup` and its run stops; the
 * calibration then adopts what the run wrote (`adoptInits`) and runs the scenario again. What it
 * keeps in the end is only what completed runs wrote.
 */
export function seedInits(pin: GeneratedInitEvents, version: string): GeneratedInitEvents {
  const kinds = structuredClone(pin.kinds);
  for (const kind of INIT_KINDS) if ("claude_code_version" in kinds[kind].fields) kinds[kind].fields.claude_code_version = version;
  return { kinds };
}

/**
 * Adopts the measured inits into `draft` (changed in place): each kind a run measured gets its
 * measured part; a kind not yet measured by any run takes over each field that changed the same
 * way in a measured kind where it had the same value (the version, a new built-in command), so one
 * scenario's difference is not found again one run at a time. `measured` collects the kinds
 * adopted from a real run, which nothing overwrites by analogy. Returns whether anything changed.
 */
export function adoptInits(draft: GeneratedInitEvents, runs: readonly MeasuredInit[], measured: Set<InitKind>): boolean {
  let changed = false;
  for (const run of runs) {
    const part = measuredPart(run.kind, run.init);
    const old = draft.kinds[run.kind];
    measured.add(run.kind);
    if (isDeepStrictEqual(part, old)) continue;
    changed = true;
    for (const other of INIT_KINDS) {
      if (measured.has(other)) continue;
      const target = draft.kinds[other];
      for (const key of new Set([...Object.keys(old.fields), ...Object.keys(part.fields)])) {
        if (isDeepStrictEqual(old.fields[key], part.fields[key]) || !isDeepStrictEqual(target.fields[key], old.fields[key])) continue;
        if (key in part.fields) target.fields[key] = structuredClone(part.fields[key]);
        else delete target.fields[key];
      }
      if (isDeepStrictEqual(target.varying, old.varying)) target.varying = [...part.varying];
    }
    draft.kinds[run.kind] = part;
  }
  return changed;
}
