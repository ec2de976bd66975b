import { commandEnvironment } from "../../src/cli/config/flags.ts";
import { describe, expect, it } from "vitest";
import { checkExecution } from "../../src/cli/config/execution.ts";
import { runCommand } from "../../src/cli/run.ts";
import { UsageError } from "../../src/util/errors.ts";

const flags = { pilot: true, approveBudget: true, output: "/tmp/study-ledgers/pilot.json" };
const env = commandEnvironment("run", { STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" });
const roots = new Map([["ledgerlite", "/tmp/ledgerlite"]]);

describe("the run's per-attempt limit", () => {
  // contract: R9
  it("takes 0.10 USD per attempt when --attempt-budget-usd is not given", () => {
    const r = checkExecution(flags, env, "cli", ["ledgerlite"], roots);
    expect(r.problems).toEqual([]);
    expect(r.settings?.attemptBudgetUsd).toBe(0.1);
    expect(checkExecution({ ...flags, attemptBudgetUsd: "0.25" }, env, "cli", ["ledgerlite"], roots).settings?.attemptBudgetUsd).toBe(0.25);
  });

  // contract: R9
  it("refuses a per-attempt limit that is not a positive decimal, naming the flag", () => {
    for (const value of ["0", "-0.1", "ten cents", "1e-1", ""]) {
      const r = checkExecution({ ...flags, attemptBudgetUsd: value }, env, "cli", ["ledgerlite"], roots);
      expect(r.settings, value).toBeUndefined();
      expect(
        r.issues.filter((i) => i.about === "attempt-limit").map((i) => i.message),
        value,
      ).toEqual([expect.stringMatching(/^--attempt-budget-usd must be/)]);
    }
  });
});

describe("the run's mode", () => {
  // contract: R8
  it("refuses --pilot and --run together before reading anything", async () => {
    // The manifest does not exist: the refusal must come before it is read.
    const both = runCommand({ pilot: true, run: true, manifest: "/nonexistent/manifest.json", transport: "cli" });
    await expect(both).rejects.toThrow(UsageError);
    await expect(both).rejects.toThrow("--pilot and --run exclude each other; choose one");
  });
});
