import { cliPrices, modelAliases, pricesFor } from "./prices.ts";

/**
 * Every check of a model name, in one place: the study's STUDY_MODEL, the adjudicator's
 * STUDY_ADJUDICATOR_MODEL, the sessions' --model and the `--model` argument every Claude Code run
 * gets all go through `modelProblem`, each asking for the checks its use needs.
 *
 * Which model adjudicates: the protocol wants a different model from the answering one, and its
 * cost must be checkable, so the adjudicator needs a row in the measured price table. The
 * default is the first of these that differs from the answering model: a different family,
 * priced by the pinned CLI as "list".
 */
export const DEFAULT_ADJUDICATOR_MODELS = ["claude-sonnet-5-5", "claude-haiku-5-5"] as const;

export type AdjudicatorModelSource = "default" | "STUDY_ADJUDICATOR_MODEL" | "--force-same-model";

export type AdjudicatorChoice = { model: string; source: AdjudicatorModelSource } | { problem: string };

/** What one use of a model name needs of it; `modelProblem` checks these in the order listed. */
export interface ModelNeeds {
  /** Where the name came from, as a refusal names it: an environment variable or a flag (e.g. STUDY_MODEL, --model). */
  what: string;
  /** The refusal when no name (or only white space) is given; without it an absent name is no problem. */
  missing?: string;
  /** One `claude` argument: a model name, never a value the CLI would read as a flag. */
  argument?: boolean;
  /**
   * A full model id, not a family alias: the CLI resolves an alias on its own (measured: `sonnet`
   * ran as claude-sonnet-5-5), so the ledger would name a model that depends on the release and the
   * provider, not the one that ran.
   */
  fullId?: boolean;
  /**
   * A row in the runner's price table. "attempt": an attempt of an unpriced model would spend its
   * reservation for real and only then end `invalid-cost`, so a run refuses it before anything is
   * reserved. "adjudicator": the adjudicator's cost must be checkable.
   */
  priced?: "attempt" | "adjudicator";
}

/** The models the runner can price, in the table's order. */
export function pricedModels(): string[] {
  return Object.keys(cliPrices());
}

/** Why `model` cannot be used as `needs` asks, or null; every refusal names where the name came from and the fix. */
export function modelProblem(model: string | undefined, needs: ModelNeeds): string | null {
  const name = model?.trim();
  if (!name) return needs.missing ?? null;
  // The argument check reads the name as given: white space around it would reach the CLI too.
  if (needs.argument && !/^[A-Za-z0-9][A-Za-z0-9._:@[\]-]*$/.test(model!)) return `${needs.what} '${model}' is not a model name such as claude-haiku-5-5`;
  if (needs.fullId && Object.hasOwn(modelAliases(), name)) return aliasRefusal(name, needs.what);
  if (needs.priced && pricesFor(name) === undefined) return needs.priced === "attempt" ? unpricedAttemptModel(name, needs.what) : unpricedAdjudicatorModel(name, needs.what);
  return null;
}

function aliasRefusal(model: string, what: string): string {
  const resolved = modelAliases()[model]!.initModel;
  return `${what} '${model}' is an alias the CLI resolves on its own${resolved ? ` (the pinned CLI runs it as ${resolved})` : ""}, so the ledger would not name the model that ran; give the full model id${resolved ? `, e.g. ${resolved}` : ""}`;
}

function unpricedAttemptModel(model: string, variable: string): string {
  const known = pricedModels();
  return `${variable}=${model} has no row in the runner's price table (CLI_PRICES): every attempt would spend its reservation and then end invalid-cost, its cost unverifiable; set ${variable} to a model the runner can price: ${known.length ? known.join(", ") : "none"}`;
}

function unpricedAdjudicatorModel(model: string, what: string): string {
  return `${what} '${model}' has no row in the measured price table (the CLI version's calibration profile), so its cost cannot be checked; choose a model the pinned CLI prices, e.g. ${DEFAULT_ADJUDICATOR_MODELS[0]}`;
}

export function chooseAdjudicatorModel(opts: { requested: string | undefined; answeringModel: string; forceSameModel: boolean }): AdjudicatorChoice {
  const requested = opts.requested?.trim();
  if (requested) {
    const problem = modelProblem(requested, { what: "STUDY_ADJUDICATOR_MODEL", fullId: true, priced: "adjudicator" });
    if (problem) return { problem };
    if (requested === opts.answeringModel && !opts.forceSameModel) {
      return {
        problem: `the adjudicator model ${requested} is the answering run's model; the adjudicator must be a different model run: unset STUDY_ADJUDICATOR_MODEL (the default is a different priced model), set it to another priced model, or pass --force-same-model (recorded and reported as a departure from the protocol)`,
      };
    }
    return { model: requested, source: "STUDY_ADJUDICATOR_MODEL" };
  }
  if (opts.forceSameModel) return { model: opts.answeringModel, source: "--force-same-model" };
  const model = DEFAULT_ADJUDICATOR_MODELS.find((m) => m !== opts.answeringModel && pricesFor(m) !== undefined);
  if (!model) return { problem: `no default adjudicator model differs from the answering model ${opts.answeringModel}; set STUDY_ADJUDICATOR_MODEL to another priced model` };
  return { model, source: "default" };
}
