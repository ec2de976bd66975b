/**
 * src/cli/config/environment.ts: every environment variable a command's code reads is declared in
 * its schema, parsed once at its entry, and listed by its --help from that declaration.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import type { Command } from "commander";
import { describe, expect, it } from "vitest";
import { leafCommands } from "../support/cli-commands.ts";
import { buildProgram } from "../../src/cli/main.ts";
import { COMMAND_FLAGS, commandEnvironment, type CommandName } from "../../src/cli/config/flags.ts";
import { needed, parseEnvironment, PROGRAM_VARIABLES, VARIABLES, valueOrRefuse, withDefaults, type VariableName } from "../../src/cli/config/environment.ts";
import { UsageError } from "../../src/util/errors.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { commandReads, envReads, srcFile } from "../support/env-reads.ts";

/** Each command's entry module: where its action lives (src/cli/main.ts, src/cli/session.ts). */
const ENTRY: Record<CommandName, string> = {
  run: "src/cli/run.ts",
  doctor: "src/cli/doctor.ts",
  plan: "src/cli/plan.ts",
  export: "src/cli/export.ts",
  calibrate: "src/cli/calibrate.ts",
  "image build": "src/cli/image.ts",
  "image probe": "src/cli/image.ts",
  classify: "src/cli/classify.ts",
  "ledger verify": "src/cli/ledger.ts",
  "ledger check": "src/cli/ledger.ts",
  schemas: "src/schemas/json-schemas.ts",
  adjudicate: "src/cli/adjudicate.ts",
  report: "src/cli/report.ts",
  "sessions start": "src/cli/session.ts",
  "sessions retry": "src/cli/session.ts",
  "sessions status": "src/session/store.ts",
  answer: "src/cli/answer.ts",
  resume: "src/cli/session.ts",
  demo: "src/cli/demo.ts",
};

/** Variables every program reads and no command configures: the user's home folder, the search path for programs. */
const PLATFORM = ["HOME", "PATH"];

/** One line per variable a command's code reads that its schema does not declare. */
function undeclared(read?: (file: string) => string): string[] {
  const found: string[] = [];
  for (const [name, schema] of Object.entries(COMMAND_FLAGS)) {
    const declared: readonly string[] = [...schema.environment, ...PROGRAM_VARIABLES, ...PLATFORM];
    for (const [variable, files] of commandReads(ENTRY[name as CommandName], read)) {
      if (!declared.includes(variable)) found.push(`${name}: ${variable} (read in ${files.join(", ")}) is not declared`);
    }
  }
  return found;
}

/** What `command --help` prints. */
function helpOf(command: Command): string {
  let out = "";
  command.configureOutput({ writeOut: (s) => (out += s) });
  command.outputHelp();
  return out;
}

/** The variables the `Environment:` section of a help text lists. */
const listed = (help: string): string[] => [...(help.split("\nEnvironment:\n")[1] ?? "").matchAll(/^ {2}([A-Z_][A-Z0-9_]*) /gm)].map((m) => m[1]!);

const srcFiles = (dir: string): string[] =>
  readdirSync(join(PROJECT_ROOT, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? srcFiles(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : []));

describe("the commands' environment variables", () => {
  // contract: R213
  it("every variable a command's code reads is declared in its schema", () => {
    expect(Object.keys(ENTRY).sort()).toEqual(Object.keys(COMMAND_FLAGS).sort());
    expect(undeclared()).toEqual([]);
    // The walk sees what it must: run's code reads the cache folder and the checkpoint hook.
    expect([...commandReads(ENTRY.run).keys()]).toEqual(expect.arrayContaining(["STUDY_RUNNER_CACHE", "CLAUDE_CODE_OAUTH_TOKEN"]));
  });

  // contract: R213
  it("the check fails on a variable read and not declared, wherever the command's modules read it", () => {
    const plant = (file: string, line: string) => (f: string) => readFileSync(f, "utf8") + (f === srcFile(file) ? `\n${line}\n` : "");
    expect(undeclared(plant("src/cli/plan.ts", "export const planted = process.env.STUDY_PLANTED;"))).toEqual(["plan: STUDY_PLANTED (read in src/cli/plan.ts) is not declared"]);
    // Deep in a module the command imports, through an `env` object and a named constant.
    const deep = plant("src/plan/plan.ts", 'const PLANTED_ENV = "STUDY_PLANTED_DEEP";\nexport const planted = (env: NodeJS.ProcessEnv) => env[PLANTED_ENV];');
    expect(undeclared(deep)).toContain("plan: STUDY_PLANTED_DEEP (read in src/plan/plan.ts) is not declared");
    // What reads nothing: a comment, a child's environment being written, a variable taken away.
    expect(envReads("// process.env.STUDY_A\nenv.STUDY_B = '1';\ndelete process.env.STUDY_C;\nconst x = { ...spec.env.STUDY_D };")).toEqual([]);
    expect(envReads("const a = process.env.STUDY_A ?? env?.STUDY_B; if (env.STUDY_C === '1') {}")).toEqual(["STUDY_A", "STUDY_B", "STUDY_C"]);
  });

  // contract: R214
  it("no command module reads process.env itself, and nothing in src sets a variable for the process", () => {
    const cli = srcFiles("src/cli").map((f) => [f, envReads(readFileSync(join(PROJECT_ROOT, f), "utf8"))] as const);
    // main.ts parses the program's own variables (PROGRAM_VARIABLES) before any command runs.
    expect(cli.filter(([f, reads]) => reads.length && f !== join("src", "cli", "main.ts")).map(([f, reads]) => `${f}: ${reads.join(", ")}`)).toEqual([]);
    const assigns = /process\.env(?:\.[A-Z_][A-Z0-9_]*|\[[^\]]+\])\s*(?:=(?!=)|\?\?=|\|\|=)/;
    const setters = srcFiles("src").filter((f) => assigns.test(readFileSync(join(PROJECT_ROOT, f), "utf8")));
    expect(setters.map((f) => relative(".", f))).toEqual([]);
    expect(assigns.test('process.env.STUDY_MODEL ??= "claude-haiku-5-5";')).toBe(true);
  });

  // contract: R213
  it("each command's --help lists the variables its schema declares, the test-only ones hidden, from the declarations", () => {
    const program = buildProgram(() => {});
    for (const [name, command] of leafCommands(program)) {
      const declared = COMMAND_FLAGS[name as CommandName].environment.filter((v) => !VARIABLES[v].testOnly);
      const help = helpOf(command);
      expect(listed(help), name).toEqual(declared);
      for (const v of declared) expect(help.replace(/\s+/g, " "), `${name} ${v}`).toContain(VARIABLES[v].meaning.split(" ").slice(0, 6).join(" "));
    }
    expect(listed(helpOf(program))).toEqual(["STUDY_RUNNER_DEBUG"]);
    expect(listed(helpOf(leafCommands(program).find(([n]) => n === "run")![1]))).not.toContain("STUDY_RUNNER_TEST_KILL_AT");
    // A variable declared for a command shows in its help with nothing else written.
    const plan = COMMAND_FLAGS.plan as { environment: readonly VariableName[] };
    const before = plan.environment;
    plan.environment = ["STUDY_RUNNER_CACHE"];
    try {
      expect(listed(helpOf(leafCommands(buildProgram(() => {})).find(([n]) => n === "plan")![1]))).toEqual(["STUDY_RUNNER_CACHE"]);
    } finally {
      plan.environment = before;
    }
  });

  // contract: R215
  it("a malformed variable is a problem naming it and the fix; an unset one is the command's to require", () => {
    const env = commandEnvironment("run", {
      STUDY_BUDGET_USD: "1e3",
      STUDY_INPUT_PRICE_USD_PER_MTOK: "0",
      ANTHROPIC_API_KEY: "sk-not-real\nsecond-line",
      STUDY_RUNNER_TEST_KILL_AT: "after-lunch\u001b[2J",
      STUDY_RUNNER_CACHE: "",
      STUDY_UNRELATED: "ignored",
    });
    expect(env.problems).toEqual({
      STUDY_BUDGET_USD: "STUDY_BUDGET_USD must be a positive decimal number such as 0.10",
      STUDY_INPUT_PRICE_USD_PER_MTOK: "STUDY_INPUT_PRICE_USD_PER_MTOK must be greater than 0, such as 0.10",
      ANTHROPIC_API_KEY: "ANTHROPIC_API_KEY contains a line break; export the key alone",
      STUDY_RUNNER_TEST_KILL_AT: `STUDY_RUNNER_TEST_KILL_AT=after-lunch\\u001b[2J is not a checkpoint; give one of before-reserve-write, after-reserve-write, before-container-start, during-attempt, after-attempt-before-write`,
    });
    // An empty folder counts as unset; a variable the command does not declare is not read.
    expect(env.values).toEqual({ STUDY_RUNNER_CACHE: undefined });
    expect(JSON.stringify(env)).not.toContain("sk-not-real");
    expect(() => valueOrRefuse(env, "STUDY_RUNNER_TEST_KILL_AT")).toThrow(UsageError);
    expect(needed(env, "STUDY_MODEL", "STUDY_MODEL is not set; export it")).toEqual({ problem: "STUDY_MODEL is not set; export it" });
    expect(needed(env, "STUDY_BUDGET_USD", "unused")).toEqual({ problem: "STUDY_BUDGET_USD must be a positive decimal number such as 0.10" });
    expect(needed(commandEnvironment("run", { STUDY_BUDGET_USD: " 2.5 " }), "STUDY_BUDGET_USD", "unused")).toEqual({ value: 2.5 });
    expect(parseEnvironment(["STUDY_RUNNER_DEBUG"], { STUDY_RUNNER_DEBUG: "1" }).values).toEqual({ STUDY_RUNNER_DEBUG: true });
  });

  // contract: R214
  it("a caller's defaults are values: they fill an unset variable and never hide a malformed one", () => {
    const defaults = { STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: 1 };
    expect(withDefaults(commandEnvironment("demo", {}), defaults).values).toEqual(defaults);
    expect(withDefaults(commandEnvironment("demo", { STUDY_BUDGET_USD: "3" }), defaults).values.STUDY_BUDGET_USD).toBe(3);
    const malformed = withDefaults(commandEnvironment("demo", { STUDY_BUDGET_USD: "-1" }), defaults);
    expect(malformed.values.STUDY_BUDGET_USD).toBeUndefined();
    expect(malformed.problems.STUDY_BUDGET_USD).toMatch(/^STUDY_BUDGET_USD must be/);
  });
});
