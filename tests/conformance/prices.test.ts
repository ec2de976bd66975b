/**
 * The generated price table against the REAL Claude Code 2.1.296, re-measured on every run:
 * a sample of rows (the answering model with its two tiers and bisected boundary, the default
 * adjudicator model whose rates must stay flat up to the search limit, cache writes of both
 * TTLs in each) and one alias. Any difference from the pin's calibration profile (src/profile/) fails.
 * Measured again by `study-runner calibrate` when the pin moves.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_ADJUDICATOR_MODELS } from "../../src/cost/models.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { probeEnv, rowOf, TOLERANCE_USD_PER_TOKEN, twoAtATime } from "../../src/calibrate/prices.ts";
import { measureModel, SEARCH_LIMIT, worstPerTokenError, type ModelMeasurement } from "../../src/calibrate/price-probe.ts";
import { MODEL, realImage, runtime } from "./support.ts";
import { activeProfile } from "../../src/profile/load.ts";

const GENERATED_PRICE_TABLE = activeProfile().prices;

const SAMPLE = [MODEL, DEFAULT_ADJUDICATOR_MODELS[0]] as const;
const ALIAS = "sonnet";
const measured = new Map<string, ModelMeasurement>();
let env: Awaited<ReturnType<typeof probeEnv>>;

beforeAll(async () => {
  env = await probeEnv(runtime, (await realImage()).tag);
  const runs = await twoAtATime([...SAMPLE, ALIAS], (m) => measureModel(env, m));
  for (const r of runs) measured.set(r.model, r);
}, 300_000);

afterAll(async () => {
  await env?.cleanup();
});

describe("the generated price table is the pinned CLI's own", () => {
  it("is the profile of this CLI version, searched up to the prober's limit", () => {
    expect(activeProfile().cliVersion).toBe(CLAUDE_CODE_VERSION);
    expect(GENERATED_PRICE_TABLE.searchedUpToPromptTokens).toBe(SEARCH_LIMIT);
  });

  for (const model of SAMPLE) {
    it(`${model}: every rate, both tiers and the boundary equal the re-measurement`, () => {
      const m = measured.get(model)!;
      const row = GENERATED_PRICE_TABLE.models[model]!;
      expect(m.costBasis).toBe("list");
      expect(m.modelUsageKeys).toEqual([model]);
      expect(m.initModel).toBe(model);
      // The sum over the CLI's turns is its own total, two ways.
      expect(Math.abs(m.totalCostUsd - m.modelUsageCostUsd)).toBeLessThanOrEqual(1e-9);
      expect(Math.abs(m.totalCostUsd - m.probes.reduce((s, p) => s + p.costUsd, 0))).toBeLessThanOrEqual(1e-9);
      const now = rowOf(m);
      expect(now.tier1MaxPromptTokens).toBe(row.tier1MaxPromptTokens);
      for (const tier of ["tier1", "tier2"] as const) {
        const a = now[tier];
        const b = row[tier];
        expect(a === null).toBe(b === null);
        if (a && b) for (const k of Object.keys(a) as Array<keyof typeof a>) expect(Math.abs(a[k] - b[k]) / 1e6, `${tier}.${k}`).toBeLessThanOrEqual(TOLERANCE_USD_PER_TOKEN);
      }
      // The table reproduces the CLI's cost of every probe of this run (cache writes of both TTLs and unsplit ones included).
      expect(m.probes.some((p) => p.tokens.write5m > 0) && m.probes.some((p) => p.tokens.write1h > 0)).toBe(true);
      expect(worstPerTokenError(row, m.probes).usdPerToken).toBeLessThanOrEqual(TOLERANCE_USD_PER_TOKEN);
    });
  }

  it("the answering model has a second tier above its bisected boundary; the default adjudicator has none up to the search limit", () => {
    const answering = measured.get(MODEL)!;
    expect(answering.tier1MaxPromptTokens).not.toBeNull();
    expect(answering.probes.filter((p) => p.label.startsWith("bisect")).length).toBeGreaterThan(5);
    expect(answering.tier2!.input).toBeGreaterThan(answering.tier1.input);
    expect(measured.get(DEFAULT_ADJUDICATOR_MODELS[0])!.tier1MaxPromptTokens).toBeNull();
  });

  it(`the alias '${ALIAS}' runs as the model the table records, which is why the runner refuses aliases`, () => {
    const m = measured.get(ALIAS)!;
    expect({ initModel: m.initModel, requestModel: m.requestModel, modelUsageKeys: m.modelUsageKeys, costBasis: m.costBasis }).toEqual(GENERATED_PRICE_TABLE.aliases[ALIAS]);
    expect(m.initModel).not.toBe(ALIAS);
  });
});
