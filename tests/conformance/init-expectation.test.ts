/**
 * The expected init events (the pin's bundled calibration profile, src/profile/) against the REAL Claude Code
 * 2.1.296: every kind of run the runner starts (an attempt of each arm, the adjudicator, a session's
 * start and resume) is run twice with the runner's own arguments, container and gateway, and the
 * init it writes must equal the generated data field for field, with only the fields that vary per
 * run left out. A new CLI version, or a change of the arguments that changes the init, fails here
 * until the profile is calibrated again
 * (`study-runner calibrate`, docs/conformance.md).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectedInit, INIT_KINDS, varyingFields } from "../../src/claude/init-expectation.ts";
import { generatedFrom, type MeasuredInit } from "../../src/calibrate/init.ts";
import { measureInits, RECALIBRATE_COMMAND } from "./measure.ts";
import { activeProfile } from "../../src/profile/load.ts";

const GENERATED_INIT_EVENTS = activeProfile().initEvents;

let measured: MeasuredInit[] = [];
let behaviour: Omit<Awaited<ReturnType<typeof measureInits>>, "inits"> = {};

beforeAll(async () => {
  const { inits, ...rest } = await measureInits();
  measured = inits;
  behaviour = rest;
}, 900_000);

afterAll(() => {
  measured = [];
});

describe("the measured init of every kind of run (contract R125)", () => {
  // contract: R125
  it("each kind ran twice and completed, and the profile's init events equal what the pinned binary writes now", () => {
    const { data, problems } = generatedFrom(measured);
    // Printed so a CI log shows the measurement itself, not only pass or fail.
    console.log(`init kinds measured: ${measured.map((m) => `${m.kind} ${m.status}`).join(", ")}`);
    expect(problems).toEqual([]);
    for (const kind of INIT_KINDS) {
      expect(data.kinds[kind], `${kind} differs from the profile; regenerate with ${RECALIBRATE_COMMAND}`).toEqual(GENERATED_INIT_EVENTS.kinds[kind]);
    }
  });

  // contract: R125
  it("every measured init is the expectation of its kind with the run's own model and session id, and its varying fields in their shape", () => {
    for (const m of measured) {
      const exp = expectedInit(m.kind, { model: m.model, sessionId: m.sessionId });
      const rest = Object.fromEntries(Object.entries(m.init).filter(([k]) => !(k in exp.varying)));
      expect(rest).toEqual(exp.fields);
      for (const [k, v] of Object.entries(varyingFields(m.kind))) if (k in m.init) expect(m.init[k]).toMatch(v.shape);
    }
  });
});

describe("structured output and resume, read off the same runs (contract R263)", () => {
  // contract: R263
  it("the adjudicator's runs show the structured output and the sessions' resumes the resume the profile records", () => {
    console.log(`structured output: ${JSON.stringify(behaviour.structuredOutput)}; resume: ${JSON.stringify(behaviour.resume)}`);
    expect(behaviour.structuredOutput, `differs from the profile; regenerate with ${RECALIBRATE_COMMAND}`).toEqual(activeProfile().structuredOutput);
    expect(behaviour.resume, `differs from the profile; regenerate with ${RECALIBRATE_COMMAND}`).toEqual(activeProfile().resume);
  });
});
