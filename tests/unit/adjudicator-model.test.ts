import { commandEnvironment } from "../../src/cli/config/flags.ts";
import { describe, expect, it } from "vitest";
import { chooseAdjudicatorModel, DEFAULT_ADJUDICATOR_MODELS, modelProblem } from "../../src/cost/models.ts";
import { adjudicatorSentence } from "../../src/report/adjudicator.ts";
import { checkExecution } from "../../src/cli/config/execution.ts";
import { pricesFor } from "../../src/cost/prices.ts";

describe("the adjudicator's model", () => {
  it("defaults to a different model with a measured price row", () => {
    for (const answering of ["claude-haiku-5-5", DEFAULT_ADJUDICATOR_MODELS[0]]) {
      const c = chooseAdjudicatorModel({ requested: undefined, answeringModel: answering, forceSameModel: false });
      expect("model" in c && c.model).not.toBe(answering);
      expect(c).toMatchObject({ source: "default" });
      expect(pricesFor((c as { model: string }).model)).toBeDefined();
    }
  });

  it("--force-same-model alone adjudicates with the answering model; an explicit equal model needs it", () => {
    expect(chooseAdjudicatorModel({ requested: undefined, answeringModel: "claude-haiku-5-5", forceSameModel: true })).toEqual({ model: "claude-haiku-5-5", source: "--force-same-model" });
    expect(chooseAdjudicatorModel({ requested: "claude-haiku-5-5", answeringModel: "claude-haiku-5-5", forceSameModel: false })).toMatchObject({
      problem: expect.stringMatching(/is the answering run's model; .*--force-same-model/),
    });
    expect(chooseAdjudicatorModel({ requested: "claude-opus-5", answeringModel: "claude-haiku-5-5", forceSameModel: false })).toEqual({ model: "claude-opus-5", source: "STUDY_ADJUDICATOR_MODEL" });
  });

  it("refuses aliases and unpriced names, naming the fix", () => {
    expect(chooseAdjudicatorModel({ requested: "opus", answeringModel: "claude-haiku-5-5", forceSameModel: false })).toMatchObject({
      problem: expect.stringMatching(/'opus' is an alias .* runs it as claude-opus-5-5.*give the full model id/),
    });
    expect(chooseAdjudicatorModel({ requested: "claude-opus-4-1", answeringModel: "claude-haiku-5-5", forceSameModel: false })).toMatchObject({
      problem: expect.stringMatching(/no row in the measured price table/),
    });
    expect(modelProblem("claude-haiku-5-5", { what: "STUDY_MODEL", fullId: true })).toBeNull();
  });

  it("STUDY_MODEL may not be an alias", () => {
    const r = checkExecution({ pilot: true, approveBudget: true }, commandEnvironment("run", { STUDY_MODEL: "haiku", STUDY_BUDGET_USD: "1" }), "cli", [], new Map());
    expect(r.problems.join("\n")).toMatch(/STUDY_MODEL 'haiku' is an alias the CLI resolves on its own \(the pinned CLI runs it as claude-haiku-5-5\)/);
  });

  it("every report says which model adjudicated, and calls the same model a departure from the protocol", () => {
    expect(adjudicatorSentence({ model: "claude-sonnet-5-5", answeringModel: "claude-haiku-5-5", sameModel: false })).toEqual({
      text: "Adjudicated by claude-sonnet-5-5, a different model from the answering model claude-haiku-5-5, as the protocol asks.",
      departure: false,
    });
    expect(adjudicatorSentence({ model: "claude-haiku-5-5", answeringModel: "claude-haiku-5-5", sameModel: true }).text).toMatch(/^Departure from the protocol/);
  });
});
