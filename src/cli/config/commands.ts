import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { randomInt } from "node:crypto";
import type { UpstreamOptions } from "../../gateway/gateway.ts";
import type { ExportLimits } from "../../export/export.ts";
import type { IsolationProfile } from "../../isolation/profile.ts";
import { parseEgressAllow } from "../../isolation/policy.ts";
import { checkOutputPath } from "../../ledger/store.ts";
import { modelProblem } from "../../cost/models.ts";
import type { Mode } from "../../plan/plan.ts";
import { UsageError } from "../../util/errors.ts";
import { PROJECT_ROOT } from "../../util/paths.ts";
import { checkExecution, DEFAULT_ATTEMPT_BUDGET_USD, type ExecutionSettings } from "./execution.ts";
import { parseStandIns, type EnvOf, type FlagsOf, type StandIns } from "./flags.ts";
import { needed } from "./environment.ts";
import { checkRuntimeName, collecting, parseConcurrency, parseCpus, parseEngineCommand, parseExportLimits, parseRoots, positiveDecimal, refuse, SeedSchema, take } from "./fields.ts";

/**
 * One home for the command line's options: each command's flags (checked first against its
 * schema, flags.ts) and the environment variables it reads are parsed here, once, into a typed config.
 * The value shapes are zod schemas (like src/manifest/schema.ts); every refusal names the flag
 * or variable and the fix, and a command reports all of its problems at once (exit 2) before
 * anything starts. What the doctor shares with `run` (money, model, output) is checkExecution in
 * execution.ts; the value shapes are in fields.ts; model names are checked by src/cost/models.ts.
 */

/** Adds checkOutputPath's problems for a new private file (`what`) outside every checkout and the project. */
async function checkNewPrivateFile(output: string, roots: ReadonlyMap<string, string>, problems: string[], what?: string): Promise<void> {
  problems.push(...(await checkOutputPath(output, { checkouts: [...roots.values()], projectRoot: PROJECT_ROOT }, what)));
}

// ---------------------------------------------------------------------------------------------
// Credentials and test endpoints: the same flags on `run --transport cli` and `adjudicate`.

/** The flags that choose how CLI units reach the model API, and the gateway's and the fake image's stand-ins. */
export type CredentialFlags = Pick<FlagsOf<"adjudicate">, "credentials" | "oauthTokenFile" | "testGatewayUpstream" | "testGatewayCa" | "fakeBehaviour" | "fakeRecords">;

/** The parsed credential flags: resolved paths, the upstream with its CA read, the fake image's files. */
export interface CredentialOptions {
  credentials: "gateway" | "login-copy";
  oauthTokenFile?: string;
  gatewayUpstream?: UpstreamOptions;
  fake?: { behaviourFile?: string; recordsDir?: string };
}

/** The rules between the credential flags; `credentials` is the mode in force (given or defaulted). */
function checkCredentialFlags(flags: CredentialFlags, credentials: "gateway" | "login-copy", problems: string[]): void {
  if (credentials !== "gateway" && (flags.oauthTokenFile !== undefined || flags.testGatewayUpstream !== undefined))
    problems.push("--oauth-token-file and --test-gateway-upstream apply to --credentials gateway only");
  if (flags.testGatewayCa !== undefined && flags.testGatewayUpstream === undefined) problems.push("--test-gateway-ca needs --test-gateway-upstream");
}

/** The test upstream of the gateway with the CA it trusts read (call it once every flag was accepted). */
export async function gatewayUpstreamOf(standIns: StandIns | undefined): Promise<UpstreamOptions | undefined> {
  const upstream = standIns?.gatewayUpstream;
  if (!upstream) return undefined;
  return { url: upstream.url, ...(upstream.caFile ? { ca: await readFile(upstream.caFile, "utf8") } : {}) };
}

/** The credential flags as options: the token file resolved, the stand-ins' test upstream (its CA read) and fake image files. */
export async function credentialOptions(flags: Pick<CredentialFlags, "oauthTokenFile">, credentials: "gateway" | "login-copy", standIns: StandIns | undefined): Promise<CredentialOptions> {
  const gatewayUpstream = await gatewayUpstreamOf(standIns);
  return {
    credentials,
    ...(flags.oauthTokenFile !== undefined ? { oauthTokenFile: resolve(flags.oauthTokenFile) } : {}),
    ...(gatewayUpstream ? { gatewayUpstream } : {}),
    ...(standIns?.fake ? { fake: standIns.fake } : {}),
    ...(standIns?.loginLockStaleMs !== undefined ? { loginLockStaleMs: standIns.loginLockStaleMs } : {}),
  };
}

// ---------------------------------------------------------------------------------------------
// `run`

/** `run`'s flags as its schema accepts them (flags.ts). */
export type RunFlags = FlagsOf<"run">;

/** `run`'s mode, checked before the manifest is read (contract R8). */
export function runMode(flags: Pick<RunFlags, "pilot" | "run">): Mode {
  if (flags.pilot && flags.run) throw new UsageError("--pilot and --run exclude each other; choose one");
  return flags.pilot ? "pilot" : "full";
}

/** The checkouts given (each a repository of the manifest) and the export limits: what a dry run and an execution both need. */
export function parseStudyInputs(flags: RunFlags, repositories: readonly string[]): { roots: Map<string, string>; exportLimits: ExportLimits } {
  const roots = parseRoots(flags.root);
  const unknown = [...roots.keys()].filter((name) => !repositories.includes(name));
  if (unknown.length) {
    throw new UsageError(unknown.map((n) => `--root ${n}=…: '${n}' is not a repository of the manifest (known: ${repositories.join(", ")})`).join("\n"));
  }
  return { roots, exportLimits: parseExportLimits(flags) };
}

/** A dry run given the model an execution would use answers what that execution would: an unpriced model is refused here too. */
export function checkDryRunModel(flags: RunFlags, env: EnvOf<"run">): void {
  const model = env.values.STUDY_MODEL?.trim();
  const unpriced = model && flags.transport === "cli" ? modelProblem(model, { what: "STUDY_MODEL", priced: "attempt" }) : null;
  if (unpriced) throw new UsageError(unpriced);
}

/** Everything an execution of `run` was given, parsed: the money and model (checkExecution), the containers, the credentials, the stand-ins. */
export interface RunExecution extends CredentialOptions, Omit<StandIns, "gatewayUpstream" | "fake"> {
  settings: ExecutionSettings;
  isolation: IsolationProfile;
  egressAllow?: string[];
  runtime?: string;
  cpus?: number;
  concurrency?: number;
  docBridgeCommand?: string[];
}

/**
 * The network flags: a model API on a unix socket is reached through the in-container relay,
 * with no network: offline, or strict when asked for (the proxy beside it).
 */
function parseNetwork(flags: RunFlags, credentials: "gateway" | "login-copy", problems: string[]): { isolation: IsolationProfile; egressAllow?: string[] } {
  const isolation = flags.modelApiSocket && flags.isolation !== "strict" ? "offline" : (flags.isolation ?? "standard");
  let egressAllow: string[] | undefined;
  if (flags.egressAllow !== undefined) {
    if (isolation !== "strict") problems.push("--egress-allow applies to --isolation strict only");
    else {
      try {
        egressAllow = parseEgressAllow(flags.egressAllow);
      } catch (err) {
        problems.push(...(err instanceof UsageError ? err.problems : [String(err)]));
      }
    }
  }
  if (flags.transport === "cli" && credentials === "gateway" && flags.egressAllow !== undefined && isolation === "strict") {
    problems.push(
      "--egress-allow has no effect with --credentials gateway (every attempt container has network none and no proxy; the gateway is its only way out); use --credentials login-copy for the strict profile's proxy",
    );
  }
  return { isolation, ...(egressAllow ? { egressAllow } : {}) };
}

/** The rules between `run`'s transport, credentials and test endpoints; returns the credential mode in force. */
function checkRunTransport(flags: RunFlags, problems: string[]): "gateway" | "login-copy" {
  if (flags.apiBaseUrl !== undefined && flags.transport !== "http") problems.push("--api-base-url applies to --transport http only");
  if (flags.transport !== "cli" && (flags.credentials !== undefined || flags.oauthTokenFile !== undefined)) problems.push("--credentials and --oauth-token-file apply to --transport cli only");
  // A Messages API socket given for tests is the direct route: it bypasses the gateway by design.
  const credentials = flags.credentials ?? (flags.modelApiSocket ? "login-copy" : "gateway");
  if (credentials === "gateway" && flags.modelApiSocket) problems.push("--model-api-socket reaches the API directly; use it with --credentials login-copy");
  checkCredentialFlags(flags, credentials, problems);
  if (flags.runtime !== undefined && flags.transport !== "cli") problems.push("--runtime applies to --transport cli only (the http transport runs no container)");
  return credentials;
}

/** The stand-ins' bounds that a run kind's config takes as they are. */
function standInBounds(standIns: StandIns | undefined): Pick<RunExecution, "timeoutMs" | "loginLockTimeoutMs" | "loginLockStaleMs" | "memoryBytes" | "homeBytes"> {
  if (!standIns) return {};
  const { timeoutMs, loginLockTimeoutMs, loginLockStaleMs, memoryBytes, homeBytes } = standIns;
  return Object.fromEntries(Object.entries({ timeoutMs, loginLockTimeoutMs, loginLockStaleMs, memoryBytes, homeBytes }).filter(([, v]) => v !== undefined));
}

/**
 * What an execution (not a dry run) of `run` needs, parsed once: every problem of the money,
 * the model, the mode, the checkouts of the `planned` repositories, the output and the flags'
 * rules is reported at once (UsageError, exit 2) before anything is reserved.
 */
export async function parseRunExecution(flags: RunFlags, env: EnvOf<"run">, planned: readonly string[], roots: ReadonlyMap<string, string>): Promise<RunExecution> {
  const { settings, problems } = checkExecution(flags, env, flags.transport, planned, roots);
  const credentials = checkRunTransport(flags, problems);
  const network = parseNetwork(flags, credentials, problems);
  checkRuntimeName(flags.runtime, problems);
  const cpus = parseCpus(flags.cpus, problems);
  const concurrency = parseConcurrency(flags.concurrency, flags.transport, problems);
  const standIns = parseStandIns(flags, problems);
  if (flags.output) await checkNewPrivateFile(flags.output, roots, problems);
  if (problems.length || !settings) throw new UsageError(problems.join("\n"), problems);
  const docBridgeCommand = parseEngineCommand(flags.docBridgeCommand);
  if (flags.transport === "http") (await import("../../transport/http/client.ts")).parseApiBaseUrl(standIns?.apiBaseUrl);
  return {
    settings,
    ...network,
    ...(flags.runtime !== undefined ? { runtime: flags.runtime } : {}),
    ...(cpus !== undefined ? { cpus } : {}),
    ...(concurrency !== undefined ? { concurrency } : {}),
    ...(docBridgeCommand ? { docBridgeCommand } : {}),
    ...(await credentialOptions(flags, credentials, standIns)),
    ...(standIns?.modelApi ? { modelApi: standIns.modelApi } : {}),
    ...(standIns?.apiBaseUrl !== undefined ? { apiBaseUrl: standIns.apiBaseUrl } : {}),
    ...standInBounds(standIns),
  };
}

// ---------------------------------------------------------------------------------------------
// `doctor`

/** `doctor`'s flags as its schema accepts them (flags.ts). */
export type DoctorFlags = FlagsOf<"doctor">;

/**
 * `doctor`'s flags as the doctor's input (src/doctor's DoctorInput, which this folder does not
 * import: the doctor imports execution.ts): the same values a run with these flags would parse.
 */
export function parseDoctorFlags(flags: DoctorFlags) {
  runMode(flags);
  const mode: Mode = flags.run ? "full" : "pilot";
  if (flags.egressAllow !== undefined && flags.isolation !== "strict") throw new UsageError("--egress-allow applies to --isolation strict only");
  if (flags.testGatewayCa !== undefined && flags.testGatewayUpstream === undefined) throw new UsageError("--test-gateway-ca needs --test-gateway-upstream");
  const problems: string[] = [];
  const standIns = parseStandIns(flags, problems);
  refuse(problems);
  return {
    manifest: flags.manifest,
    mode,
    transport: flags.transport,
    roots: parseRoots(flags.root),
    image: flags.image,
    expectedCliVersion: flags.cliVersion,
    claudeConfigDir: flags.claudeConfigDir,
    docBridgeCommand: parseEngineCommand(flags.docBridgeCommand),
    output: flags.output,
    attemptBudgetUsd: flags.attemptBudgetUsd,
    isolation: flags.isolation,
    egressAllow: flags.egressAllow !== undefined ? parseEgressAllow(flags.egressAllow) : undefined,
    runtime: flags.runtime,
    exportLimits: parseExportLimits(flags),
    standIns,
  };
}

// ---------------------------------------------------------------------------------------------
// `adjudicate`

/** `adjudicate`'s flags as its schema accepts them (flags.ts). */
export type AdjudicateFlags = FlagsOf<"adjudicate">;

export const DEFAULT_ITEM_BUDGET_USD = DEFAULT_ATTEMPT_BUDGET_USD;

/** What `adjudicate` was given, parsed as far as it can be without the ledger; `problems` lists every refusal so far. */
export interface AdjudicateOptions {
  problems: string[];
  /** The credential mode in force (given or the gateway); `credentialOptions` reads the rest once every problem is known. */
  credentials: "gateway" | "login-copy";
  capUsd?: number;
  itemBudgetUsd?: number;
  seed?: number;
  /** STUDY_ADJUDICATOR_MODEL as given; checked against the ledger's model once it is read. */
  adjudicatorModel?: string;
  exportLimits?: ExportLimits;
  /** The checkouts given with --root; the ledger's fill in the rest. */
  roots: Map<string, string>;
  /** The test-only stand-ins given (flags.ts); undefined on every production path. */
  standIns?: StandIns;
}

/** The money flags and variables of `adjudicate`: the required ones present, the cap, the item limit and the seed. */
function adjudicateMoney(flags: AdjudicateFlags, env: EnvOf<"adjudicate">, problems: string[]): Pick<AdjudicateOptions, "capUsd" | "itemBudgetUsd" | "seed"> {
  if (!flags.ledger) problems.push("--ledger PATH is required: the private ledger of the run to adjudicate (it is only read)");
  if (!flags.output) problems.push("--output PATH is required: a new file outside every checkout and outside this project, for the private adjudication record");
  if (!flags.approveBudget) problems.push("--approve-budget is required to spend money; pass it once the adjudication budget (STUDY_ADJUDICATION_BUDGET_USD) is approved");
  const cap = needed(
    env,
    "STUDY_ADJUDICATION_BUDGET_USD",
    "STUDY_ADJUDICATION_BUDGET_USD is not set; export the approved cumulative cap of the adjudication in USD, e.g. STUDY_ADJUDICATION_BUDGET_USD=1",
  );
  if ("problem" in cap) problems.push(cap.problem);
  return {
    capUsd: "value" in cap ? cap.value : undefined,
    itemBudgetUsd: take(positiveDecimal("--item-budget-usd"), flags.itemBudgetUsd ?? String(DEFAULT_ITEM_BUDGET_USD), problems),
    seed: flags.seed === undefined ? randomInt(0, 2 ** 32 - 1) : take(SeedSchema, flags.seed, problems),
  };
}

/** `adjudicate`'s flags and variables, parsed before the ledger is read; the command adds the ledger's problems and refuses them all at once. */
export function parseAdjudicateFlags(flags: AdjudicateFlags, env: EnvOf<"adjudicate">): AdjudicateOptions {
  const problems: string[] = [];
  const money = adjudicateMoney(flags, env, problems);
  const credentials = flags.credentials ?? "gateway";
  checkCredentialFlags(flags, credentials, problems);
  checkRuntimeName(flags.runtime, problems);
  const exportLimits = collecting<ExportLimits | undefined>(() => parseExportLimits(flags), undefined, problems);
  const roots = collecting(() => parseRoots(flags.root), new Map<string, string>(), problems);
  const standIns = parseStandIns(flags, problems);
  return { problems, ...money, adjudicatorModel: env.values.STUDY_ADJUDICATOR_MODEL, credentials, exportLimits, roots, ...(standIns ? { standIns } : {}) };
}

/** The adjudication record's path: a new private file outside every checkout and the project, and never the ledger itself. */
export async function checkAdjudicationOutput(output: string, roots: ReadonlyMap<string, string>, ledgerPath: string | undefined, problems: string[]): Promise<void> {
  await checkNewPrivateFile(output, roots, problems, "adjudication record");
  if (ledgerPath && resolve(output) === resolve(ledgerPath)) problems.push("--output names the ledger itself; the ledger is never modified: choose a new file");
}

// ---------------------------------------------------------------------------------------------
// Sessions: `sessions start|retry`, `resume`

/** The flags every session command that runs calls shares, as its schema accepts them (flags.ts). */
export type SessionRuntimeFlags = Omit<FlagsOf<"resume">, "manifest">;

/** The session runtime flags, parsed: isolation and credentials with their defaults, the test endpoints. */
export interface SessionRuntimeConfig {
  credentials: "gateway" | "login-copy";
  oauthTokenFile?: string;
  claudeConfigDir?: string;
  isolation: "standard" | "offline";
  sandboxChannel?: "host-paths" | "engine-api";
  modelApi?: { socketPath: string };
  fake?: { behaviourFile?: string; recordsDir?: string };
  /** After how long a dead runner's login lock is taken over (a stand-in; default 30 s). */
  loginLockStaleMs?: number;
}

/** The session runtime flags; throws naming the flag. */
export function parseSessionRuntimeFlags(flags: SessionRuntimeFlags): SessionRuntimeConfig {
  const problems: string[] = [];
  const standIns = parseStandIns(flags, problems);
  refuse(problems);
  const isolation = flags.isolation ?? (flags.modelApiSocket || flags.fakeBehaviour ? "offline" : "standard");
  if (isolation !== "standard" && isolation !== "offline") throw new UsageError(`--isolation ${isolation}: sessions run 'standard' or 'offline'`);
  // As for a study: the gateway unless the calls go to a scripted API's socket directly.
  const credentials = flags.credentials ?? (flags.modelApiSocket ? "login-copy" : "gateway");
  if (credentials !== "gateway" && credentials !== "login-copy") throw new UsageError(`--credentials ${credentials}: give 'gateway' or 'login-copy'`);
  if (credentials === "gateway" && flags.modelApiSocket) throw new UsageError("--model-api-socket reaches the API directly; use it with --credentials login-copy");
  if (credentials !== "gateway" && flags.oauthTokenFile !== undefined) throw new UsageError("--oauth-token-file applies to --credentials gateway only");
  return {
    credentials,
    oauthTokenFile: flags.oauthTokenFile,
    claudeConfigDir: flags.claudeConfigDir,
    isolation,
    ...(flags.sandboxChannel !== undefined ? { sandboxChannel: flags.sandboxChannel } : {}),
    ...(standIns?.modelApi ? { modelApi: standIns.modelApi } : {}),
    ...(standIns?.fake ? { fake: standIns.fake } : {}),
    ...(standIns?.loginLockStaleMs !== undefined ? { loginLockStaleMs: standIns.loginLockStaleMs } : {}),
  };
}

/** `sessions start`'s flags as its schema accepts them (flags.ts). */
export type SessionStartFlags = FlagsOf<"sessions start">;

/** `sessions start`'s required values, parsed. */
export interface SessionStartValues {
  manifest: string;
  output: string;
  image: string;
  model: string;
  capUsd: number;
  callBudgetUsd: number;
  sessionBudgetUsd: number;
}

/** A session amount in USD: a plain positive decimal (the one check of an amount); `required` says what it is when it is missing. */
function sessionUsd(flag: string, value: string | undefined, required: string, problems: string[]): number {
  if (value === undefined) {
    problems.push(`${flag} is required: ${required}, e.g. ${flag} 0.5`);
    return Number.NaN;
  }
  return take(positiveDecimal(flag, "0.5"), value, problems) ?? Number.NaN;
}

/** `sessions start`'s flags and STUDY_MODEL; every missing or malformed one refused at once. */
export function parseSessionStartFlags(flags: SessionStartFlags, env: EnvOf<"sessions start">): SessionStartValues {
  const problems: string[] = [];
  checkRuntimeName(flags.runtime, problems);
  if (!flags.manifest) problems.push('--manifest is required: the session manifest (tasks of kind "session")');
  if (!flags.output) problems.push("--output is required: a new private ledger file outside every checkout and the project");
  if (!flags.image) problems.push("--image is required: the Claude Code image (study-runner image build)");
  const model = flags.model ?? env.values.STUDY_MODEL;
  const modelRefused = modelProblem(model, { what: "--model", missing: "--model or STUDY_MODEL is required" });
  if (modelRefused) problems.push(modelRefused);
  const capUsd = sessionUsd("--cap-usd", flags.capUsd, "the cumulative cap in USD of every call of this ledger", problems);
  const callBudgetUsd = sessionUsd("--call-budget-usd", flags.callBudgetUsd, "the limit in USD of one call", problems);
  const sessionBudgetUsd = sessionUsd("--session-budget-usd", flags.sessionBudgetUsd, "the limit in USD of one session's calls", problems);
  refuse(problems);
  return { manifest: flags.manifest!, output: flags.output!, image: flags.image!, model: model!, capUsd, callBudgetUsd, sessionBudgetUsd };
}

// ---------------------------------------------------------------------------------------------
// `demo`

/** `demo --runtime NAME`: refused before anything is set up when no OCI runtime has that name. */
export function checkDemoRuntime(runtime: string | undefined): void {
  const problems: string[] = [];
  checkRuntimeName(runtime, problems);
  if (problems.length) throw new UsageError(problems[0]!);
}
