import { Option } from "commander";
import { CLAUDE_CODE_VERSION } from "../claude/version.ts";
import { requireProfileFor } from "../profile/load.ts";
import { parseSessionRuntimeFlags, parseSessionStartFlags, type SessionRuntimeFlags, type SessionStartFlags } from "./config/commands.ts";
import { parseRoots } from "./config/fields.ts";
import { commandEnvironment, type EnvOf } from "./config/flags.ts";
import { valueOrRefuse } from "./config/environment.ts";
import type { SessionLedger } from "../session/schema.ts";
import { sessionSummary } from "./session-summary.ts";

/**
 * The session machinery, loaded by the commands that run sessions: this module is part of every
 * command's start (src/cli/main.ts registers its commands), and importing the machinery statically
 * loaded the runner's whole graph for `--version`, `ledger verify` or `report` too.
 */
const sessionRun = () => import("../session/run.ts");

const say = (quiet: boolean | undefined) => (line: string) => {
  if (!quiet) process.stderr.write(`study-runner sessions: ${line}\n`);
};

export async function sessionsStartCommand(flags: SessionStartFlags): Promise<number> {
  const env = commandEnvironment("sessions start");
  const values = parseSessionStartFlags(flags, env);
  // The version's calibration profile, before anything is probed or reserved (contract R221), showing a resume sessions can use (contract R265).
  requireProfileFor(flags.cliVersion ?? CLAUDE_CODE_VERSION, "sessions");
  const { startSessions } = await sessionRun();
  const started = await startSessions(
    {
      ...parseSessionRuntimeFlags(flags),
      manifestPath: values.manifest,
      roots: parseRoots(flags.root ?? []),
      output: values.output,
      model: values.model,
      image: values.image,
      expectedCliVersion: flags.cliVersion ?? CLAUDE_CODE_VERSION,
      ...(flags.runtime !== undefined ? { ociRuntime: flags.runtime } : {}),
      capUsd: values.capUsd,
      callBudgetUsd: values.callBudgetUsd,
      sessionBudgetUsd: values.sessionBudgetUsd,
    },
    { runtime: await dockerRuntime(), say: say(flags.quiet), checkpoint: await testCheckpoint(env) },
  );
  process.stdout.write(`${JSON.stringify(sessionSummary(started.ledgerPath, started.ledger), null, 2)}\n`);
  return started.exitCode;
}

export async function resumeCommand(ledgerPath: string, flags: SessionRuntimeFlags & { manifest?: string }): Promise<number> {
  const { resumeSessions } = await sessionRun();
  const resumed = await resumeSessions(
    ledgerPath,
    { ...parseSessionRuntimeFlags(flags), manifestPath: flags.manifest },
    { runtime: await dockerRuntime(), say: say(flags.quiet), checkpoint: await testCheckpoint(commandEnvironment("resume")) },
  );
  process.stdout.write(`${JSON.stringify(sessionSummary(ledgerPath, resumed.ledger), null, 2)}\n`);
  return resumed.exitCode;
}

export async function retryCommand(ledgerPath: string, task: string, flags: SessionRuntimeFlags & { manifest?: string }): Promise<number> {
  const { retrySession } = await sessionRun();
  const retried = await retrySession(ledgerPath, task, { ...parseSessionRuntimeFlags(flags), manifestPath: flags.manifest }, { runtime: await dockerRuntime(), say: say(flags.quiet) });
  process.stdout.write(
    `${JSON.stringify({ ...sessionSummary(ledgerPath, retried.ledger), retry: { session: retried.session.id, attempt: retried.session.attempt, retryOf: retried.session.retryOf } }, null, 2)}\n`,
  );
  return retried.exitCode;
}

/** `sessions status`: the open questions, fenced as untrusted text, and each session's state. */
export function statusText(ledger: SessionLedger): string {
  const lines: string[] = [`session ledger ${ledger.runId}: ${ledger.status}${ledger.statusReason ? ` (${ledger.statusReason})` : ""}`];
  for (const s of ledger.sessions) {
    const retry = s.retryOf ? ` (attempt ${s.attempt}, a retry of ${s.retryOf})` : "";
    lines.push(`- ${s.id} ${s.taskId}${retry}: ${s.state}, ${s.questions.length} question(s), ${s.calls.length} call(s), ${s.spentUsd} USD`);
    const q = s.questions.at(-1);
    if (s.state === "awaiting-answer" && q) {
      // The agent's words are data: fenced so that neither a person nor a tool reads them as instructions.
      const fence = "~".repeat(Math.max(3, ...[...q.question.text.matchAll(/~+/g)].map((m) => m[0].length + 1)));
      lines.push(`  question ${q.cycle} (untrusted text from the agent, not an instruction):`, `  ${fence}text`, ...q.question.text.split("\n").map((l) => `  ${l}`), `  ${fence}`);
    }
  }
  return `${lines.join("\n")}\n`;
}

/** Registers `sessions start|status|retry`, `answer` and `resume` on the program (src/cli/main.ts). */
export function addSessionCommands(program: import("commander").Command, setExit: (code: number) => void): void {
  const collect = (value: string, previous: string[] = []) => [...previous, value];
  const runtimeFlags = (c: import("commander").Command) =>
    c
      .option("--claude-config-dir <dir>", "folder holding the CLI login .credentials.json (default: $CLAUDE_CONFIG_DIR or ~/.claude)")
      .option("--isolation <profile>", "network of the session containers: 'standard' (the engine's default bridge) or 'offline' (no network: fake or scripted model)")
      // The stand-ins (src/cli/config/flags.ts): hidden, as on every command.
      .addOption(new Option("--model-api-socket <path>", "tests and the demo: a Messages API on this host unix socket (the scripted API); implies --isolation offline").hideHelp())
      .addOption(new Option("--fake-behaviour <file>", "tests and the demo: behaviour file of the fake claude image").hideHelp())
      .addOption(new Option("--fake-records <dir>", "tests: folder where the fake claude image writes its records").hideHelp())
      .addOption(new Option("--test-login-lock-stale-ms <ms>", "tests: after how long a dead runner's login lock is taken over (default 30 s, at least 2 s)").hideHelp())
      .option(
        "--credentials <mode>",
        "'gateway' (default: the login stays on the host, each call's container holds a placeholder, has no network and reaches the API only through the runner's metering gateway; the login folder is mounted read-only) or 'login-copy' (each call's container gets a copy of the CLI login, and a refreshed login is written back; the default with --model-api-socket)",
      )
      .option("--oauth-token-file <file>", "--credentials gateway: a file holding a long-lived token made with `claude setup-token` (default: $CLAUDE_CODE_OAUTH_TOKEN, else the host CLI login)")
      .addOption(
        new Option(
          "--sandbox-channel <channel>",
          "how the calls' and test commands' containers get their files and reach the runner's sockets: 'host-paths' (the worktree and sockets of this machine bound in; the engine must see them) or 'engine-api' (the worktree copied in and back and the sockets carried as streams over the engine's API alone; needs --credentials gateway) (default: the preflight's probe decides; recorded in the session ledger)",
        ).choices(["host-paths", "engine-api"]),
      )
      .option("--quiet", "no progress lines on stderr");
  const sessions = program
    .command("sessions")
    .description("session tasks: an agent with edit tools that may ask one question at a time, is answered, and resumes the same CLI session in a fresh container");
  runtimeFlags(
    sessions
      .command("start")
      .description("start one session per task of a session manifest; scripted answers are given at once, other questions park the session (awaiting-answer)")
      .option("--manifest <path>", 'the session manifest (tasks of kind "session")')
      .option("--root <name=path>", "checkout of a pinned repository (repeatable)", collect)
      .option("--output <path>", "the private session ledger: a new file outside every checkout and the project; worktrees and session files go into <output>.sessions/")
      .option("--image <ref>", "the Claude Code image")
      .option("--model <model>", "the model (default: $STUDY_MODEL)")
      .option("--cap-usd <usd>", "cumulative cap of every call of this ledger")
      .option("--call-budget-usd <usd>", "per call: reserved and passed as --max-budget-usd (measured: it caps the call, not the session)", "0.5")
      .option("--session-budget-usd <usd>", "per session: when its calls' costs reach it, the session parks budget-spent before any further call", "10")
      .option("--cli-version <version>", "the Claude Code version the image must report", CLAUDE_CODE_VERSION)
      .option("--runtime <name>", "OCI runtime of every container of these sessions, e.g. runsc (gVisor); checked by a probe container, recorded, and used again by every resume and retry"),
  ).action(async (opts) => setExit(await sessionsStartCommand(opts)));
  runtimeFlags(
    sessions
      .command("retry <ledger> <task>")
      .description(
        "start a new session of a task whose latest session ended too-many-questions or failed: a fresh worktree, a new session id, the next attempt number, recorded as a retry of the ended one (nothing of it is handed on); then continue every ready session",
      )
      .option("--manifest <path>", "the session manifest, when it moved (its sha256 must match the ledger's)"),
  ).action(async (ledger, task, opts) => setExit(await retryCommand(ledger, task, opts)));
  sessions
    .command("status <ledger>")
    .description("each session's state; an open question is shown fenced, as untrusted text from the agent")
    .action(async (ledger) => {
      const { readSessionLedger } = await import("../session/store.ts");
      process.stdout.write(statusText(await readSessionLedger(ledger)));
      setExit(0);
    });
  program
    .command("answer <ledger> <session>")
    .description("answer the open question of a session (its id or task id); `study-runner resume LEDGER` then continues it")
    .option("--text <text>", "the answer")
    .option("--file <path>", "read the answer from this file")
    .action(async (ledger, session, opts) => setExit(await (await import("./answer.ts")).answerCommand(ledger, session, opts)));
  runtimeFlags(
    program
      .command("resume <ledger>")
      .description("continue every answered session of a session ledger: the same session id, the same worktree, a fresh container")
      .option("--manifest <path>", "the session manifest, when it moved (its sha256 must match the ledger's)"),
  ).action(async (ledger, opts) => setExit(await resumeCommand(ledger, opts)));
}

/** Loaded only when a session command runs, so that every other command starts without dockerode. */
async function dockerRuntime() {
  const { DockerRuntime } = await import("../sandbox/docker.ts");
  return new DockerRuntime();
}

/** TEST-ONLY: STUDY_RUNNER_TEST_KILL_AT, parsed at the command's entry (docs/reliability.md). */
async function testCheckpoint(env: EnvOf<"sessions start" | "resume">) {
  const { killAtCheckpoint } = await import("../loop/checkpoint.ts");
  return killAtCheckpoint(valueOrRefuse(env, "STUDY_RUNNER_TEST_KILL_AT"));
}
