/**
 * The `@` imports (without and with `--restricted`) and the retries on a 429 and a 529 of the REAL
 * Claude Code 2.1.296, probed with `calibrate`'s own code (src/calibrate/behaviour.ts): the
 * attempt's arguments and container, the scripted Messages API on a unix socket. What it measures
 * must equal the bundled profile; a new binary that inlines, or retries, otherwise fails here
 * until the profile is calibrated again.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { activeProfile } from "../../src/profile/load.ts";
import { measureBehaviourProbes, RECALIBRATE_COMMAND } from "./measure.ts";

let probed: Awaited<ReturnType<typeof measureBehaviourProbes>>;

beforeAll(async () => {
  probed = await measureBehaviourProbes();
}, 300_000);

describe("the pinned binary's imports and retries against its profile (contract R263, R264)", () => {
  // contract: R263
  it("inlines the @ imports the profile records, without and with --restricted", () => {
    console.log(`@ imports: ${JSON.stringify(probed.imports)}`);
    expect(probed.problems).toEqual([]);
    expect(probed.imports, `differs from the profile; regenerate with ${RECALIBRATE_COMMAND}`).toEqual(activeProfile().imports);
    // What the runner records of an export follows these rules (contract R129): the measured 2.1.296 ones.
    expect(probed.imports.plain).toEqual({ claudeMd: true, relative: true, absoluteInWorkspace: true, absoluteOutside: false, tilde: false, maxHops: 4 });
  });

  // contract: R263, R264
  it("announces the 429 and the 529 as the profile records, where the runner's backoff reads them, and then succeeds", () => {
    console.log(`retries: ${JSON.stringify(probed.retries)}`);
    expect(probed.retries, `differs from the profile; regenerate with ${RECALIBRATE_COMMAND}`).toEqual(activeProfile().retries);
    expect(probed.retries.events.map((e) => [e.subtype, e.errorStatus])).toEqual([
      ["api_retry", 429],
      ["api_retry", 529],
    ]);
  });
});
