import { loadManifest, type LoadedManifest } from "../manifest/load.ts";
import { planStudy, plannedRepositories, type Mode, type PlannedAttempt } from "../plan/plan.ts";
import { checkRoot, type RootCheck } from "../export/root-check.ts";
import type { ExportLimits } from "../export/export.ts";
import { ExitCode, RefusalError } from "../util/errors.ts";
import { CLAUDE_CODE_VERSION, claudeCodeImageRef } from "../claude/version.ts";
import { measureSideEffects, sideEffectViolations } from "../process/measure.ts";
import { checkDryRunModel, parseRunExecution, parseStudyInputs, runMode, type RunExecution, type RunFlags } from "./config/commands.ts";
import { commandEnvironment, commandFlags, type EnvOf } from "./config/flags.ts";
import { valueOrRefuse } from "./config/environment.ts";
import { withStopSignals } from "./signals.ts";
import { requireProfile } from "../profile/load.ts";

/** The only children a dry run may start: git reads the checkouts at their pins. */
const DRY_RUN_CHILDREN = ["git"] as const;

/** What a dry run and an execution share: the manifest, the plan and the checkouts given. */
interface StudyInputs {
  loaded: LoadedManifest;
  mode: Mode;
  plan: PlannedAttempt[];
  roots: Map<string, string>;
  exportLimits: ExportLimits;
}

async function assertRoots(loaded: LoadedManifest, roots: ReadonlyMap<string, string>, limits: ExportLimits): Promise<RootCheck[]> {
  const checks = await Promise.all([...roots].map(([name, dir]) => checkRoot(loaded, name, dir, { limits })));
  const problems = checks.flatMap((c) => c.problems);
  if (problems.length) throw new RefusalError(problems.join("\n"), problems);
  return checks;
}

/**
 * ANTHROPIC_API_KEY removed from this process's own environment once the command's variables are
 * parsed and before any child starts (git inherits it), so no child ever receives it (contract R68).
 */
function forgetApiKey(): void {
  delete process.env.ANTHROPIC_API_KEY;
}

/** The manifest, its plan in the chosen mode and the checkouts given (each a repository of the manifest). */
async function loadStudyInputs(flags: RunFlags): Promise<StudyInputs> {
  const mode = runMode(flags);
  const loaded = await loadManifest(flags.manifest);
  const plan = planStudy(loaded.manifest, mode);
  return { loaded, mode, plan, ...parseStudyInputs(flags, Object.keys(loaded.manifest.repositories)) };
}

/** `run --dry-run`: validates the matrix and the checkouts given, prints what it did; no network, credentials or Claude process. */
async function dryRun(flags: RunFlags, env: EnvOf<"run">, study: StudyInputs, measured: ReturnType<typeof measureSideEffects>): Promise<number> {
  checkDryRunModel(flags, env);
  const { loaded, mode, plan, exportLimits } = study;
  const checks = await assertRoots(loaded, study.roots, exportLimits);
  const byName = new Map(checks.map((c) => [c.repository, c]));
  const summary = {
    dryRun: true,
    manifest: loaded.path,
    protocolHash: loaded.protocolHash,
    mode,
    attempts: plan.length,
    tasks: new Set(plan.map((a) => a.taskId)).size,
    repetitions: mode === "pilot" ? 1 : loaded.manifest.repetitions,
    scenarios: loaded.manifest.scenarios,
    transport: flags.transport,
    repositories: Object.entries(loaded.manifest.repositories).map(([name, pin]) => ({
      name,
      pin,
      planned: plannedRepositories(plan).includes(name),
      root: byName.get(name)?.root ?? null,
      checked: byName.has(name),
      sourcesChecked: byName.get(name)?.sources ?? 0,
      // The export's file list, computed once and checked against the limits before anything is reserved.
      export: byName.has(name) ? { files: byName.get(name)!.exportFiles, bytes: byName.get(name)!.exportBytes, limits: exportLimits } : null,
      // What no export of this repository will hold as an answer key: by name, and copies by content.
      excludedAsAnswerKeys: byName.get(name)?.answerKeys ?? null,
    })),
    ...measured.finish(),
  };
  process.stdout.write(JSON.stringify(summary, null, 2) + "\n");
  const broken = sideEffectViolations(summary, DRY_RUN_CHILDREN);
  if (broken.length) {
    process.stderr.write(`study-runner: the dry run broke its guarantees (a runner fault): ${broken.join("; ")}\n`);
    return ExitCode.fault;
  }
  return ExitCode.ok;
}

/** The fields every study kind's config shares (src/study/header.ts, StudyRunBase). */
async function studyBase(flags: RunFlags, study: StudyInputs, options: RunExecution) {
  const { referenceEngineCommand } = await import("../mcp/preflight.ts");
  const { settings } = options;
  return {
    loaded: study.loaded,
    mode: study.mode,
    plan: study.plan,
    fullPlanSize: planStudy(study.loaded.manifest, "full").length,
    roots: study.roots,
    model: settings.model,
    capUsd: settings.capUsd,
    output: settings.output,
    docBridgeCommand: options.docBridgeCommand ?? referenceEngineCommand(),
    quiet: flags.quiet,
    exportLimits: study.exportLimits,
  };
}

/** `--transport http`: the Messages API study. */
async function runHttp(flags: RunFlags, study: StudyInputs, options: RunExecution, signal: AbortSignal): Promise<number> {
  const { runHttpStudy } = await import("../study/http.ts");
  const { settings } = options;
  return runHttpStudy(
    {
      ...(await studyBase(flags, study, options)),
      apiKey: settings.apiKey!,
      apiBaseUrl: options.apiBaseUrl,
      prices: { inputUsdPerMtok: settings.inputPriceUsdPerMtok!, outputUsdPerMtok: settings.outputPriceUsdPerMtok! },
      deadlineMs: options.timeoutMs,
    },
    { stdout: (t) => process.stdout.write(t), stderr: process.stderr, signal },
  );
}

/** `--transport cli`: Claude Code in a container per attempt. */
async function runCli(flags: RunFlags, study: StudyInputs, options: RunExecution, env: EnvOf<"run">, signal: AbortSignal): Promise<number> {
  const [{ runStudy }, { DockerRuntime }, { killAtCheckpoint }] = await Promise.all([import("../study/run.ts"), import("../sandbox/docker.ts"), import("../loop/checkpoint.ts")]);
  const { egressAllow, runtime, cpus, concurrency } = options;
  return runStudy(
    {
      ...(await studyBase(flags, study, options)),
      attemptBudgetUsd: options.settings.attemptBudgetUsd,
      image: flags.image ?? claudeCodeImageRef(),
      expectedCliVersion: flags.cliVersion ?? CLAUDE_CODE_VERSION,
      isolation: options.isolation,
      ...(egressAllow ? { egress: { allow: egressAllow } } : {}),
      ...(runtime !== undefined ? { runtime } : {}),
      ...(flags.sandboxChannel !== undefined ? { sandboxChannel: flags.sandboxChannel } : {}),
      ...(cpus !== undefined ? { cpus } : {}),
      ...(concurrency !== undefined ? { concurrency } : {}),
      claudeConfigDir: flags.claudeConfigDir,
      credentials: options.credentials,
      ...(options.oauthTokenFile !== undefined ? { oauthTokenFile: options.oauthTokenFile } : {}),
      ...(options.gatewayUpstream !== undefined ? { gatewayUpstream: options.gatewayUpstream } : {}),
      modelApi: options.modelApi,
      fake: options.fake,
      timeoutMs: options.timeoutMs,
      loginLockTimeoutMs: options.loginLockTimeoutMs,
      loginLockStaleMs: options.loginLockStaleMs,
      memoryBytes: options.memoryBytes,
      homeBytes: options.homeBytes,
    },
    { runtime: new DockerRuntime(), stdout: (t) => process.stdout.write(t), stderr: process.stderr, signal, checkpoint: killAtCheckpoint(valueOrRefuse(env, "STUDY_RUNNER_TEST_KILL_AT")) },
  );
}

/**
 * `study-runner run`: a dry run, or the pilot or full study. The flags and environment are
 * parsed once (src/cli/config/); every problem is refused (exit 2) before anything is reserved.
 * A caller such as the demo passes its own parsed environment (contract R214).
 */
export async function runCommand(given: RunFlags, env: EnvOf<"run"> = commandEnvironment("run")): Promise<number> {
  const flags = commandFlags("run", given);
  // Measured from the start: the dry run reports what it did, not a promise.
  const measured = flags.dryRun ? measureSideEffects() : undefined;
  forgetApiKey();
  const study = await loadStudyInputs(flags);
  if (measured) return dryRun(flags, env, study, measured);
  // The version's calibration profile, before anything else is probed or reserved (contract R221).
  if (flags.transport === "cli") requireProfile(flags.cliVersion ?? CLAUDE_CODE_VERSION);
  const options = await parseRunExecution(flags, env, plannedRepositories(study.plan), study.roots);
  await assertRoots(study.loaded, study.roots, study.exportLimits);
  // First signal: stop the current container, keep its reservation charged, end blocked.
  return withStopSignals("attempt", (signal) => (flags.transport === "http" ? runHttp(flags, study, options, signal) : runCli(flags, study, options, env, signal)));
}
