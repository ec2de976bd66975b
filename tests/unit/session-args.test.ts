/**
 * A session call's command line is the session-harness notes' line (contract R127), and its result
 * must name the session the runner passed (contract R126).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { SESSION_TOOLS, sessionArguments } from "../../src/session/args.ts";
import { sessionIdProblem } from "../../src/session/run.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

const ID = "0b6f4a53-2f55-4c1e-9d0e-6a1f2b3c4d5e";
const HELP = readFileSync(join(PROJECT_ROOT, "tests/fixtures/claude-2.1.296-help.txt"), "utf8");

/** The notes' line: `--model sonnet --restricted --tools/--allowedTools Read,Edit,Write,Glob,Grep; --permission-mode acceptEdits --permission-prompts none --strict-mcp-config --max-budget-usd 0.5`. */
const SEED_FLAGS = ["-p", "--json-schema", "--model", "--restricted", "--tools", "--allowedTools", "--permission-mode", "--permission-prompts", "--strict-mcp-config", "--max-budget-usd"] as const;
const SEED_VALUES: Record<string, string> = {
  "--tools": "Read,Edit,Write,Glob,Grep",
  "--allowedTools": "Read,Edit,Write,Glob,Grep",
  "--permission-mode": "acceptEdits",
  "--permission-prompts": "none",
};

describe("a session call's arguments", () => {
  // contract: R127
  it("hold every flag of the notes' command line, --restricted included, each one the pinned binary's help lists", () => {
    for (const resume of [false, true]) {
      const argv = sessionArguments({ model: "claude-haiku-5-5", maxBudgetUsd: 0.2, sessionId: ID, resume });
      for (const flag of SEED_FLAGS) {
        expect(argv, flag).toContain(flag);
        expect(HELP, `the pinned help lists ${flag}`).toMatch(new RegExp(`^ {2}(?:-\\w, )?${flag}\\b`, "m"));
      }
      for (const [flag, value] of Object.entries(SEED_VALUES)) expect(argv[argv.indexOf(flag) + 1], flag).toBe(value);
      expect(argv[argv.indexOf(resume ? "--resume" : "--session-id") + 1]).toBe(ID);
      expect([...SESSION_TOOLS].sort()).toEqual(SEED_VALUES["--tools"]!.split(",").sort());
    }
  });
});

describe("the session id a call's result reports", () => {
  // contract: R126
  it("must be the one the runner passed: a missing or another one is a problem, no result leaves it to the transcript check", () => {
    expect(sessionIdProblem(true, ID, ID)).toBeNull();
    expect(sessionIdProblem(true, null, ID)).toBe(`the result has no session_id; the session's is ${ID}`);
    expect(sessionIdProblem(true, "00000000-0000-4000-8000-000000000000", ID)).toBe(`the result's session_id 00000000-0000-4000-8000-000000000000 is not the session's ${ID}`);
    expect(sessionIdProblem(false, null, ID)).toBeNull();
  });
});
