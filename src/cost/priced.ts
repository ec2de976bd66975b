import { CLI_PRICES, pricesFor } from "./prices.ts";

/** The models the runner can price, in the table's order. */
export function pricedModels(): string[] {
  return Object.keys(CLI_PRICES);
}

/**
 * Why `model` cannot run, or null. An attempt of a model without a price row would spend its
 * reservation for real and only then end `invalid-cost` (its cost cannot be cross-checked), so a
 * run refuses it before anything is reserved. `variable` names where the model came from.
 */
export function checkPricedModel(model: string, variable = "STUDY_MODEL"): string | null {
  if (pricesFor(model) !== undefined) return null;
  const known = pricedModels();
  return `${variable}=${model} has no row in the runner's price table (CLI_PRICES): every attempt would spend its reservation and then end invalid-cost, its cost unverifiable; set ${variable} to a model the runner can price: ${known.length ? known.join(", ") : "none"}`;
}
