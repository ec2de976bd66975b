import { z } from "zod";
import { CHECKPOINTS } from "../../loop/loop.ts";
import { UsageError } from "../../util/errors.ts";
import { printable } from "../../util/printable.ts";
import { positiveDecimal } from "./fields.ts";

/**
 * Every environment variable a command reads, declared once: its name, what it means (the
 * commands' `--help` lists it from here) and its value's shape, a zod schema whose refusal names
 * the variable and the fix (contract R213). Each command's schema (flags.ts) names the variables
 * it reads; the command parses them once at its entry (`commandEnvironment`) and the rest of its
 * code receives the parsed values, never `process.env` (contract R214).
 */

/** One variable: what it means and its value's shape; `testOnly` ones are hidden from `--help` like the stand-in flags (contract R212). */
interface Variable<T> {
  meaning: string;
  schema: z.ZodType<T, string>;
  testOnly?: true;
}

const variable = <T>(meaning: string, schema: z.ZodType<T, string>, testOnly?: true): Variable<T> => ({ meaning, schema, ...(testOnly ? { testOnly } : {}) });

/** A name or a path, as given: the command checks what it names. */
const text = z.string();
/** A folder: an empty value counts as unset, as the shells' `${VAR:-default}` reads it. */
const folder = z.string().transform((v) => v || undefined);
/** A switch: set to anything but the empty string. */
const flag = z.string().transform((v) => v !== "");

/** The http transport's API key: read from the environment only, never echoed (contract R68). */
const apiKey = z
  .string()
  .transform((v) => v || undefined)
  .refine((v) => v === undefined || !/[\r\n]/.test(v), "ANTHROPIC_API_KEY contains a line break; export the key alone");

const checkpoint = z.string().refine((v): v is (typeof CHECKPOINTS)[number] => (CHECKPOINTS as readonly string[]).includes(v), {
  error: (issue) => `STUDY_RUNNER_TEST_KILL_AT=${printable(String(issue.input))} is not a checkpoint; give one of ${CHECKPOINTS.join(", ")}`,
});

export const VARIABLES = {
  STUDY_MODEL: variable("the model decided in the protocol, a full model id (e.g. claude-haiku-5-5); with --transport cli it must have a row in the runner's price table (CLI_PRICES)", text),
  STUDY_BUDGET_USD: variable("the approved cumulative cap of the run in USD (e.g. 1 for the pilot)", positiveDecimal("STUDY_BUDGET_USD")),
  ANTHROPIC_API_KEY: variable("--transport http only, read from the environment only and removed from it before any child starts; the cli transport never reads it", apiKey),
  STUDY_INPUT_PRICE_USD_PER_MTOK: variable(
    "--transport http: the upper input price in USD per million tokens, when --input-price-usd-per-mtok is not given",
    positiveDecimal("STUDY_INPUT_PRICE_USD_PER_MTOK"),
  ),
  STUDY_OUTPUT_PRICE_USD_PER_MTOK: variable(
    "--transport http: the upper output price in USD per million tokens, when --output-price-usd-per-mtok is not given",
    positiveDecimal("STUDY_OUTPUT_PRICE_USD_PER_MTOK"),
  ),
  STUDY_ADJUDICATION_BUDGET_USD: variable("the approved cumulative cap of the adjudication in USD", positiveDecimal("STUDY_ADJUDICATION_BUDGET_USD")),
  STUDY_ADJUDICATOR_MODEL: variable(
    "the adjudicator's model (default: a priced model different from the answering one); a full model id with a measured price row, different from the answering model unless --force-same-model",
    text,
  ),
  CLAUDE_CONFIG_DIR: variable("the folder holding the CLI login .credentials.json when --claude-config-dir is not given (default ~/.claude)", folder),
  CLAUDE_CODE_OAUTH_TOKEN: variable("--credentials gateway: a long-lived token made with `claude setup-token`, when --oauth-token-file is not given; removed from the environment once read", text),
  STUDY_RUNNER_CACHE: variable("the runner's cache folder: the installed CLI, calibration profiles, doc-bridge indexes (default $XDG_CACHE_HOME/study-runner)", folder),
  XDG_CACHE_HOME: variable("the user's cache folder, when STUDY_RUNNER_CACHE is not set (default ~/.cache)", folder),
  STUDY_RUNNER_DOC_INDEX: variable("the folder of the reference doc-bridge indexes (default doc-bridge-index in the runner's cache folder)", folder),
  DOCKER_HOST: variable("the Docker engine's address: unix:///path, tcp://host:port (TLS with DOCKER_TLS_VERIFY=1) or ssh://user@host (default: the engine's own socket)", folder),
  DOCKER_TLS_VERIFY: variable("set to 1 for TLS to a tcp:// DOCKER_HOST, with the client certificate in DOCKER_CERT_PATH", text),
  DOCKER_CERT_PATH: variable("the folder holding ca.pem (the CA that signed the engine's certificate), cert.pem and key.pem (a client certificate) for a TLS engine", folder),
  STUDY_RUNNER_DEBUG: variable("set to anything to print the stack of an internal error (exit 3)", flag),
  STUDY_RUNNER_TIMING_FILE: variable("benchmarks: a file each attempt appends its timing marks to (docs/performance.md)", folder, true),
  STUDY_RUNNER_TEST_KILL_AT: variable("tests: the checkpoint at which the runner kills itself with SIGKILL (docs/reliability.md)", checkpoint, true),
};

export type VariableName = keyof typeof VARIABLES;
type ValueOf<K extends VariableName> = z.output<(typeof VARIABLES)[K]["schema"]>;

/** A command's variables, parsed: each one set and well formed has its value; each one set and malformed, its problem. */
export interface Environment<N extends VariableName> {
  values: { [K in N]?: ValueOf<K> };
  problems: { [K in N]?: string };
}

/** The variables a program-wide part reads before any command runs (src/cli/main.ts). */
export const PROGRAM_VARIABLES = ["STUDY_RUNNER_DEBUG"] as const satisfies readonly VariableName[];

/**
 * `names` read from `source`, each with its schema. An unset variable has neither a value nor a
 * problem: whether it is required is the command's rule (commands.ts, execution.ts).
 */
export function parseEnvironment<N extends VariableName>(names: readonly N[], source: Readonly<Record<string, string | undefined>>): Environment<N> {
  const env: Environment<N> = { values: {}, problems: {} };
  for (const name of names) {
    const raw = source[name];
    if (raw === undefined) continue;
    const parsed = (VARIABLES[name].schema as z.ZodType<unknown, string>).safeParse(raw);
    if (parsed.success) (env.values as Record<string, unknown>)[name] = parsed.data;
    else (env.problems as Record<string, string>)[name] = parsed.error.issues[0]!.message;
  }
  return env;
}

/**
 * A variable the command needs: its value, or the problem to report, its own when it is set and
 * malformed, else `missing` (which says how to set it).
 */
export function needed<N extends VariableName, K extends N>(env: Environment<N>, name: K, missing: string): { value: NonNullable<ValueOf<K>> } | { problem: string } {
  const problem = env.problems[name];
  if (problem !== undefined) return { problem };
  const value = env.values[name];
  return value === undefined || value === null ? { problem: missing } : { value: value as NonNullable<ValueOf<K>> };
}

/** A variable whose malformed value would otherwise go unnoticed (a test hook): its value, or its problem refused at once (exit 2). */
export function valueOrRefuse<N extends VariableName, K extends N>(env: Environment<N>, name: K): ValueOf<K> | undefined {
  const problem = env.problems[name];
  if (problem !== undefined) throw new UsageError(problem);
  return env.values[name];
}

/**
 * `env` with `defaults` for the variables that are not set (a set, malformed one keeps its
 * problem): how a caller such as the demo gives its own values without touching `process.env`.
 */
export function withDefaults<N extends VariableName>(env: Environment<N>, defaults: { [K in N]?: ValueOf<K> }): Environment<N> {
  const values: Record<string, unknown> = { ...env.values };
  for (const [name, value] of Object.entries(defaults)) if (values[name] === undefined && !(name in env.problems)) values[name] = value;
  return { values: values as Environment<N>["values"], problems: env.problems };
}

/** The `Environment:` section of a command's `--help`, from the declarations above; empty when the command reads none a person sets. */
export function environmentHelp(names: readonly VariableName[]): string {
  const shown = names.filter((name) => !VARIABLES[name].testOnly);
  if (shown.length === 0) return "";
  const width = Math.max(...shown.map((n) => n.length)) + 2;
  const wrap = (line: string, room: number): string[] => {
    const out: string[] = [];
    let current = "";
    for (const word of line.split(" ")) {
      if (current && current.length + 1 + word.length > room) {
        out.push(current);
        current = word;
      } else current = current ? `${current} ${word}` : word;
    }
    return [...out, current];
  };
  const lines = shown.flatMap((name) => wrap(VARIABLES[name].meaning, 118 - width).map((part, i) => `  ${(i === 0 ? name : "").padEnd(width)}${part}`));
  return `\nEnvironment:\n${lines.join("\n")}`;
}
