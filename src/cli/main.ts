import { DEFAULT_ADJUDICATOR_MODELS } from "../cost/models.ts";
import { Command, CommanderError, Option } from "commander";
import { EvidenceError, ExitCode, FaultError, RefusalError, UsageError, errorMessage } from "../util/errors.ts";
import { DEMO_MANIFEST, runnerVersion } from "../util/paths.ts";
import { DEFAULT_ATTEMPT_BUDGET_USD } from "./config/execution.ts";
import { COMMAND_FLAGS, commandFlags, type CommandName } from "./config/flags.ts";
import { environmentHelp, parseEnvironment, PROGRAM_VARIABLES } from "./config/environment.ts";
import { CLAUDE_CODE_VERSION, claudeCodeImageRef } from "../claude/version.ts";
import { DEFAULT_EGRESS_ALLOW } from "../isolation/policy.ts";
import { ArmSchema, TransportSchema } from "../terms/terms.ts";
import { formatByteBound, STDOUT_LIMIT_BYTES } from "../terms/limits.ts";
import { exitCodeHelp } from "./exit-codes.ts";
import { printable } from "../util/printable.ts";
import { addSessionCommands } from "./session.ts";
import { dropOutputNobodyReads, keepFileSizeLimitAWriteError } from "./signals.ts";

/**
 * Writes to stderr; the one place the CLI reports problems to a person. A message may echo input
 * (a name, a path, a flag's value), so every line of it is printable (contract R189): no control
 * or bidirectional character reaches the terminal raw. Its own line breaks stay line breaks.
 */
function report(lines: string | readonly string[]): void {
  for (const line of typeof lines === "string" ? [lines] : lines) for (const part of line.split("\n")) process.stderr.write(`study-runner: ${printable(part)}\n`);
}

const manifestOption = () => new Option("--manifest <path>", "study manifest (JSON)").default(DEMO_MANIFEST, "the bundled demo study, study/demo/manifest.json");

const collect = (value: string, previous: string[] = []) => [...previous, value];

type SetExit = (code: number) => void;

const LOGIN_FOLDER_HELP = "folder holding the CLI login .credentials.json (default: $CLAUDE_CONFIG_DIR or ~/.claude)";

/** `--max-export-files` and `--max-export-bytes`, the same on every command that exports (docs/export.md, Limits). */
function exportLimitOptions(command: Command): Command {
  const refuse = "refuse (exit 2, before anything is reserved) an export of more";
  return command
    .option("--max-export-files <n>", `${refuse} files than this (docs/export.md, Limits)`, "50000")
    .option("--max-export-bytes <n>", `${refuse} bytes than this (docs/export.md, Limits)`, "500000000");
}

/** `--oauth-token-file` and the hidden gateway test flags of a command that runs CLI units through the gateway; `unit` names what the token must outlive. */
function gatewayOptions(command: Command, unit: string): Command {
  return command
    .option(
      "--oauth-token-file <file>",
      `--credentials gateway: a file holding a long-lived token made with \`claude setup-token\` (or set CLAUDE_CODE_OAUTH_TOKEN); default: the host CLI login's access token, which must outlive each ${unit}`,
    )
    .addOption(new Option("--test-gateway-upstream <url>", "tests: the gateway's upstream instead of https://api.anthropic.com (an https:// origin)").hideHelp())
    .addOption(new Option("--test-gateway-ca <file>", "tests: a PEM CA the gateway trusts for --test-gateway-upstream").hideHelp());
}

/** `--quiet` and the hidden fake-image flags (CI and tests). */
function quietAndFakeOptions(command: Command): Command {
  return command
    .option("--quiet", "no progress lines on stderr")
    .addOption(new Option("--fake-behaviour <file>", "CI/tests: behaviour file for the fake claude image").hideHelp())
    .addOption(new Option("--fake-records <dir>", "CI/tests: folder where the fake claude image writes its records").hideHelp());
}

const RUN_HELP_AFTER = `
STUDY_MODEL and STUDY_BUDGET_USD are required to execute; a model without a price row is refused by run,
doctor and a dry run given it (exit 2) before anything is spent.

${exitCodeHelp()}

Examples:
  study-runner --dry-run --pilot
  study-runner --dry-run --run --root ledgerlite=../ledgerlite --root queuekit=../queuekit --root routekit=../routekit
  STUDY_MODEL=claude-haiku-5-5 STUDY_BUDGET_USD=1 study-runner --pilot --approve-budget --transport cli \\
    --root ledgerlite=../ledgerlite --output ~/study-ledgers/pilot.json`;

/** `run`'s visible flags up to the container settings: what to run, on which checkouts, into which ledger, in which image. */
function runStudyOptions(command: Command): Command {
  command
    .addOption(manifestOption())
    .option("--dry-run", "validate the matrix (and checkouts given with --root) without network, credentials or Claude processes")
    .option("--pilot", "the pilot: the first task, both scenarios, one repetition (2 attempts)")
    .option("--run", "the full study: every task x repetition x scenario")
    .option("--approve-budget", "required to spend: confirms STUDY_BUDGET_USD is the approved cumulative cap")
    .addOption(new Option("--transport <name>", "provider path: 'cli' (Claude Code in a container, the pilot transport) or 'http' (Messages API)").choices(TransportSchema.options).default("http"))
    .option("--root <name=path>", "checkout of a pinned repository (repeatable); checked clean and at its pin", collect);
  return exportLimitOptions(command)
    .option("--output <path>", "the private ledger: a new file outside every checkout and outside this project")
    .option("--attempt-budget-usd <usd>", "per-attempt limit, reserved and passed as --max-budget-usd", String(DEFAULT_ATTEMPT_BUDGET_USD))
    .option("--cli-version <version>", "the Claude Code version the image must report", CLAUDE_CODE_VERSION)
    .option("--image <ref>", "the Claude Code image attempts run in (build it with `study-runner image build`)", claudeCodeImageRef());
}

/** `run`'s container flags: network, runtime, CPUs, concurrency, the login and how attempts reach the API. */
function runContainerOptions(command: Command): Command {
  command
    .addOption(
      new Option(
        "--isolation <profile>",
        "network of attempt containers (docs/isolation.md): 'standard' (the engine's default bridge, for a real pilot), 'strict' (no network; out only through the runner's proxy to allowlisted hosts on port 443) or 'offline' (no way out: fake or scripted model)",
      )
        .choices(["standard", "strict", "offline"])
        .default("standard"),
    )
    .option("--egress-allow <hosts>", `--isolation strict: host names the proxy allows on port 443, comma-separated (repeatable; replaces the default ${DEFAULT_EGRESS_ALLOW.join(",")})`, collect)
    .option(
      "--runtime <name>",
      "OCI runtime of attempt containers, e.g. runsc (gVisor, docs/isolation.md) where the engine has it registered; the run refuses to start when it is missing or when a probe container under it cannot reach what the attempts need (their network, the bind-mounted sockets); recorded in the ledger (default: the engine's default runtime, recorded by name)",
    )
    .addOption(
      new Option(
        "--sandbox-channel <channel>",
        "how attempt containers get their files and reach the runner's sockets: 'host-paths' (folders of this machine bound in; the engine must see them) or 'engine-api' (content copied in and the sockets carried as streams over the engine's API alone, for an engine that shares no files with the runner; needs --credentials gateway) (default: the preflight's probe decides; recorded in the ledger)",
      ).choices(["host-paths", "engine-api"]),
    )
    .option("--cpus <n>", "CPUs each attempt container may use (Docker's --cpus, e.g. 0.5 or 2); recorded in the ledger", "1")
    .option(
      "--concurrency <n>",
      "cli transport: attempts running at once (default 1); above 1 the two arms of a task x repetition start together, each attempt's whole limit stays reserved while it runs, and a 429/529 slows new starts. Refused while attempts get a copy of the CLI login (two containers would hold one single-use refresh token)",
      "1",
    )
    .option("--claude-config-dir <dir>", LOGIN_FOLDER_HELP)
    .addOption(
      new Option(
        "--credentials <mode>",
        "cli transport (docs/gateway.md): 'gateway' (default: the login stays on the host, containers hold a placeholder, have no network and reach the API only through the runner's metering gateway, which refuses a request before it could pass the attempt's budget) or 'login-copy' (each container gets a copy of the CLI login; needed for --isolation standard/strict to mean anything)",
      ).choices(["gateway", "login-copy"]),
    );
  return gatewayOptions(command, "attempt");
}

/** `run`'s last flags: the doc-bridge engine, the hidden test knobs, the http transport's prices. */
function runRestOptions(command: Command): Command {
  command.option(
    "--doc-bridge-command <json>",
    'the doc-bridge engine as a JSON array, run with each checkout as cwd, e.g. \'["node","/opt/ak/bin/ak-docs.js","mcp"]\' (default: the bundled reference server)',
  );
  return quietAndFakeOptions(command)
    .addOption(new Option("--test-attempt-timeout-ms <ms>", "tests: a shorter attempt timeout than the contract's five minutes").hideHelp())
    .addOption(new Option("--test-login-lock-timeout-ms <ms>", "tests: how long an attempt waits for a CLI login locked by another run (default ten minutes)").hideHelp())
    .addOption(new Option("--test-login-lock-stale-ms <ms>", "tests: after how long a dead run's login lock is taken over (default 30 s, at least 2 s)").hideHelp())
    .addOption(new Option("--test-memory-limit-mb <mb>", "tests: the attempt container's memory limit (default 2048)").hideHelp())
    .addOption(new Option("--test-home-size-mb <mb>", "tests: the size of the attempt's tmpfs HOME (default 64)").hideHelp())
    .addOption(
      new Option("--model-api-socket <path>", "conformance/demo: a Messages API (e.g. the scripted one) on this unix socket, reached through the in-container relay with no network").hideHelp(),
    )
    .addOption(new Option("--api-base-url <url>", "tests: the http transport's Messages API base (http://127.0.0.1:<port>, http://localhost:<port> or https://api.anthropic.com)").hideHelp())
    .option("--input-price-usd-per-mtok <usd>", "http transport: upper input price per million tokens (or STUDY_INPUT_PRICE_USD_PER_MTOK)")
    .option("--output-price-usd-per-mtok <usd>", "http transport: upper output price per million tokens (or STUDY_OUTPUT_PRICE_USD_PER_MTOK)");
}

/** `run`, the default command: a dry run, the pilot or the full study. */
function addRunCommand(program: Command, setExit: SetExit): void {
  const run = program.command("run", { isDefault: true }).description("validate (--dry-run) or execute (--pilot / --run) a study; the default command");
  runRestOptions(runContainerOptions(runStudyOptions(run)))
    .addHelpText("after", RUN_HELP_AFTER)
    .action(async (opts) => setExit(await (await import("./run.ts")).runCommand(opts)));
}

const DOCTOR_HELP_AFTER = `
One line per check: node, git, docker (and which engine), image, claude-version, login (never the token),
manifest, root:<name> for every planned or given checkout, doc-bridge (the run's own preflight), output,
transport, model (STUDY_MODEL), budget (STUDY_BUDGET_USD), attempts (the per-attempt limit and how many
attempts the cap holds). A failed check names its fix. Exit 0 when a run could start, 2 otherwise.

Example:
  STUDY_MODEL=claude-haiku-5-5 STUDY_BUDGET_USD=1 study-runner doctor --pilot --transport cli \\
    --root ledgerlite=../ledgerlite --output ~/study-ledgers/pilot.json`;

/** `doctor`: the run's own checks without spending anything. */
function addDoctorCommand(program: Command, setExit: SetExit): void {
  const doctor = program
    .command("doctor")
    .description("check, without spending anything or starting an attempt, everything a run with the same flags needs; exit 0 only when it could start")
    .addHelpText("after", DOCTOR_HELP_AFTER)
    .addOption(manifestOption())
    .option("--pilot", "check for the pilot (the default)")
    .option("--run", "check for the full study")
    .addOption(new Option("--transport <name>", "as for run: 'cli' or 'http'").choices(TransportSchema.options).default("http"))
    .option("--root <name=path>", "checkout of a pinned repository (repeatable)", collect);
  exportLimitOptions(doctor)
    .option("--output <path>", "the ledger path the run would be given")
    .option("--attempt-budget-usd <usd>", "per-attempt limit", String(DEFAULT_ATTEMPT_BUDGET_USD))
    .option("--cli-version <version>", "the Claude Code version the image must report", CLAUDE_CODE_VERSION)
    .option("--image <ref>", "the Claude Code image attempts run in", claudeCodeImageRef())
    .option("--claude-config-dir <dir>", LOGIN_FOLDER_HELP)
    .option("--doc-bridge-command <json>", "the doc-bridge engine as a JSON array (default: the bundled reference server)")
    .addOption(new Option("--isolation <profile>", "as for run; 'strict' adds an isolation check").choices(["standard", "strict", "offline"]).default("standard"))
    .option("--egress-allow <hosts>", "as for run (--isolation strict only)", collect)
    .option("--runtime <name>", "as for run; adds a check that the engine offers this OCI runtime and runs one probe container under it")
    .option("--json", "one JSON object instead of lines")
    .addOption(new Option("--test-gateway-upstream <url>", "tests: the gateway's upstream the model-api check probes instead of https://api.anthropic.com").hideHelp())
    .addOption(new Option("--test-gateway-ca <file>", "tests: a PEM CA the gateway trusts for --test-gateway-upstream").hideHelp())
    .action(async (opts) => setExit(await (await import("./doctor.ts")).doctorCommand(opts)));
}

/** `plan` and `export`: what a study would run, and what one attempt would see. */
function addPlanAndExportCommands(program: Command, setExit: SetExit): void {
  program
    .command("plan")
    .description("print the fixed, counterbalanced plan (task, scenario, repetition in run order)")
    .addOption(manifestOption())
    .option("--pilot", "the pilot plan instead of the full study")
    .option("--json", "one JSON array instead of a table")
    .action(async (opts) => setExit(await (await import("./plan.ts")).planCommand(opts)));

  const exportCommand = program
    .command("export")
    .description("write the export an attempt would see (one repository at its pin, public files only, read-only) into a new folder")
    .addOption(manifestOption())
    .requiredOption("--root <name=path>", "checkout of the repository (repeatable)", collect)
    .requiredOption("--repository <name>", "which repository of the manifest to export")
    .requiredOption("--out <dir>", "a folder that does not exist yet; its files end up 0444, folders 0555");
  exportLimitOptions(exportCommand).action(async (opts) => setExit(await (await import("./export.ts")).exportFlagsCommand(opts)));
}

/** `image build` and `image probe`. */
function addImageCommands(program: Command, setExit: SetExit): void {
  const image = program.command("image").description("build or probe the Claude Code image attempts run in");
  image
    .command("build")
    .description("build the pinned image offline (FROM scratch: the native binary, its glibc files, Node for the helpers) and probe its version")
    .option("--install", "first install @anthropic-ai/claude-code-linux-x64 at the pinned version from the npm registry into the cache")
    .option("--claude-binary <path>", "use this native claude binary instead of searching node_modules and the cache")
    .option("--fake", "build the fake claude image used by the demo and CI instead")
    .option("--version <version>", "the Claude Code version", CLAUDE_CODE_VERSION)
    .action(async (opts) => setExit(await (await import("./image.ts")).imageBuildCommand(opts)));
  image
    .command("probe <ref>")
    .description("run `claude --version` in a throwaway hardened container of the image")
    .action(async (ref) => setExit(await (await import("./image.ts")).imageProbeCommand(ref)));
}

const CALIBRATE_HELP_AFTER = `
What it measures, on V's real binary in the runner's own image, containers and model gateway,
against a scripted Messages API (offline: no network, no credential, no cost):
  - every flag the runner passes, in V's own \`claude --help\`
  - V's price table, read out of the binary (one probe run per model name it carries)
  - the init event of each kind of run (an attempt of each arm, the adjudicator, a session's start
    and resume) and every request shape the CLI sends (target, header names, anthropic-beta values, body)
  - which \`@\` imports of the working folder's CLAUDE.md reach the request, with and without --restricted
  - the adjudicator's structured output (--json-schema), a resume in a fresh container (history sent,
    total_cost_usd cumulative), and the retry events after a 429 and a 529
It installs V from the npm registry into the cache folder first when missing (recording the
tarball's integrity and the binary's sha256) and builds its image. It writes the sealed profile to
$STUDY_RUNNER_CACHE/profiles/claude-code-V.json (default ~/.cache/study-runner), atomically, and
prints its difference against the bundled profile of the pin: read it before trusting V.
Runs, the adjudicator, sessions and the doctor with --cli-version V then use that profile.

Refused with exit 2, nothing written, when V cannot serve a study: a flag the runner needs is gone,
a scenario does not complete, the init lacks what the transcript rules read, a price cannot be read,
the retry events are not where the runner's backoff reads them. A version calibrated without
structured output or a cumulative resume is refused later by \`adjudicate\` or \`sessions\`.

Example:
  study-runner calibrate --cli-version 2.1.332
  study-runner image build --version 2.1.332 && study-runner doctor --pilot --transport cli \\
    --cli-version 2.1.332 --image study-runner/claude-code:2.1.332 …

${exitCodeHelp()}`;

/** `calibrate`: measures a Claude Code version into its calibration profile. */
function addCalibrateCommand(program: Command, setExit: SetExit): void {
  program
    .command("calibrate")
    .description(
      "measure a Claude Code version (its flags, prices, init events, request shapes, imports, structured output, resume and retries) into its calibration profile, offline, and print the difference against the pin's",
    )
    .requiredOption("--cli-version <version>", `the Claude Code version to measure, e.g. ${CLAUDE_CODE_VERSION} (installed from the npm registry when missing)`)
    .option("--quiet", "no progress lines on stderr")
    .addHelpText("after", CALIBRATE_HELP_AFTER)
    .action(async (opts) => setExit(await (await import("./calibrate.ts")).calibrateCommand(opts)));
}

/** `classify`: a saved transcript re-checked offline. */
function addClassifyCommand(program: Command, setExit: SetExit): void {
  program
    .command("classify <transcript>")
    .description("re-check a saved stream-json transcript offline with the runner's own rules; prints facts and status (never the answer)")
    .addOption(new Option("--arm <arm>", "which arm the attempt belonged to").choices(ArmSchema.options).makeOptionMandatory())
    .requiredOption("--model <model>", "the model the attempt requested, e.g. claude-haiku-5-5")
    .option("--tools <names>", "comma-separated exact init tool set (default: the arm's tools)")
    .option("--cli-version <version>", "require this claude_code_version in the init event")
    .option("--exit-code <n>", "the process's exit code", "0")
    .option("--timed-out", "the attempt was killed by the timeout")
    .option("--truncated", `stdout was cut at the ${formatByteBound(STDOUT_LIMIT_BYTES)} bound`)
    .action(async (file, opts) => setExit(await (await import("./classify.ts")).classifyCommand(file, opts)));
}

/** `ledger verify` and `ledger check`: read a private record without changing it. */
function addLedgerCommands(program: Command, setExit: SetExit): void {
  const ledgerCommand = program.command("ledger").description("read a private ledger without changing it");
  ledgerCommand
    .command("verify <path>")
    .description(
      "read every stored transcript again (<ledger>.transcripts/) with the runner's rules, recompute each observation's facts, status, cost and charge, and compare them with the ledger field by field, with each transcript's sha256; never writes",
    )
    .option(
      "--adjudication <path>",
      "also verify this adjudication record: bound to the ledger as report requires, its runs against <record>.transcripts/ (facts, status, charge, verdict), and every decision of the runner derived again",
    )
    .option("--manifest <path>", "the manifest the run was given, when it is no longer where the ledger records it (its sha256 must be the protocol hash)")
    .option("--profile <file>", "the calibration profile the run used, when it is neither bundled nor in this machine's cache (its sha256 must be the ledger's profileSha256)")
    .option("--report <report.json>", "also check that the private files (ledger, transcripts, manifest, adjudication record) are the ones this published report was made from")
    .option(
      "--digest <hex>",
      "also find the settled state this evidence digest (printed by the run after each settled observation) was taken of, and name the first observation since which the files differ",
    )
    .option("--json", "one JSON object instead of lines")
    .addHelpText(
      "after",
      "\nAlso checks the ledger's invariants (docs/contract.md), the protocol hash against the manifest's bytes, the observations against the plan the manifest implies, that the transcripts folder holds one file per observation and nothing else, and every gateway request record against its transcript.\n\nExit codes: 0 everything agrees, 1 differences (each names the observation and the field, or the file), 2 unreadable.",
    )
    .action(async (path, opts) => setExit(await (await import("./ledger.ts")).ledgerVerifyCommand(path, opts)));
  ledgerCommand
    .command("check <path>")
    .description(
      "validate a ledger, session ledger or adjudication record (its schema and the invariants of docs/contract.md: charges, counts, open reservations, the cap flag, metered spend, events, status) and say whether its run finished or was interrupted, naming any open attempt or call; never writes",
    )
    .option("--json", "one JSON object instead of lines")
    .addHelpText("after", "\nExit codes: 0 valid and finished, 4 valid but interrupted (status running), 1 invalid, 2 unreadable.")
    .action(async (path, opts) => setExit(await (await import("./ledger.ts")).ledgerCheckCommand(path, opts)));
}

/** `schemas`: the JSON Schemas generated from the zod schemas. */
function addSchemasCommand(program: Command, setExit: SetExit): void {
  program
    .command("schemas")
    .description("write the JSON Schemas of the manifest and the ledger (generated from the zod schemas)")
    .option("--write <dir>", "folder to write them into", "docs/schemas")
    .action(async (opts) => {
      const written = await (await import("../schemas/json-schemas.ts")).writeSchemas(opts.write);
      process.stdout.write(written.join("\n") + "\n");
      setExit(ExitCode.ok);
    });
}

const ADJUDICATE_HELP_AFTER = `
STUDY_ADJUDICATION_BUDGET_USD is required; STUDY_ADJUDICATOR_MODEL defaults to ${DEFAULT_ADJUDICATOR_MODELS[0]}, or
${DEFAULT_ADJUDICATOR_MODELS[1]} when that answered.

Exit codes: 0 every observation has an outcome, 1 an adjudicator run did not complete (adjudication blocked; the rest is
            recorded blocked), 2 bad input or a refused start (nothing spent), 3 the runner's own fault.
Correctness is agent-adjudicated: there is no human review.`;

/** `adjudicate`'s flags up to the image: which ledger, into which record, with which budget and checkouts. */
function adjudicateInputOptions(command: Command): Command {
  command
    .option("--ledger <path>", "the private ledger to adjudicate (only read, never modified)")
    .option("--output <path>", "the private adjudication record: a new file outside every checkout and outside this project")
    .option("--approve-budget", "required to spend: confirms STUDY_ADJUDICATION_BUDGET_USD is the approved cumulative cap")
    .option("--seed <n>", "seed of the shuffled item order, 0-4294967295 (default: drawn at random); recorded")
    .option("--manifest <path>", "the manifest the run used (default: the path the ledger records); its hash must equal the ledger's protocol hash")
    .option("--root <name=path>", "checkout holding a repository's pinned commit (repeatable; default: the checkouts the ledger records)", collect);
  return exportLimitOptions(command)
    .option(
      "--item-budget-usd <usd>",
      "per-item limit, reserved and passed as --max-budget-usd; with --credentials gateway it must hold the gateway's bound of one request (about 1.4 USD for claude-sonnet-5-5), else the start is refused",
      String(DEFAULT_ATTEMPT_BUDGET_USD),
    )
    .option("--force-same-model", "adjudicate with the answering model (or allow STUDY_ADJUDICATOR_MODEL to equal it): a departure from the protocol, recorded and stated in every report")
    .option("--image <ref>", "the Claude Code image (default: the image the ledger records)")
    .option("--cli-version <version>", "the Claude Code version the image must report (default: the ledger's)");
}

/** `adjudicate`'s container flags: network, runtime, the login and how the adjudicator reaches the API. */
function adjudicateContainerOptions(command: Command): Command {
  command
    .addOption(
      new Option(
        "--isolation <profile>",
        "network of adjudicator containers with --credentials login-copy: 'standard' (the engine's default bridge) or 'offline' (no network: fake or scripted model); with the gateway every container has network none",
      )
        .choices(["standard", "offline"])
        .default("standard"),
    )
    .addOption(
      new Option(
        "--sandbox-channel <channel>",
        "how attempt containers get their files and reach the runner's sockets: 'host-paths' (folders of this machine bound in; the engine must see them) or 'engine-api' (content copied in and the sockets carried as streams over the engine's API alone, for an engine that shares no files with the runner; needs --credentials gateway) (default: the preflight's probe decides; recorded in the ledger)",
      ).choices(["host-paths", "engine-api"]),
    )
    .option("--runtime <name>", "OCI runtime of adjudicator containers, e.g. runsc (gVisor) (default: the runtime the ledger records); checked by a probe container before anything is spent")
    .option("--claude-config-dir <dir>", LOGIN_FOLDER_HELP)
    .addOption(
      new Option(
        "--credentials <mode>",
        "as for `run` (docs/gateway.md): 'gateway' (default: the login stays on the host, each adjudicator container holds a placeholder, has no network and reaches the API only through the runner's metering gateway, which refuses a request before it could pass the item's budget) or 'login-copy' (each container gets a copy of the CLI login)",
      ).choices(["gateway", "login-copy"]),
    );
  return quietAndFakeOptions(gatewayOptions(command, "item")).addOption(new Option("--test-item-timeout-ms <ms>", "tests: a shorter timeout than five minutes").hideHelp());
}

/** `adjudicate`: blind agent adjudication of a ledger. */
function addAdjudicateCommand(program: Command, setExit: SetExit): void {
  const adjudicate = program
    .command("adjudicate")
    .description("blind agent adjudication of a ledger: one read-only Claude Code run per answer, scenario never named, structured verdicts into a separate private record");
  adjudicate.addHelpText("after", ADJUDICATE_HELP_AFTER);
  adjudicateContainerOptions(adjudicateInputOptions(adjudicate)).action(async (opts) => setExit(await (await import("./adjudicate.ts")).adjudicateCommand(opts)));
}

/** `report`: the published report, or the private pair viewer. */
function addReportCommand(program: Command, setExit: SetExit): void {
  program
    .command("report")
    .description("report a run from its ledger and, when given, its adjudication record: statuses, outcomes per arm, task-level statistics (docs/report.md), behaviour per arm, totals")
    .option("--ledger <path>", "the private ledger (only read)")
    .option("--adjudication <path>", "the adjudication record of that ledger (only read)")
    .option("--manifest <path>", "the manifest the run used, for the plan and the pilot extrapolation (default: the path the ledger records)")
    .addOption(
      new Option(
        "--format <format>",
        "what to print on stdout; inspect: instead write the study as Inspect eval logs (one PRIVATE .json log per arm, mode 600, created exclusively) into <ledger>.inspect/ or --out-dir, for `inspect view` (docs/report.md)",
      )
        .choices(["markdown", "json", "html", "inspect"])
        .default("markdown"),
    )
    .option(
      "--out-dir <dir>",
      "write report.md, report.json and report.html into this folder (it may exist; the files may not) instead of printing; with --format inspect: the folder of the logs (outside every checkout and the project)",
    )
    .option("--out <dir>", "the same as --out-dir")
    .option(
      "--private",
      "instead: write the PRIVATE pair viewer <ledger>.pairs.html beside the ledger (mode 600, created exclusively): each task x repetition's two attempts side by side with tool calls and their inputs, answers and verdicts; never publish it",
    )
    .option("--seed <n>", "seed of the cluster bootstrap (an integer 0..4294967295; the report states it)", "20261201")
    .option("--effect <points...>", "score effects (points, > 0 and ≤ 1) the planning table sizes a study for", ["0.1", "0.2", "0.3"])
    .action(async (opts) => setExit(await (await import("./report.ts")).reportCommand(opts)));
}

/** `demo`: the bundled study end to end with a fake or scripted model. */
function addDemoCommand(program: Command, setExit: SetExit): void {
  program
    .command("demo")
    .description("run the bundled demo study end to end: demo corpus, doc-bridge indexes, the fake claude image (no network, no cost), ledger")
    .option(
      "--workdir <dir>",
      "where the demo corpus, test login and ledgers go (default: study-runner-demo-<uid> under the system temp dir); one demo at a time per folder, a second one exits 2 naming the first one's pid",
    )
    .option("--pilot", "run the pilot (2 attempts) instead of the full study (36)")
    .option(
      "--real-cli",
      "the real pinned Claude Code binary (installed from npm once, image built offline) with a scripted model behind the runner's model gateway (a loopback TLS port, a throw-away CA and test token), instead of the fake image",
    )
    .option(
      "--cli-version <version>",
      "with --real-cli: the Claude Code version to run instead of the pin; its calibration profile must exist (bundled, or made with `study-runner calibrate --cli-version V`), else exit 2",
    )
    .option("--sessions", "run the two session tasks instead (an invoice rounding question, a discount-tier question): start, question, scripted answer, resume in a fresh container, done, tests")
    .option("--concurrency <n>", "attempts running at once (the demo's model is a test stand-in, so no login is shared)", "1")
    .option(
      "--runtime <name>",
      "OCI runtime of every container, e.g. runsc (gVisor, docs/isolation.md); the study, the adjudication and the sessions refuse before starting when the runtime cannot run them",
    )
    .addOption(
      new Option(
        "--sandbox-channel <channel>",
        "how attempt containers get their files and reach the runner's sockets: 'host-paths' (folders of this machine bound in; the engine must see them) or 'engine-api' (content copied in and the sockets carried as streams over the engine's API alone, for an engine that shares no files with the runner; needs --credentials gateway) (default: the preflight's probe decides; recorded in the ledger)",
      ).choices(["host-paths", "engine-api"]),
    )
    .option("--quiet", "no progress lines on stderr")
    .action(async (opts) => setExit(await (await import("./demo.ts")).demoCommand(opts)));
}

/** The root program: its description, version, error output and exit-code help. */
function rootProgram(): Command {
  return (
    new Command("study-runner")
      .description(
        "Run paired studies of the Claude Code CLI: the same questions over the same pinned repositories, answered " +
          "once with repository tools alone and once with the doc-bridge MCP server, each attempt in a fresh container.",
      )
      .version(`study-runner ${runnerVersion()} (pinned Claude Code CLI ${CLAUDE_CODE_VERSION})`, "-V, --version", "print the runner's version and the Claude Code version it pins")
      // --version only before a command: `image build --version <version>` keeps its own meaning.
      .enablePositionalOptions()
      .showHelpAfterError("(run `study-runner --help` for usage)")
      .configureOutput({ writeErr: (s) => process.stderr.write(s) })
      .exitOverride()
      .addHelpText("after", `\n${exitCodeHelp()}`)
  );
}

/** A command's words on the command line, e.g. `sessions start`. */
function commandPath(command: Command): string {
  const words: string[] = [];
  for (let c: Command | null = command; c?.parent; c = c.parent) words.unshift(c.name());
  return words.join(" ");
}

/** Every command that runs an action (not a group such as `ledger`). */
function leafCommands(command: Command): Command[] {
  return command.commands.flatMap((sub) => (sub.commands.length ? leafCommands(sub) : [sub]));
}

/** The whole command line, one step per command in the order `--help` lists them; `setExit` receives each action's exit code. */
export function buildProgram(setExit: SetExit): Command {
  const program = rootProgram();
  addRunCommand(program, setExit);
  addDoctorCommand(program, setExit);
  addPlanAndExportCommands(program, setExit);
  addImageCommands(program, setExit);
  addCalibrateCommand(program, setExit);
  addClassifyCommand(program, setExit);
  addLedgerCommands(program, setExit);
  addSchemasCommand(program, setExit);
  addAdjudicateCommand(program, setExit);
  addReportCommand(program, setExit);
  // Session tasks: their own manifest and ledger (src/session).
  addSessionCommands(program, setExit);
  addDemoCommand(program, setExit);
  // Every command's flags are checked against its schema before its action runs (contract R211).
  program.hook("preAction", (_root, action) => {
    commandFlags(commandPath(action) as CommandName, action.opts());
  });
  // Each command's --help lists the variables its schema declares, from the schema (contract R213).
  program.addHelpText("after", environmentHelp(PROGRAM_VARIABLES));
  for (const command of leafCommands(program)) {
    const help = environmentHelp(COMMAND_FLAGS[commandPath(command) as CommandName].environment);
    if (help) command.addHelpText("after", help);
  }
  return program;
}

/** Runs the CLI; returns the process exit code. Errors are caught once, here. */
export async function main(argv: readonly string[]): Promise<number> {
  keepFileSizeLimitAWriteError();
  dropOutputNobodyReads();
  let code: number = ExitCode.ok;
  const program = buildProgram((c) => (code = c));
  try {
    await program.parseAsync(argv as string[]);
    return code;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version exit through here with code 0.
      return err.exitCode === 0 ? ExitCode.ok : ExitCode.usage;
    }
    if (err instanceof UsageError || err instanceof RefusalError || err instanceof EvidenceError) {
      report(err.problems.length > 1 ? [err.problems.length + " problems:", ...err.problems.map((p) => "  - " + p)] : err.message);
      // Evidence that is not what the runner wrote is a difference, as `ledger verify` says it (exit 1).
      return err instanceof EvidenceError ? ExitCode.blocked : ExitCode.usage;
    }
    const code = (err as NodeJS.ErrnoException).code;
    if (err instanceof FaultError) {
      report(err.message);
    } else if (code === "ENOSPC" || code === "EDQUOT") {
      // A full disk is the host's problem, not a bug: the ledger on disk is the last complete
      // (atomic) write, so it never under-counts; say what to do.
      report(`the disk is full (${errorMessage(err)}); free space, then read the ledger with \`study-runner ledger check PATH\` before anything else`);
    } else {
      report(`internal error: ${errorMessage(err)}`);
    }
    if (parseEnvironment(PROGRAM_VARIABLES, process.env).values.STUDY_RUNNER_DEBUG) process.stderr.write(`${(err as Error).stack}\n`);
    return ExitCode.fault;
  }
}
