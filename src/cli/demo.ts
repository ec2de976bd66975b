import { access, mkdir, rename, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join, resolve } from "node:path";
import { prepareDemo } from "../demo/setup.ts";
import { reachEngine } from "../transport/cli/preflight.ts";
import { DockerRuntime } from "../sandbox/docker.ts";
import type { SandboxChannel } from "../sandbox/docker-sandbox.ts";
import { DEMO_MANIFEST } from "../util/paths.ts";
import { ExitCode, UsageError } from "../util/errors.ts";
import { CLAUDE_CODE_VERSION } from "../claude/version.ts";
import { requireProfile } from "../profile/load.ts";
import { acquireHeldLock, LOCK_STALE_MS, type HeldLock } from "../util/held-lock.ts";
import { printable } from "../util/printable.ts";
import { runCommand } from "./run.ts";
import { checkDemoRuntime } from "./config/commands.ts";
import { commandEnvironment, type EnvOf } from "./config/flags.ts";
import { withDefaults } from "./config/environment.ts";

/**
 * The bundled demo, end to end: the demo corpus at its pins, a doc-bridge index per checkout,
 * the fake claude image (built offline), a test login, then the study through the real
 * runner, containers and ledger, then the blind adjudication and the report. Only the model is
 * fake: no network, no credential, no cost.
 *
 * The adjudicator follows the protocol: the default adjudicator model, a different priced model
 * from the answering one (the fake image answers as whatever model it is given), unless
 * STUDY_ADJUDICATOR_MODEL names another. Its verdicts are the fake's scripted ones (a fixed mix,
 * so the charts have more than one colour), not a grading of the answers.
 *
 * Its environment is parsed once here, with the demo's own defaults where a variable is not set
 * (the model, a cap of 1 USD, an adjudication cap of 2 USD), and handed to `run` and `adjudicate`
 * as values: the demo never changes `process.env` (contract R214).
 */
export async function demoCommand(flags: DemoFlags): Promise<number> {
  const workdir = resolve(flags.workdir ?? defaultDemoWorkdir());
  checkDemoRuntime(flags.runtime);
  if (flags.cliVersion !== undefined && !flags.realCli)
    throw new UsageError("--cli-version needs --real-cli: the fake image stands in for the pinned version only; add --real-cli, or drop --cli-version");
  // A version without a calibration profile is refused before the corpus or any image is made (contract R221).
  if (flags.cliVersion !== undefined) requireProfile(flags.cliVersion);
  const env = withDefaults(commandEnvironment("demo"), DEMO_DEFAULTS);
  const lock = await lockDemoWorkdir(workdir);
  try {
    return flags.sessions ? await sessionsDemo(workdir, { ...flags, model: env.values.STUDY_MODEL! }) : await studyDemo(workdir, flags, env);
  } finally {
    await lock.release();
  }
}

/** What the demo uses where the variable is not set. Two calls an item (the verdict, then the arm guess): the fake's 36 items cost about 1.6 USD of the default adjudicator's list prices. */
const DEMO_DEFAULTS = { STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: 1, STUDY_ADJUDICATION_BUDGET_USD: 2 };

interface DemoFlags {
  workdir?: string;
  pilot?: boolean;
  quiet?: boolean;
  realCli?: boolean;
  sessions?: boolean;
  concurrency?: string;
  runtime?: string;
  sandboxChannel?: SandboxChannel;
  /** With --real-cli: the Claude Code version to run, whose calibration profile must exist (contract R221). */
  cliVersion?: string;
}

/** The default workdir: one per user under the system temp dir, so two users' demos never share one (contract R187). */
export function defaultDemoWorkdir(): string {
  return join(tmpdir(), `study-runner-demo-${process.getuid?.() ?? userInfo().username}`);
}

/**
 * One demo per workdir at a time (contract R187): the demo remakes the corpus, the login and the
 * index inside it, so a second demo on the same folder is refused at once, exit 2, naming the
 * holder's pid, before it touches anything.
 */
async function lockDemoWorkdir(workdir: string): Promise<HeldLock> {
  await mkdir(workdir, { recursive: true, mode: 0o700 });
  return acquireHeldLock(join(workdir, "demo"), {
    timeoutMs: 0,
    busy: (holder) =>
      `--workdir ${printable(workdir)}: another demo is running there (${holder}); wait for it to end, or pass another --workdir. ` +
      `A demo that died leaves the lock ${printable(join(workdir, "demo.lock"))}, taken over ${LOCK_STALE_MS / 1000} s after its last refresh`,
    interrupted: (reason) => `interrupted by ${reason}`,
  });
}

async function studyDemo(workdir: string, flags: DemoFlags, env: EnvOf<"demo">): Promise<number> {
  const runtime = new DockerRuntime();
  // The engine answers (its TLS certificates too) before the demo builds anything on it.
  await reachEngine(runtime, undefined);
  const setup = await prepareDemo(workdir, runtime);
  // --real-cli: the real pinned binary in the real image, the model scripted behind the runner's gateway.
  const real = flags.realCli ? await startRealDemo(workdir, flags.pilot === true, flags.cliVersion) : undefined;
  const ledgers = join(workdir, "ledgers");
  await mkdir(ledgers, { recursive: true, mode: 0o700 });
  const mode = flags.pilot ? "pilot" : "run";
  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  const output = join(ledgers, `${mode}-${stamp}.json`);
  process.stderr.write(`study-runner demo: corpus and test login in ${workdir}; ledger in ${ledgers}, named for its run id once the run ends\n`);
  const runCode = await runCommand(
    {
      manifest: DEMO_MANIFEST,
      ...(real ? { credentials: "gateway" as const, oauthTokenFile: real.tokenFile, testGatewayUpstream: real.upstream, testGatewayCa: real.caFile } : {}),
      transport: "cli",
      ...(flags.cliVersion !== undefined ? { cliVersion: flags.cliVersion } : {}),
      pilot: flags.pilot,
      run: !flags.pilot,
      approveBudget: true,
      root: Object.entries(setup.roots).map(([name, dir]) => `${name}=${dir}`),
      output,
      image: real?.image ?? setup.image,
      isolation: "offline",
      claudeConfigDir: setup.loginDir,
      concurrency: flags.concurrency,
      ...(flags.runtime !== undefined ? { runtime: flags.runtime } : {}),
      ...(flags.sandboxChannel !== undefined ? { sandboxChannel: flags.sandboxChannel } : {}),
      quiet: flags.quiet,
    },
    env,
  ).finally(() => real?.close());
  // A run refused before its ledger existed has nothing to adjudicate or report.
  if (
    !(await access(output).then(
      () => true,
      () => false,
    ))
  )
    return runCode;

  const [{ readLedgerInput }, { itemIdFor }, { adjudicateCommand }, { loadReport, writeReportFiles }] = await Promise.all([
    import("../adjudicate/input.ts"),
    import("../adjudicate/prompt.ts"),
    import("./adjudicate.ts"),
    import("../report/write.ts"),
  ]);
  // One run id everywhere: the ledger, its transcripts, the record and the reports are named for
  // the run id the report's title shows (contract R193), not for the moment the demo started.
  const { runId } = (await readLedgerInput(output)).ledger;
  const ledgerPath = join(ledgers, `${runId}.json`);
  await rename(output, ledgerPath);
  await rename(`${output}.transcripts`, `${ledgerPath}.transcripts`).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "ENOENT") throw err;
  });
  const { ledger } = await readLedgerInput(ledgerPath);
  const behaviourFile = join(workdir, `adjudicator-behaviour-${runId}.json`);
  await writeFile(behaviourFile, JSON.stringify(demoVerdicts(ledger.runId, ledger.observations.length, itemIdFor)), { mode: 0o644 });
  const adjudication = join(ledgers, `${runId}.adjudication.json`);
  const adjudicateCode = await adjudicateCommand(
    {
      ledger: ledgerPath,
      output: adjudication,
      approveBudget: true,
      seed: "20261130",
      isolation: "offline",
      claudeConfigDir: setup.loginDir,
      quiet: flags.quiet,
      ...(flags.sandboxChannel !== undefined ? { sandboxChannel: flags.sandboxChannel } : {}),
      fakeBehaviour: behaviourFile,
      // The scripted verdicts are the fake image's behaviour, also after a --real-cli study (of any version).
      image: setup.image,
      cliVersion: CLAUDE_CODE_VERSION,
    },
    env,
  );
  const recordExists = await access(adjudication).then(
    () => true,
    () => false,
  );
  const report = await loadReport({ ledger: ledgerPath, adjudication: recordExists ? adjudication : undefined, manifest: DEMO_MANIFEST });
  const files = await writeReportFiles(join(workdir, "reports", runId), report);
  process.stdout.write(`${JSON.stringify({ demo: { ledger: ledgerPath, adjudication: recordExists ? adjudication : null, report: files } }, null, 2)}\n`);
  return runCode !== ExitCode.ok ? runCode : adjudicateCode;
}

/** The fake adjudicator's scripted verdicts: mostly correct, some partial, some incorrect, by observation index. */
export function demoVerdicts(runId: string, observations: number, itemIdFor: (runId: string, index: number) => string): object {
  const verdicts: Record<string, { outcome: string }> = {};
  for (let i = 0; i < observations; i++) {
    const outcome = i % 5 === 3 ? "partial" : i % 7 === 5 ? "incorrect" : "correct";
    verdicts[itemIdFor(runId, i)] = { outcome };
  }
  return { default: { kind: "ok", verdicts } };
}

async function startRealDemo(workdir: string, pilot: boolean, version: string | undefined) {
  const [{ startRealCliDemo }, { loadManifest }, { planStudy }] = await Promise.all([import("../demo/real-cli.ts"), import("../manifest/load.ts"), import("../plan/plan.ts")]);
  const { manifest } = await loadManifest(DEMO_MANIFEST);
  return startRealCliDemo(workdir, new DockerRuntime(), manifest, planStudy(manifest, pilot ? "pilot" : "full"), version !== undefined ? { version } : {});
}

/** `demo --sessions`: the two session tasks (src/session), a summary of counts and states on stdout. */
async function sessionsDemo(workdir: string, flags: { model: string; quiet?: boolean; realCli?: boolean; runtime?: string; sandboxChannel?: SandboxChannel; cliVersion?: string }): Promise<number> {
  const [{ runSessionDemo }, { sessionSummary }] = await Promise.all([import("../demo/sessions.ts"), import("./session-summary.ts")]);
  const { exitCode, ledgerPath, ledger } = await runSessionDemo(workdir, flags);
  process.stdout.write(`${JSON.stringify({ demo: sessionSummary(ledgerPath, ledger) }, null, 2)}\n`);
  return exitCode;
}
