import { activeProfile } from "../profile/load.ts";
import type { Profile } from "../profile/schema.ts";
import type { GeneratedPriceTable, ModelPrices, TierPrices } from "./price-types.ts";

/**
 * The CLI's own list prices (its `costBasis: "list"`), USD per million tokens, as measured from
 * the binary of the run's CLI version (`study-runner calibrate`, src/calibrate/prices.ts): the real CLI,
 * a scripted Messages API returning chosen usage, the CLI's running and final `total_cost_usd`
 * read back. The numbers live only in the version's calibration profile (contract R220); the
 * conformance suite re-measures a sample of rows on every run (tests/conformance/prices.test.ts).
 */

export type { GeneratedPriceTable, ModelPrices, TierPrices } from "./price-types.ts";

const freezeTier = (t: TierPrices): Readonly<TierPrices> => Object.freeze({ ...t });

const built = new WeakMap<Profile, Readonly<Record<string, Readonly<ModelPrices>>>>();

/** The price table of the active profile: per model, both tiers (a model without a second tier has its first-tier rates there), frozen. */
export function cliPrices(): Readonly<Record<string, Readonly<ModelPrices>>> {
  const profile = activeProfile();
  let table = built.get(profile);
  if (!table) {
    table = Object.freeze(
      Object.assign(
        Object.create(null) as Record<string, Readonly<ModelPrices>>,
        Object.fromEntries(Object.entries(profile.prices.models).map(([model, row]) => [model, Object.freeze({ tier1: freezeTier(row.tier1), tier2: freezeTier(row.tier2 ?? row.tier1) })])),
      ),
    );
    built.set(profile, table);
  }
  return table;
}

/** The row for `model`, looked up as an own key only (never `constructor` or `__proto__`). */
export function pricesFor(model: string): Readonly<ModelPrices> | undefined {
  const table = cliPrices();
  return Object.hasOwn(table, model) ? table[model] : undefined;
}

/**
 * The largest prompt the CLI prices at `model`'s first tier (measured per model by bisection);
 * `Infinity` for a model without a second tier, `undefined` for a model without a row.
 */
export function tier1MaxPromptTokens(model: string): number | undefined {
  const models = activeProfile().prices.models;
  if (!Object.hasOwn(models, model)) return undefined;
  return models[model]!.tier1MaxPromptTokens ?? Number.POSITIVE_INFINITY;
}

/** The family aliases the binary resolves on its own; the runner refuses them (see modelProblem in models.ts). */
export function modelAliases(): Readonly<Record<string, GeneratedPriceTable["aliases"][string]>> {
  return activeProfile().prices.aliases;
}
