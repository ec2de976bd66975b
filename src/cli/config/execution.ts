import { resolve } from "node:path";
import { positiveDecimal } from "./fields.ts";
import { needed, type Environment } from "./environment.ts";
import { modelProblem, type ModelNeeds } from "../../cost/models.ts";
import type { Transport } from "../../terms/terms.ts";

/**
 * What executing a study needs of the `run` command's flags and environment (the run and the
 * doctor both ask): every problem at once, each with the flag or variable it concerns and the fix.
 * The rest of `run`'s flags is parsed in commands.ts; this module holds what the doctor shares
 * (src/doctor imports it).
 */

export const DEFAULT_ATTEMPT_BUDGET_USD = 0.1;

/** The variables an execution of `run` reads (and the doctor checks): the model, the cap, the http transport's key and prices. */
export const EXECUTION_VARIABLES = ["STUDY_MODEL", "STUDY_BUDGET_USD", "ANTHROPIC_API_KEY", "STUDY_INPUT_PRICE_USD_PER_MTOK", "STUDY_OUTPUT_PRICE_USD_PER_MTOK"] as const;
/** Those variables, parsed at the command's entry (environment.ts). */
export type ExecutionEnvironment = Environment<(typeof EXECUTION_VARIABLES)[number]>;

export interface RawRunFlags {
  manifest?: string;
  dryRun?: boolean;
  pilot?: boolean;
  run?: boolean;
  approveBudget?: boolean;
  transport?: string;
  root?: string[];
  output?: string;
  attemptBudgetUsd?: string;
  cliVersion?: string;
  image?: string;
  inputPriceUsdPerMtok?: string;
  outputPriceUsdPerMtok?: string;
}

/**
 * What the study's model (STUDY_MODEL) must be: set, a full model id, and with the CLI transport
 * priced by the runner's own table (it cross-checks the CLI's cost against it); the http transport
 * prices with the protocol's upper prices given as flags.
 */
export function studyModelNeeds(transport: Transport): ModelNeeds {
  return {
    what: "STUDY_MODEL",
    missing: "STUDY_MODEL is not set; export the model decided in the protocol, e.g. STUDY_MODEL=claude-haiku-5-5",
    fullId: true,
    ...(transport === "cli" ? { priced: "attempt" as const } : {}),
  };
}

/** One problem of `checkExecution`, tagged with what it concerns (doctor shows each on its own line). */
export interface ExecutionIssue {
  about: "mode" | "approval" | "model" | "cap" | "attempt-limit" | "root" | "output" | "http";
  message: string;
}

export interface ExecutionSettings {
  model: string;
  capUsd: number;
  attemptBudgetUsd: number;
  output: string;
  apiKey?: string;
  inputPriceUsdPerMtok?: number;
  outputPriceUsdPerMtok?: number;
}

/**
 * What execution (not a dry run) needs before anything happens. Returns every problem,
 * each naming the missing flag or variable.
 */
export function checkExecution(
  flags: RawRunFlags,
  env: ExecutionEnvironment,
  transport: Transport,
  plannedRepositories: readonly string[],
  roots: ReadonlyMap<string, string>,
): { settings?: ExecutionSettings; problems: string[]; issues: ExecutionIssue[]; parsed: Partial<Pick<ExecutionSettings, "model" | "capUsd" | "attemptBudgetUsd">> } {
  const problems: string[] = [];
  const issues: ExecutionIssue[] = [];
  const add = (about: ExecutionIssue["about"], message: string) => {
    problems.push(message);
    issues.push({ about, message });
  };
  if (!flags.pilot && !flags.run) add("mode", "choose what to run: --pilot (the first task, both scenarios, one repetition) or --run (the full study)");
  if (!flags.approveBudget) add("approval", "--approve-budget is required to spend money; pass it once the budget (STUDY_BUDGET_USD) is approved");
  const model = env.values.STUDY_MODEL?.trim();
  const modelRefused = modelProblem(model, studyModelNeeds(transport));
  if (modelRefused) add("model", modelRefused);
  const cap = needed(env, "STUDY_BUDGET_USD", "STUDY_BUDGET_USD is not set; export the approved cumulative cap in USD, e.g. STUDY_BUDGET_USD=1");
  if ("problem" in cap) add("cap", cap.problem);
  const attempt = positiveDecimal("--attempt-budget-usd").safeParse(flags.attemptBudgetUsd ?? String(DEFAULT_ATTEMPT_BUDGET_USD));
  if (!attempt.success) add("attempt-limit", attempt.error.issues[0]!.message);
  for (const repo of plannedRepositories) {
    if (!roots.has(repo)) add("root", `--root ${repo}=<path> is missing; every planned repository needs its checkout`);
  }
  if (!flags.output) add("output", "--output PATH is required: a new file outside every checkout and outside this project, for the private ledger");

  let apiKey: string | undefined;
  let inputPrice: number | undefined;
  let outputPrice: number | undefined;
  if (transport === "http") {
    const key = needed(env, "ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY is not set; the http transport reads the key from the environment only (or pass --transport cli to use the CLI's own login)");
    if ("problem" in key) add("http", key.problem);
    else apiKey = key.value;
    inputPrice = upperPrice("input", flags.inputPriceUsdPerMtok, env, "STUDY_INPUT_PRICE_USD_PER_MTOK", (message) => add("http", message));
    outputPrice = upperPrice("output", flags.outputPriceUsdPerMtok, env, "STUDY_OUTPUT_PRICE_USD_PER_MTOK", (message) => add("http", message));
  }
  const capUsd = "value" in cap ? cap.value : undefined;
  const parsed = { model: model || undefined, capUsd, attemptBudgetUsd: attempt.success ? attempt.data : undefined };
  if (problems.length || !model || capUsd === undefined || !attempt.success || !flags.output) return { problems, issues, parsed };
  return {
    problems,
    issues,
    parsed,
    settings: {
      model,
      capUsd,
      attemptBudgetUsd: attempt.data,
      output: resolve(flags.output),
      apiKey,
      inputPriceUsdPerMtok: inputPrice,
      outputPriceUsdPerMtok: outputPrice,
    },
  };
}

/**
 * An upper price of the http transport: the flag, else its variable; every problem names both,
 * the variable's own when it is set and malformed.
 */
function upperPrice(
  side: "input" | "output",
  given: string | undefined,
  env: ExecutionEnvironment,
  variable: "STUDY_INPUT_PRICE_USD_PER_MTOK" | "STUDY_OUTPUT_PRICE_USD_PER_MTOK",
  add: (message: string) => void,
): number | undefined {
  const flag = `--${side}-price-usd-per-mtok`;
  const what = `the upper ${side} price in USD per million tokens`;
  if (given === undefined) {
    const fromEnv = needed(env, variable, `${flag} (or ${variable}) is not set: pass ${flag} <usd> or export ${variable}`);
    if ("problem" in fromEnv) add(`${fromEnv.problem}: ${what}`);
    return "value" in fromEnv ? fromEnv.value : undefined;
  }
  const parsed = positiveDecimal(`${flag} (or ${variable})`).safeParse(given);
  if (!parsed.success) add(`${parsed.error.issues[0]!.message}: ${what}`);
  return parsed.success ? parsed.data : undefined;
}
