import { runtimeNameProblem } from "../isolation/profile.ts";
import { loadManifest } from "../manifest/load.ts";
import { planStudy, plannedRepositories } from "../plan/plan.ts";
import { checkRoot, type RootCheck } from "../export/root-check.ts";
import type { ExportLimits } from "../export/export.ts";
import { parseExportLimits } from "../export/options.ts";
import { ExitCode, RefusalError, UsageError } from "../util/errors.ts";
import { checkExecution, parseRoots, type RawRunFlags } from "../settings/run-options.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { CLAUDE_CODE_VERSION, claudeCodeImageRef } from "../claude/version.ts";
import { resolve } from "node:path";
import { parseEgressAllow } from "../isolation/policy.ts";
import type { Transport } from "../terms/terms.ts";
import { checkPricedModel } from "../cost/priced.ts";
import { measureSideEffects, sideEffectViolations } from "../process/measure.ts";

/** The only children a dry run may start: git reads the checkouts at their pins. */
const DRY_RUN_CHILDREN = ["git"] as const;

export interface RunFlags extends RawRunFlags {
  manifest: string;
  transport: Transport;
  image?: string;
  isolation?: "standard" | "strict" | "offline";
  /** Strict isolation: the allowlisted host names (comma-separated, repeatable); replaces the default. */
  egressAllow?: string[];
  /** OCI runtime of attempt containers, e.g. runsc. */
  runtime?: string;
  /** CPUs per attempt container (Docker's --cpus). */
  cpus?: string;
  /** How many attempts may run at once. */
  concurrency?: string;
  claudeConfigDir?: string;
  docBridgeCommand?: string;
  quiet?: boolean;
  fakeBehaviour?: string;
  fakeRecords?: string;
  testAttemptTimeoutMs?: string;
  /** Tests only (docs/reliability.md): the login lock's wait and stale times, the attempt's memory limit. */
  testLoginLockTimeoutMs?: string;
  testLoginLockStaleMs?: string;
  testMemoryLimitMb?: string;
  testHomeSizeMb?: string;
  modelApiSocket?: string;
  /** cli transport: gateway (default unless --model-api-socket) or login-copy. */
  credentials?: "gateway" | "login-copy";
  oauthTokenFile?: string;
  /** Tests only: the gateway's upstream origin and the CA it trusts. */
  testGatewayUpstream?: string;
  testGatewayCa?: string;
  /** Tests only: the Messages API base of the http transport (loopback or the real API). */
  apiBaseUrl?: string;
  /** Raise the export limits (docs/export.md, "Limits"). */
  maxExportFiles?: string;
  maxExportBytes?: string;
}

/** `--cpus`: a number of CPUs of at least 0.01 (Docker's smallest useful share); pushes a problem otherwise. */
export function parseCpus(value: string | undefined, problems: string[]): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n < 0.01 || n > 1024) {
    problems.push(`--cpus must be a number of CPUs between 0.01 and 1024, e.g. --cpus 1 or --cpus 0.5; got '${value}'`);
    return undefined;
  }
  return n;
}

/** `--concurrency`: a whole number of attempts at once, 1 to 64; pushes a problem otherwise. */
export function parseConcurrency(value: string | undefined, transport: "cli" | "http", problems: string[]): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === "" || !Number.isSafeInteger(n) || n < 1 || n > 64) {
    problems.push(`--concurrency must be a whole number of attempts from 1 to 64, e.g. --concurrency 4; got '${value}'`);
    return undefined;
  }
  if (n > 1 && transport !== "cli") problems.push("--concurrency above 1 applies to --transport cli only (the http transport runs one attempt at a time)");
  return n;
}

/** A hidden test flag's positive whole number. */
function testNumber(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n <= 0) throw new UsageError(`${flag} must be a positive whole number, got '${value}'`);
  return n;
}

export function parseEngineCommand(value: string | undefined): string[] | undefined {
  if (value === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    throw new UsageError(`--doc-bridge-command must be a JSON array of strings, e.g. '["node","/opt/ak/bin/ak-docs.js","mcp"]'`);
  }
  if (!Array.isArray(parsed) || parsed.length === 0 || !parsed.every((p) => typeof p === "string" && p.length > 0)) {
    throw new UsageError(`--doc-bridge-command must be a non-empty JSON array of non-empty strings`);
  }
  return parsed as string[];
}

async function assertRoots(loaded: Awaited<ReturnType<typeof loadManifest>>, roots: ReadonlyMap<string, string>, limits: ExportLimits): Promise<RootCheck[]> {
  const checks = await Promise.all([...roots].map(([name, dir]) => checkRoot(loaded, name, dir, { limits })));
  const problems = checks.flatMap((c) => c.problems);
  if (problems.length) throw new RefusalError(problems.join("\n"), problems);
  return checks;
}

export async function runCommand(flags: RunFlags): Promise<number> {
  // Measured from the start: the dry run reports what it did, not a promise.
  const measured = flags.dryRun ? measureSideEffects() : undefined;
  // ANTHROPIC_API_KEY is read once, here, and removed from this process's environment before
  // any child starts (git inherits it), so no child ever receives it (contract R68).
  const env = { ...process.env };
  delete process.env.ANTHROPIC_API_KEY;
  if (flags.pilot && flags.run) throw new UsageError("--pilot and --run exclude each other; choose one");
  const loaded = await loadManifest(flags.manifest);
  const { manifest } = loaded;
  const mode = flags.pilot ? "pilot" : "full";
  const plan = planStudy(manifest, mode);
  const roots = parseRoots(flags.root);
  const unknown = [...roots.keys()].filter((name) => !(name in manifest.repositories));
  if (unknown.length) {
    throw new UsageError(unknown.map((n) => `--root ${n}=…: '${n}' is not a repository of the manifest (known: ${Object.keys(manifest.repositories).join(", ")})`).join("\n"));
  }

  const exportLimits = parseExportLimits(flags);

  if (flags.dryRun) {
    // A dry run given the model an execution would use answers what that execution would:
    // a model the runner cannot price is refused here too, not after its first reservation.
    const model = env.STUDY_MODEL?.trim();
    const unpriced = model && flags.transport === "cli" ? checkPricedModel(model) : null;
    if (unpriced) throw new UsageError(unpriced);
    const checks = await assertRoots(loaded, roots, exportLimits);
    const byName = new Map(checks.map((c) => [c.repository, c]));
    const summary = {
      dryRun: true,
      manifest: loaded.path,
      protocolHash: loaded.protocolHash,
      mode,
      attempts: plan.length,
      tasks: new Set(plan.map((a) => a.taskId)).size,
      repetitions: mode === "pilot" ? 1 : manifest.repetitions,
      scenarios: manifest.scenarios,
      transport: flags.transport,
      repositories: Object.entries(manifest.repositories).map(([name, pin]) => ({
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
      ...measured!.finish(),
    };
    process.stdout.write(JSON.stringify(summary, null, 2) + "\n");
    const broken = sideEffectViolations(summary, DRY_RUN_CHILDREN);
    if (broken.length) {
      process.stderr.write(`study-runner: the dry run broke its guarantees (a runner fault): ${broken.join("; ")}\n`);
      return ExitCode.fault;
    }
    return ExitCode.ok;
  }

  const planned = plannedRepositories(plan);
  const { settings, problems } = checkExecution(flags, env, flags.transport, planned, roots);
  if (flags.apiBaseUrl !== undefined && flags.transport !== "http") problems.push("--api-base-url applies to --transport http only");
  // A model API on a unix socket is reached through the in-container relay, with no network:
  // offline, or strict when asked for (the proxy beside it).
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
  if (flags.transport !== "cli" && (flags.credentials !== undefined || flags.oauthTokenFile !== undefined)) problems.push("--credentials and --oauth-token-file apply to --transport cli only");
  // A Messages API socket given for tests is the direct route: it bypasses the gateway by design.
  const credentials = flags.credentials ?? (flags.modelApiSocket ? "login-copy" : "gateway");
  if (credentials === "gateway" && flags.modelApiSocket) problems.push("--model-api-socket reaches the API directly; use it with --credentials login-copy");
  if (credentials !== "gateway" && (flags.oauthTokenFile !== undefined || flags.testGatewayUpstream !== undefined))
    problems.push("--oauth-token-file and --test-gateway-upstream apply to --credentials gateway only");
  if (flags.transport === "cli" && credentials === "gateway" && flags.egressAllow !== undefined && isolation === "strict") {
    problems.push(
      "--egress-allow has no effect with --credentials gateway (every attempt container has network none and no proxy; the gateway is its only way out); use --credentials login-copy for the strict profile's proxy",
    );
  }
  if (flags.testGatewayCa !== undefined && flags.testGatewayUpstream === undefined) problems.push("--test-gateway-ca needs --test-gateway-upstream");
  if (flags.runtime !== undefined && flags.transport !== "cli") problems.push("--runtime applies to --transport cli only (the http transport runs no container)");
  const runtimeProblem = flags.runtime !== undefined && runtimeNameProblem(flags.runtime);
  if (runtimeProblem) problems.push(runtimeProblem);
  const cpus = parseCpus(flags.cpus, problems);
  const concurrency = parseConcurrency(flags.concurrency, flags.transport, problems);
  if (flags.output) {
    const { checkOutputPath } = await import("../ledger/store.ts");
    problems.push(...(await checkOutputPath(flags.output, { checkouts: [...roots.values()], projectRoot: PROJECT_ROOT })));
  }
  if (problems.length || !settings) throw new UsageError(problems.join("\n"), problems);
  const docBridgeCommand = parseEngineCommand(flags.docBridgeCommand);
  if (flags.transport === "http") (await import("../transport/http/client.ts")).parseApiBaseUrl(flags.apiBaseUrl);
  await assertRoots(loaded, roots, exportLimits);

  const [{ referenceEngineCommand }, { killAtCheckpoint }] = await Promise.all([import("../mcp/preflight.ts"), import("../loop/checkpoint.ts")]);
  const controller = new AbortController();
  // First signal: stop the current container, keep its reservation charged, end blocked.
  // A second one exits at once; the ledger on disk is always a complete atomic write.
  let signals = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    signals++;
    if (signals > 1) process.exit(sig === "SIGTERM" ? ExitCode.sigterm : ExitCode.sigint);
    process.stderr.write(`study-runner: ${sig} received; stopping the current attempt (send it again to exit at once)\n`);
    controller.abort(sig);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  try {
    if (flags.transport === "http") {
      const { runHttpStudy } = await import("../study/http.ts");
      return await runHttpStudy(
        {
          loaded,
          mode,
          plan,
          fullPlanSize: planStudy(manifest, "full").length,
          roots,
          model: settings.model,
          capUsd: settings.capUsd,
          output: settings.output,
          apiKey: settings.apiKey!,
          apiBaseUrl: flags.apiBaseUrl,
          prices: { inputUsdPerMtok: settings.inputPriceUsdPerMtok!, outputUsdPerMtok: settings.outputPriceUsdPerMtok! },
          docBridgeCommand: docBridgeCommand ?? referenceEngineCommand(),
          deadlineMs: flags.testAttemptTimeoutMs ? Number(flags.testAttemptTimeoutMs) : undefined,
          quiet: flags.quiet,
          exportLimits,
        },
        { stdout: (t) => process.stdout.write(t), stderr: process.stderr, signal: controller.signal },
      );
    }
    const [{ runStudy }, { DockerRuntime }] = await Promise.all([import("../study/run.ts"), import("../sandbox/docker.ts")]);
    return await runStudy(
      {
        loaded,
        mode,
        plan,
        fullPlanSize: planStudy(manifest, "full").length,
        roots,
        model: settings.model,
        capUsd: settings.capUsd,
        attemptBudgetUsd: settings.attemptBudgetUsd,
        output: settings.output,
        image: flags.image ?? claudeCodeImageRef(),
        expectedCliVersion: flags.cliVersion ?? CLAUDE_CODE_VERSION,
        isolation,
        ...(egressAllow ? { egress: { allow: egressAllow } } : {}),
        ...(flags.runtime !== undefined ? { runtime: flags.runtime } : {}),
        ...(cpus !== undefined ? { cpus } : {}),
        ...(concurrency !== undefined ? { concurrency } : {}),
        docBridgeCommand: docBridgeCommand ?? referenceEngineCommand(),
        claudeConfigDir: flags.claudeConfigDir,
        credentials,
        ...(flags.oauthTokenFile !== undefined ? { oauthTokenFile: resolve(flags.oauthTokenFile) } : {}),
        ...(flags.testGatewayUpstream !== undefined
          ? { gatewayUpstream: { url: flags.testGatewayUpstream, ...(flags.testGatewayCa ? { ca: await (await import("node:fs/promises")).readFile(resolve(flags.testGatewayCa), "utf8") } : {}) } }
          : {}),
        modelApi: flags.modelApiSocket ? { socketPath: resolve(flags.modelApiSocket) } : undefined,
        fake:
          flags.fakeBehaviour || flags.fakeRecords ? { behaviourFile: flags.fakeBehaviour && resolve(flags.fakeBehaviour), recordsDir: flags.fakeRecords && resolve(flags.fakeRecords) } : undefined,
        timeoutMs: flags.testAttemptTimeoutMs ? Number(flags.testAttemptTimeoutMs) : undefined,
        loginLockTimeoutMs: testNumber("--test-login-lock-timeout-ms", flags.testLoginLockTimeoutMs),
        loginLockStaleMs: testNumber("--test-login-lock-stale-ms", flags.testLoginLockStaleMs),
        memoryBytes: flags.testMemoryLimitMb === undefined ? undefined : testNumber("--test-memory-limit-mb", flags.testMemoryLimitMb)! * 1024 * 1024,
        homeBytes: flags.testHomeSizeMb === undefined ? undefined : testNumber("--test-home-size-mb", flags.testHomeSizeMb)! * 1024 * 1024,
        quiet: flags.quiet,
        exportLimits,
      },
      { runtime: new DockerRuntime(), stdout: (t) => process.stdout.write(t), stderr: process.stderr, signal: controller.signal, checkpoint: killAtCheckpoint(process.env) },
    );
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}
