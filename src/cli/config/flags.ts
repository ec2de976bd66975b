import { resolve } from "node:path";
import { z } from "zod";
import { UsageError } from "../../util/errors.ts";
import { testNumberSchema } from "./fields.ts";
import { parseEnvironment, type Environment, type VariableName } from "./environment.ts";
import { EXECUTION_VARIABLES } from "./execution.ts";

/**
 * One schema per command: every flag the command takes, as commander hands it over (a value,
 * a switch, a repeatable list, one of some choices), and nothing else (contract R210). Its
 * test-only flags, the hidden ones, are a section of their own, the stand-ins (contract R212):
 * the same schema for every command that takes them, each value validated here, parsed into one
 * `StandIns` object that a command without those flags never has. tests/unit/cli-config.test.ts
 * checks the commander declarations (src/cli/main.ts, src/cli/session.ts) against these schemas,
 * and each command parses its flags with its schema before anything else (`commandFlags`).
 * The environment variables each command reads are part of the same schema (`environment`),
 * declared with their meaning and shape in environment.ts (contract R213).
 * The values' own shapes and the rules between flags are in fields.ts and commands.ts.
 */

/** A flag that takes a value (`--flag <value>`). */
const value = z.string();
/** A switch (`--flag`). */
const toggle = z.boolean();
/** A repeatable flag or one that takes several values. */
const list = z.array(z.string());
const choice = <const T extends readonly [string, ...string[]]>(values: T) => z.enum(values);

const TRANSPORTS = ["cli", "http"] as const;
const CREDENTIALS = ["gateway", "login-copy"] as const;
/** `--sandbox-channel` (contract R244). */
const SANDBOX_CHANNELS = ["host-paths", "engine-api"] as const;

// ---------------------------------------------------------------------------------------------
// The stand-ins: the hidden flags that put a test double or a shorter bound in place.

/** A positive whole number of milliseconds or mebibytes: a hidden test bound. */
const bound = (flag: string) => testNumberSchema(flag);

/** Every hidden flag of every command, with its value's shape; each refusal names the flag. */
const STAND_IN_FLAGS = {
  /** The gateway's upstream origin instead of https://api.anthropic.com, and the CA it trusts. */
  testGatewayUpstream: value,
  testGatewayCa: value,
  /** The fake claude image's behaviour file and the folder it writes its records into. */
  fakeBehaviour: value,
  fakeRecords: value,
  /** A Messages API (the scripted one) on a host unix socket, reached through the in-container relay. */
  modelApiSocket: value,
  /** The http transport's Messages API base (loopback or the real API). */
  apiBaseUrl: value,
  /** Shorter bounds than the contract's, for the command's own tests (docs/reliability.md). */
  testAttemptTimeoutMs: bound("--test-attempt-timeout-ms"),
  testItemTimeoutMs: bound("--test-item-timeout-ms"),
  testLoginLockTimeoutMs: bound("--test-login-lock-timeout-ms"),
  testLoginLockStaleMs: bound("--test-login-lock-stale-ms"),
  testMemoryLimitMb: bound("--test-memory-limit-mb"),
  testHomeSizeMb: bound("--test-home-size-mb"),
};
export type StandInFlag = keyof typeof STAND_IN_FLAGS;

const StandInFlagsSchema = z.strictObject(STAND_IN_FLAGS).partial();

/** The stand-ins a command was given, parsed: resolved paths, bounds in milliseconds and bytes. */
export interface StandIns {
  gatewayUpstream?: { url: string; caFile?: string };
  fake?: { behaviourFile?: string; recordsDir?: string };
  modelApi?: { socketPath: string };
  apiBaseUrl?: string;
  timeoutMs?: number;
  loginLockTimeoutMs?: number;
  loginLockStaleMs?: number;
  memoryBytes?: number;
  homeBytes?: number;
}

const MIB = 1024 * 1024;

/**
 * The stand-in section of `flags`, parsed; undefined when none is given, as on every production
 * path (contract R212). Every problem is pushed onto `problems`, naming its flag.
 */
export function parseStandIns(flags: object, problems: string[]): StandIns | undefined {
  const given = Object.fromEntries(Object.entries(flags).filter(([key, v]) => key in STAND_IN_FLAGS && v !== undefined));
  if (Object.keys(given).length === 0) return undefined;
  const parsed = StandInFlagsSchema.safeParse(given);
  if (!parsed.success) {
    problems.push(...parsed.error.issues.map((issue) => issueMessage(issue, given)));
    return undefined;
  }
  const f = parsed.data;
  const timeoutMs = f.testAttemptTimeoutMs ?? f.testItemTimeoutMs;
  return {
    ...(f.testGatewayUpstream !== undefined ? { gatewayUpstream: { url: f.testGatewayUpstream, ...(f.testGatewayCa ? { caFile: resolve(f.testGatewayCa) } : {}) } } : {}),
    ...(f.fakeBehaviour || f.fakeRecords ? { fake: { behaviourFile: f.fakeBehaviour && resolve(f.fakeBehaviour), recordsDir: f.fakeRecords && resolve(f.fakeRecords) } } : {}),
    ...(f.modelApiSocket ? { modelApi: { socketPath: resolve(f.modelApiSocket) } } : {}),
    ...(f.apiBaseUrl !== undefined ? { apiBaseUrl: f.apiBaseUrl } : {}),
    ...(timeoutMs !== undefined ? { timeoutMs } : {}),
    ...(f.testLoginLockTimeoutMs !== undefined ? { loginLockTimeoutMs: f.testLoginLockTimeoutMs } : {}),
    ...(f.testLoginLockStaleMs !== undefined ? { loginLockStaleMs: f.testLoginLockStaleMs } : {}),
    ...(f.testMemoryLimitMb !== undefined ? { memoryBytes: f.testMemoryLimitMb * MIB } : {}),
    ...(f.testHomeSizeMb !== undefined ? { homeBytes: f.testHomeSizeMb * MIB } : {}),
  };
}

/** The raw shape of some stand-in flags: a value each, as commander hands it over. */
function standInSection<K extends StandInFlag>(keys: readonly K[]): Record<K, z.ZodOptional<z.ZodString>> {
  return Object.fromEntries(keys.map((key) => [key, value.optional()])) as Record<K, z.ZodOptional<z.ZodString>>;
}

// ---------------------------------------------------------------------------------------------
// The commands' flag schemas.

/** One command's flags (the visible ones and the names of its stand-ins) and the environment variables it reads. */
export interface CommandFlagSchema {
  schema: z.ZodObject;
  standIns: readonly StandInFlag[];
  environment: readonly VariableName[];
}

function command<V extends z.ZodRawShape, K extends StandInFlag, E extends VariableName = never>(visible: V, standIns: readonly K[] = [], environment: readonly E[] = []) {
  return { schema: z.strictObject({ ...visible, ...standInSection(standIns) }), standIns, environment };
}

const optional = <T extends z.ZodType>(schema: T) => schema.optional();

/** What every command that exports takes (docs/export.md, Limits). */
const EXPORT_LIMITS = { maxExportFiles: optional(value), maxExportBytes: optional(value) };
/** The money of `run` and `doctor` checked by execution.ts. */
const RUN_MONEY = { output: optional(value), attemptBudgetUsd: optional(value) };
const GATEWAY_STAND_INS = ["testGatewayUpstream", "testGatewayCa"] as const;
const FAKE_STAND_INS = ["fakeBehaviour", "fakeRecords"] as const;
const CREDENTIAL_FLAGS = { credentials: optional(choice(CREDENTIALS)), oauthTokenFile: optional(value) };

// The environment variables (environment.ts) by what reads them.
/** The runner's cache folder: the installed CLI, the calibration profiles (src/util/cache-dir.ts). */
const CACHE = ["STUDY_RUNNER_CACHE", "XDG_CACHE_HOME"] as const;
/** The Docker engine's address and, for one reached over TLS, its certificates (src/sandbox/docker.ts). */
const ENGINE = ["DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"] as const;
/** What running CLI units reads: the engine, the login, the gateway's token, the doc-bridge indexes, the cache, the benchmarks' timing marks. */
const UNITS = [...ENGINE, "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_OAUTH_TOKEN", "STUDY_RUNNER_DOC_INDEX", ...CACHE, "STUDY_RUNNER_TIMING_FILE"] as const;
/** What an execution of `run` reads (execution.ts). */
const EXECUTION = EXECUTION_VARIABLES;
const ADJUDICATION = ["STUDY_ADJUDICATION_BUDGET_USD", "STUDY_ADJUDICATOR_MODEL"] as const;
const KILL_AT = "STUDY_RUNNER_TEST_KILL_AT";

const RUN = command(
  {
    manifest: value,
    dryRun: optional(toggle),
    pilot: optional(toggle),
    run: optional(toggle),
    approveBudget: optional(toggle),
    transport: choice(TRANSPORTS),
    root: optional(list),
    ...EXPORT_LIMITS,
    ...RUN_MONEY,
    cliVersion: optional(value),
    image: optional(value),
    isolation: optional(choice(["standard", "strict", "offline"])),
    egressAllow: optional(list),
    runtime: optional(value),
    sandboxChannel: optional(choice(SANDBOX_CHANNELS)),
    cpus: optional(value),
    concurrency: optional(value),
    claudeConfigDir: optional(value),
    ...CREDENTIAL_FLAGS,
    docBridgeCommand: optional(value),
    quiet: optional(toggle),
    inputPriceUsdPerMtok: optional(value),
    outputPriceUsdPerMtok: optional(value),
  },
  [...GATEWAY_STAND_INS, ...FAKE_STAND_INS, "testAttemptTimeoutMs", "testLoginLockTimeoutMs", "testLoginLockStaleMs", "testMemoryLimitMb", "testHomeSizeMb", "modelApiSocket", "apiBaseUrl"],
  [...EXECUTION, ...UNITS, KILL_AT],
);

const DOCTOR = command(
  {
    manifest: value,
    pilot: optional(toggle),
    run: optional(toggle),
    transport: choice(TRANSPORTS),
    root: optional(list),
    ...EXPORT_LIMITS,
    ...RUN_MONEY,
    cliVersion: value,
    image: value,
    claudeConfigDir: optional(value),
    docBridgeCommand: optional(value),
    isolation: optional(choice(["standard", "strict", "offline"])),
    egressAllow: optional(list),
    runtime: optional(value),
    json: optional(toggle),
  },
  GATEWAY_STAND_INS,
  [...EXECUTION, ...ENGINE, "CLAUDE_CONFIG_DIR", "STUDY_RUNNER_DOC_INDEX", ...CACHE, "STUDY_RUNNER_TIMING_FILE"],
);

const ADJUDICATE = command(
  {
    ledger: optional(value),
    output: optional(value),
    approveBudget: optional(toggle),
    seed: optional(value),
    manifest: optional(value),
    root: optional(list),
    ...EXPORT_LIMITS,
    itemBudgetUsd: optional(value),
    forceSameModel: optional(toggle),
    image: optional(value),
    cliVersion: optional(value),
    isolation: optional(choice(["standard", "offline"])),
    runtime: optional(value),
    sandboxChannel: optional(choice(SANDBOX_CHANNELS)),
    claudeConfigDir: optional(value),
    ...CREDENTIAL_FLAGS,
    quiet: optional(toggle),
  },
  [...GATEWAY_STAND_INS, ...FAKE_STAND_INS, "testItemTimeoutMs"],
  [...ADJUDICATION, ...UNITS],
);

/** The flags of every session command that runs calls. */
const SESSION_RUNTIME = {
  claudeConfigDir: optional(value),
  isolation: optional(value),
  credentials: optional(value),
  oauthTokenFile: optional(value),
  sandboxChannel: optional(choice(SANDBOX_CHANNELS)),
  quiet: optional(toggle),
};
const SESSION_STAND_INS = ["modelApiSocket", ...FAKE_STAND_INS, "testLoginLockStaleMs"] as const;

const SESSIONS_START = command(
  {
    manifest: optional(value),
    root: optional(list),
    output: optional(value),
    image: optional(value),
    model: optional(value),
    capUsd: optional(value),
    callBudgetUsd: optional(value),
    sessionBudgetUsd: optional(value),
    cliVersion: optional(value),
    runtime: optional(value),
    ...SESSION_RUNTIME,
  },
  SESSION_STAND_INS,
  ["STUDY_MODEL", ...UNITS, KILL_AT],
);
const SESSIONS_RETRY = command({ manifest: optional(value), ...SESSION_RUNTIME }, SESSION_STAND_INS, UNITS);
const RESUME = command({ manifest: optional(value), ...SESSION_RUNTIME }, SESSION_STAND_INS, [...UNITS, KILL_AT]);

/** Every command's flag schema, by its words on the command line. */
export const COMMAND_FLAGS = {
  run: RUN,
  doctor: DOCTOR,
  plan: command({ manifest: value, pilot: optional(toggle), json: optional(toggle) }),
  export: command({ manifest: value, root: list, repository: value, out: value, ...EXPORT_LIMITS }),
  "image build": command({ install: optional(toggle), claudeBinary: optional(value), fake: optional(toggle), version: optional(value) }, [], [...ENGINE, ...CACHE]),
  "image probe": command({}, [], [...ENGINE, ...CACHE]),
  calibrate: command({ cliVersion: value, quiet: optional(toggle) }, [], UNITS),
  classify: command(
    {
      arm: optional(value),
      model: optional(value),
      tools: optional(value),
      cliVersion: optional(value),
      exitCode: optional(value),
      timedOut: optional(toggle),
      truncated: optional(toggle),
    },
    [],
    CACHE,
  ),
  "ledger verify": command({ adjudication: optional(value), manifest: optional(value), profile: optional(value), report: optional(value), digest: optional(value), json: optional(toggle) }, [], CACHE),
  "ledger check": command({ json: optional(toggle) }, [], CACHE),
  schemas: command({ write: optional(value) }),
  adjudicate: ADJUDICATE,
  report: command({
    ledger: optional(value),
    adjudication: optional(value),
    manifest: optional(value),
    format: optional(choice(["markdown", "json", "html", "inspect"])),
    outDir: optional(value),
    out: optional(value),
    private: optional(toggle),
    seed: optional(value),
    effect: optional(list),
  }),
  "sessions start": SESSIONS_START,
  "sessions retry": SESSIONS_RETRY,
  "sessions status": command({}),
  answer: command({ text: optional(value), file: optional(value) }),
  resume: RESUME,
  demo: command(
    {
      workdir: optional(value),
      pilot: optional(toggle),
      realCli: optional(toggle),
      cliVersion: optional(value),
      sessions: optional(toggle),
      concurrency: optional(value),
      runtime: optional(value),
      sandboxChannel: optional(choice(SANDBOX_CHANNELS)),
      quiet: optional(toggle),
    },
    [],
    ["STUDY_MODEL", "STUDY_BUDGET_USD", ...ADJUDICATION, ...UNITS],
  ),
} satisfies Record<string, CommandFlagSchema>;

export type CommandName = keyof typeof COMMAND_FLAGS;
/** A command's flags as its schema accepts them (what commander hands over, or a caller such as the demo passes). */
export type FlagsOf<C extends CommandName> = z.infer<(typeof COMMAND_FLAGS)[C]["schema"]>;
/** The environment variables a command reads, parsed (environment.ts). */
export type EnvOf<C extends CommandName> = Environment<(typeof COMMAND_FLAGS)[C]["environment"][number]>;

/**
 * The variables `command` declares, read from `source` (the process's environment at the
 * command's entry) and parsed once (contract R214); the rest of the command receives these values.
 */
export function commandEnvironment<C extends CommandName>(name: C, source: Readonly<Record<string, string | undefined>> = process.env): EnvOf<C> {
  return parseEnvironment(COMMAND_FLAGS[name].environment as readonly VariableName[], source) as EnvOf<C>;
}

/** `maxExportFiles` → `--max-export-files`. */
export const flagName = (key: PropertyKey): string => `--${String(key).replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;

/** One zod issue as a problem naming the flag: a value check says it itself; a shape's own message is prefixed with the flag. */
function issueMessage(issue: z.core.$ZodIssue, given: object): string {
  if (issue.code === "unrecognized_keys") return issue.keys.map((key) => `${flagName(key)} is not a flag of this command; see its --help`).join("\n");
  const flag = issue.path.length ? flagName(issue.path[0]!) : "the flags";
  if (issue.code === "custom") return issue.message;
  if (issue.code === "invalid_value") return `${flag} must be one of ${issue.values.map(String).join(", ")}`;
  if (issue.code === "invalid_type" && (given as Record<PropertyKey, unknown>)[issue.path[0] ?? ""] === undefined) return `${flag} is required`;
  if (issue.code === "invalid_type" && issue.expected === "boolean") return `${flag} is a switch: pass ${flag} alone, without a value`;
  if (issue.code === "invalid_type" && issue.expected === "array") return `${flag} takes a list: pass ${flag} <value> once for each value`;
  return `${flag} takes one value: pass ${flag} <value> (see --help)`;
}

/**
 * `command`'s flags, checked against its schema before anything else: an unknown flag, a value
 * where a switch belongs, or a choice not offered is refused naming the flag (exit 2).
 */
export function commandFlags<C extends CommandName>(name: C, flags: object): FlagsOf<C> {
  const parsed = COMMAND_FLAGS[name].schema.safeParse(flags);
  if (parsed.success) return parsed.data as FlagsOf<C>;
  const problems = parsed.error.issues.flatMap((issue) => issueMessage(issue, flags).split("\n"));
  throw new UsageError(problems.join("\n"), problems);
}
