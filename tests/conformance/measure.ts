/**
 * The drift tests' measurements of the pinned binary, with the calibration's own code
 * (src/calibrate/): the same scenarios `study-runner calibrate` runs, on the pin's image.
 * `study-runner calibrate --cli-version <pin>` measures the whole profile again; copying its
 * output over src/profile/claude-code-<pin>.json updates the bundled one (docs/conformance.md).
 */
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import type { MeasuredInit } from "../../src/calibrate/init.ts";
import { adjudicatorScenario, pilotScenario, sessionsScenario, type ScenarioContext } from "../../src/calibrate/scenarios.ts";
import type { RecordedRequest } from "../../src/stand-ins/scripted-api/server.ts";
import { measureProbes } from "../../src/calibrate/behaviour.ts";
import type { Resume, StructuredOutput } from "../../src/profile/schema.ts";
import { prepareCorpus, realImage, runtime } from "./support.ts";

export const RECALIBRATE_COMMAND = `study-runner calibrate --cli-version ${CLAUDE_CODE_VERSION}, then copy the profile it writes over src/profile/claude-code-${CLAUDE_CODE_VERSION}.json (docs/conformance.md, "Moving the pin")`;

async function withContext<T>(name: string, f: (ctx: ScenarioContext) => Promise<T>): Promise<T> {
  const corpus = await prepareCorpus(name);
  try {
    return await f({ runtime, image: (await realImage()).id, cliVersion: CLAUDE_CODE_VERSION, corpus });
  } finally {
    await corpus.cleanup();
  }
}

/**
 * Every kind of run twice through the gateway: the pilot twice (the adjudicator over the first),
 * the session demo's two sessions; with what the adjudicator's runs showed of structured output and
 * the sessions of resume (contract R263).
 */
export function measureInits(): Promise<{ inits: MeasuredInit[]; structuredOutput?: StructuredOutput; resume?: Resume }> {
  return withContext("init", async (ctx) => {
    const out: MeasuredInit[] = [];
    let structuredOutput: StructuredOutput | undefined;
    for (let round = 0; round < 2; round++) {
      const pilot = await pilotScenario(ctx, "gateway");
      out.push(...pilot.inits);
      if (round === 0) {
        const adjudicator = await adjudicatorScenario(ctx, "gateway", pilot.run);
        out.push(...adjudicator.inits);
        structuredOutput = adjudicator.structuredOutput;
      }
    }
    const sessions = await sessionsScenario(ctx, "gateway");
    out.push(...sessions.inits);
    return { inits: out, structuredOutput, resume: sessions.resume };
  });
}

/** The import and retry probes of `calibrate` (contract R263), on the pin's image. */
export function measureBehaviourProbes(): ReturnType<typeof measureProbes> {
  return withContext("probes", async (ctx) => measureProbes({ runtime: ctx.runtime, image: ctx.image, loginDir: ctx.corpus.loginDir, work: ctx.corpus.work }));
}

/** What the CLI sends in every scenario, on the direct route (before any gateway check); each scenario must complete. */
export function measureRequests(): Promise<RecordedRequest[]> {
  return withContext("measure-requests", async (ctx) => {
    const pilot = await pilotScenario(ctx, "direct");
    const results = [pilot, await adjudicatorScenario(ctx, "direct", pilot.run), await sessionsScenario(ctx, "direct")];
    for (const r of results) if (!r.completed) throw new Error(`the measured ${r.name} did not complete: ${r.statuses.join(", ")} ${r.detail}`);
    return results.flatMap((r) => r.requests);
  });
}
