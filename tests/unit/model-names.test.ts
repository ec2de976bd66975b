/**
 * Every check of a model name goes through one function, src/cost/models.ts's modelProblem:
 * each refusal below is one of its rules, and each caller asks for the rules its use needs.
 */
import { commandEnvironment } from "../../src/cli/config/flags.ts";
import { describe, expect, it } from "vitest";
import { modelProblem, pricedModels } from "../../src/cost/models.ts";
import { pricesFor } from "../../src/cost/prices.ts";
import { cliArguments } from "../../src/claude/args.ts";
import { sessionArguments } from "../../src/session/args.ts";
import { checkExecution } from "../../src/cli/config/execution.ts";
import { parseSessionStartFlags } from "../../src/cli/config/commands.ts";
import { chooseAdjudicatorModel } from "../../src/cost/models.ts";
import { UsageError } from "../../src/util/errors.ts";

const PRICED = pricedModels()[0]!;
const UNPRICED = "claude-unpriced-9";

describe("modelProblem: one refusal per rule", () => {
  it("has test models that are what their names say", () => {
    expect(pricesFor(PRICED)).toBeDefined();
    expect(pricesFor(UNPRICED)).toBeUndefined();
  });

  it("refuses an absent or blank name only when the use says what to do instead", () => {
    expect(modelProblem(undefined, { what: "--model" })).toBeNull();
    expect(modelProblem("  ", { what: "--model", missing: "--model or STUDY_MODEL is required" })).toBe("--model or STUDY_MODEL is required");
  });

  it("refuses a name the CLI would read as a flag when it becomes a `claude` argument", () => {
    expect(modelProblem("--dangerously-skip-permissions", { what: "the model", argument: true })).toBe("the model '--dangerously-skip-permissions' is not a model name such as claude-haiku-5-5");
    expect(modelProblem("claude-haiku-5-5 --verbose", { what: "the model", argument: true })).toMatch(/is not a model name/);
    expect(modelProblem(PRICED, { what: "the model", argument: true })).toBeNull();
  });

  it("refuses a family alias where the ledger must name the model that ran, naming the full id", () => {
    expect(modelProblem("haiku", { what: "STUDY_MODEL", fullId: true })).toMatch(
      /^STUDY_MODEL 'haiku' is an alias the CLI resolves on its own \(the pinned CLI runs it as claude-haiku-5-5\).*give the full model id, e.g. claude-haiku-5-5$/,
    );
    expect(modelProblem("haiku", { what: "STUDY_MODEL" })).toBeNull();
  });

  it("refuses a model without a price row, in the wording of the use: an attempt's or the adjudicator's", () => {
    expect(modelProblem(UNPRICED, { what: "STUDY_MODEL", priced: "attempt" })).toMatch(
      new RegExp(`^STUDY_MODEL=${UNPRICED} has no row in the runner's price table \\(CLI_PRICES\\).*invalid-cost.*set STUDY_MODEL to a model the runner can price: .*${PRICED}`),
    );
    expect(modelProblem(UNPRICED, { what: "STUDY_ADJUDICATOR_MODEL", priced: "adjudicator" })).toMatch(/^STUDY_ADJUDICATOR_MODEL 'claude-unpriced-9' has no row in the measured price table/);
    expect(modelProblem(PRICED, { what: "STUDY_MODEL", priced: "attempt" })).toBeNull();
  });
});

describe("each caller goes through modelProblem", () => {
  const env = (model: string) => commandEnvironment("run", { STUDY_MODEL: model, STUDY_BUDGET_USD: "1" });
  const run = (model: string, transport: "cli" | "http") =>
    checkExecution({ pilot: true, approveBudget: true, output: "/tmp/x.json" }, env(model), transport, [], new Map()).issues.filter((i) => i.about === "model");

  it("the study's STUDY_MODEL: an alias refused on both transports, an unpriced one on the cli transport only", () => {
    expect(run("haiku", "http")).toHaveLength(1);
    expect(run(UNPRICED, "cli")[0]!.message).toMatch(/has no row in the runner's price table/);
    expect(run(UNPRICED, "http")).toEqual([]);
  });

  it("the adjudicator's STUDY_ADJUDICATOR_MODEL: an alias and an unpriced model", () => {
    expect(chooseAdjudicatorModel({ requested: "sonnet", answeringModel: PRICED, forceSameModel: false })).toMatchObject({ problem: expect.stringMatching(/'sonnet' is an alias/) });
    expect(chooseAdjudicatorModel({ requested: UNPRICED, answeringModel: PRICED, forceSameModel: false })).toMatchObject({ problem: expect.stringMatching(/no row in the measured price table/) });
  });

  it("the sessions' --model: required", () => {
    const flags = { manifest: "m.json", output: "o.json", image: "i", capUsd: "1", callBudgetUsd: "0.5", sessionBudgetUsd: "1" };
    expect(() => parseSessionStartFlags(flags, commandEnvironment("sessions start", {}))).toThrow("--model or STUDY_MODEL is required");
    expect(parseSessionStartFlags(flags, commandEnvironment("sessions start", { STUDY_MODEL: PRICED })).model).toBe(PRICED);
    expect(parseSessionStartFlags({ ...flags, model: "claude-other-1" }, commandEnvironment("sessions start", { STUDY_MODEL: PRICED })).model).toBe("claude-other-1");
  });

  it("every `claude` command line: an attempt's and a session call's", () => {
    const bad = "-p";
    expect(() => cliArguments({ arm: "repository", model: bad, maxBudgetUsd: 0.1, prompt: "q", deniedMcpTools: [] })).toThrow(UsageError);
    expect(() => sessionArguments({ model: bad, maxBudgetUsd: 0.1, sessionId: "00000000-0000-4000-8000-000000000000", resume: false })).toThrow("the model '-p' is not a model name");
  });
});
