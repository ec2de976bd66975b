import { GENERATED_PRICE_TABLE } from "./cli-prices.generated.ts";
import type { GeneratedPriceTable, ModelPrices, TierPrices } from "./price-types.ts";

/**
 * The CLI's own list prices (its `costBasis: "list"`), USD per million tokens, as measured from
 * the pinned binary by tests/conformance/measure-prices.ts: the real CLI, a scripted Messages
 * API returning chosen usage, the CLI's running and final `total_cost_usd` read back. The
 * numbers live only in the generated file; the conformance suite re-measures a sample of rows
 * on every run (tests/conformance/prices.test.ts). Re-generate when the CLI pin moves.
 */

export type { GeneratedPriceTable, ModelPrices, TierPrices } from "./price-types.ts";

const freezeTier = (t: TierPrices): Readonly<TierPrices> => Object.freeze({ ...t });

export const CLI_PRICES: Readonly<Record<string, Readonly<ModelPrices>>> = Object.freeze(
  Object.assign(
    Object.create(null) as Record<string, Readonly<ModelPrices>>,
    Object.fromEntries(Object.entries(GENERATED_PRICE_TABLE.models).map(([model, row]) => [model, Object.freeze({ tier1: freezeTier(row.tier1), tier2: freezeTier(row.tier2 ?? row.tier1) })])),
  ),
);

/** The row for `model`, looked up as an own key only (never `constructor` or `__proto__`). */
export function pricesFor(model: string): Readonly<ModelPrices> | undefined {
  return Object.hasOwn(CLI_PRICES, model) ? CLI_PRICES[model] : undefined;
}

/**
 * The largest prompt the CLI prices at `model`'s first tier (measured per model by bisection);
 * `Infinity` for a model without a second tier, `undefined` for a model without a row.
 */
export function tier1MaxPromptTokens(model: string): number | undefined {
  if (!Object.hasOwn(GENERATED_PRICE_TABLE.models, model)) return undefined;
  return GENERATED_PRICE_TABLE.models[model]!.tier1MaxPromptTokens ?? Number.POSITIVE_INFINITY;
}

/** The family aliases the binary resolves on its own; the runner refuses them (see modelProblem in models.ts). */
export const MODEL_ALIASES: Readonly<Record<string, GeneratedPriceTable["aliases"][string]>> = GENERATED_PRICE_TABLE.aliases;
