import { MODEL_ALIASES, pricesFor } from "./prices.ts";

/**
 * Which model adjudicates. The protocol wants a different model from the answering one, and its
 * cost must be checkable, so the adjudicator needs a row in the measured price table. The
 * default is the first of these that differs from the answering model: a different family,
 * priced by the pinned CLI as "list".
 */
export const DEFAULT_ADJUDICATOR_MODELS = ["claude-sonnet-5-5", "claude-haiku-5-5"] as const;

export type AdjudicatorModelSource = "default" | "STUDY_ADJUDICATOR_MODEL" | "--force-same-model";

export type AdjudicatorChoice = { model: string; source: AdjudicatorModelSource } | { problem: string };

/**
 * A model name the runner can pass to `--model` and check the cost of, or why not. Aliases are
 * refused: the CLI resolves them itself (measured: `sonnet` ran as claude-sonnet-5-5), so the
 * ledger would name a model that depends on the release and the provider, not the one that ran.
 */
export function modelNameProblem(model: string, what: string): string | null {
  const alias = aliasProblem(model, what);
  if (alias) return alias;
  if (pricesFor(model) === undefined) {
    return `${what} '${model}' has no row in the measured price table (src/cost/cli-prices.generated.ts), so its cost cannot be checked; choose a model the pinned CLI prices, e.g. ${DEFAULT_ADJUDICATOR_MODELS[0]}`;
  }
  return null;
}

/** `model` is a family alias the pinned CLI resolves itself (measured), or null. */
export function aliasProblem(model: string, what: string): string | null {
  if (!Object.hasOwn(MODEL_ALIASES, model)) return null;
  const resolved = MODEL_ALIASES[model]!.initModel;
  return `${what} '${model}' is an alias the CLI resolves on its own${resolved ? ` (the pinned CLI runs it as ${resolved})` : ""}, so the ledger would not name the model that ran; give the full model id${resolved ? `, e.g. ${resolved}` : ""}`;
}

export function chooseAdjudicatorModel(opts: { requested: string | undefined; answeringModel: string; forceSameModel: boolean }): AdjudicatorChoice {
  const requested = opts.requested?.trim();
  if (requested) {
    const problem = modelNameProblem(requested, "STUDY_ADJUDICATOR_MODEL");
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
