import { resolve } from "node:path";
import { runChild } from "../process/child.ts";
import type { LoadedManifest } from "../manifest/load.ts";
import type { ContainerRuntime } from "../sandbox/port.ts";
import type { SandboxChannel } from "../sandbox/docker-sandbox.ts";
import { probeVersion, runnerFilesProblem, runProfile } from "../image/build.ts";
import { profileFix } from "../profile/load.ts";
import { probeOciRuntime, runtimeProblem, type RuntimeNeeds, type RuntimeProbe } from "../isolation/oci-runtime.ts";
import { defaultCacheDir, findClaudeBinary, IMAGE_LABELS } from "../image/specs.ts";
import { CLAUDE_CODE_VERSION, claudeCodeImageRef } from "../claude/version.ts";
import { NATIVE_PACKAGE } from "../image/install.ts";
import { inspectLogin, resolveLogin, RELOGIN } from "../credentials/login.ts";
import { checkRoot } from "../export/root-check.ts";
import type { ExportLimits } from "../export/export.ts";
import { EngineDidNotStartError, preflightDocBridge, referenceEngineCommand, referenceIndexCommand, type CheckoutToProbe } from "../mcp/preflight.ts";
import { checkOutputPath } from "../ledger/store.ts";
import { checkExecution, type ExecutionEnvironment, type RawRunFlags } from "../cli/config/execution.ts";
import { initialBudget, reserve, type BudgetState } from "../budget/budget.ts";
import type { Mode } from "../plan/plan.ts";
import { errorMessage } from "../util/errors.ts";
import { DEFAULT_UPSTREAM, type UpstreamOptions } from "../gateway/gateway.ts";
import { probeUpstream, upstreamFix } from "../gateway/probe.ts";
import type { Transport } from "../terms/terms.ts";

/**
 * The doctor's checks: each answers one question a run's preflight would ask, through the
 * same code the run uses (checkRoot, inspectLogin, probeVersion, preflightDocBridge,
 * checkOutputPath, checkExecution), and says how to fix it when the answer is no. None
 * spends anything, reserves budget or starts an attempt; none prints a credential.
 */

export interface Check {
  /** Stable short name: node, git, docker, image, claude-version, engine-files, login, manifest, root:<name>, doc-bridge, output, transport, model-api (--transport cli), model, budget, attempts. */
  name: string;
  ok: boolean;
  /** The check could not run because one it depends on failed (then `ok` is false too). */
  skipped: boolean;
  detail: string;
  /** How to make it pass; null when it passes or was skipped. */
  fix: string | null;
}

export const pass = (name: string, detail: string): Check => ({ name, ok: true, skipped: false, detail, fix: null });
export const fail = (name: string, detail: string, fix: string): Check => ({ name, ok: false, skipped: false, detail, fix });
export const skip = (name: string, detail: string): Check => ({ name, ok: false, skipped: true, detail, fix: null });

export const MIN_NODE_MAJOR = 20;

export function checkNode(version: string = process.versions.node): Check {
  const major = Number(version.split(".")[0]);
  if (Number.isInteger(major) && major >= MIN_NODE_MAJOR) return pass("node", `Node ${version}`);
  return fail("node", `Node ${version} is older than ${MIN_NODE_MAJOR}`, `install Node ${MIN_NODE_MAJOR} or newer (package.json "engines")`);
}

/** The checkouts are read with git at their pins (ls-tree, cat-file); without git no root can be checked. */
export async function checkGit(command = "git"): Promise<Check> {
  try {
    const { stdout } = await runChild(command, ["--version"], { timeoutMs: 10_000, maxOutputBytes: 64 * 1024 });
    return pass("git", stdout.toString("utf8").trim());
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return fail("git", `\`${command} --version\` failed (${code ?? errorMessage(err)})`, "install git and put it on PATH: the checkouts are read with git at their pins");
  }
}

/**
 * Reaches the engine the way every runner command does (dockerode reads DOCKER_HOST, else
 * the default socket). A bound on the ping: an unreachable tcp:// host can hang a while.
 */
export async function checkDocker(connect: () => ContainerRuntime, dockerHost: string | undefined, timeoutMs = 15_000): Promise<{ check: Check; runtime?: ContainerRuntime }> {
  const from = dockerHost ? `DOCKER_HOST=${dockerHost}` : "the default socket (DOCKER_HOST is not set)";
  let timer: NodeJS.Timeout | undefined;
  try {
    const runtime = connect();
    const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs)));
    const info = await Promise.race([runtime.ping(), timeout]);
    const via = dockerHost ? "from DOCKER_HOST" : "the default socket";
    const platform = info.os && info.arch ? ` on ${info.os}/${info.arch}` : "";
    return { check: pass("docker", `Docker ${info.serverVersion} (API ${info.apiVersion})${platform} at ${info.endpoint}, ${via}`), runtime };
  } catch (err) {
    const fix = dockerHost
      ? "start the engine DOCKER_HOST names, or correct DOCKER_HOST (unix:///path/docker.sock, tcp://host:2376 with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, ssh://user@host)"
      : "start the Docker engine and let this user use its socket (e.g. the docker group), or set DOCKER_HOST to the engine's address";
    return { check: fail("docker", `no Docker engine answers at ${from}: ${errorMessage(err)}`, fix) };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * `--runtime NAME`: the engine must offer it, and, given the image, one probe container under it
 * must show what the run's containers need (src/isolation/oci-runtime.ts), as the run's preflight checks.
 */
export async function checkRuntime(runtime: ContainerRuntime, name: string, probe?: { image: string; labels: Record<string, string>; needs: RuntimeNeeds; channel?: SandboxChannel }): Promise<Check> {
  let offered: string[];
  try {
    offered = (await runtime.ping()).runtimes;
  } catch (err) {
    return fail("runtime", `cannot ask the engine for its runtimes: ${errorMessage(err)}`, "check the Docker engine (see the docker line)");
  }
  if (!offered.includes(name)) {
    return fail(
      "runtime",
      `the engine has no OCI runtime '${name}'; it offers ${offered.join(", ") || "none"}`,
      `install ${name} and register it in the engine's daemon.json "runtimes" (for gVisor: docs/isolation.md, "gVisor"; then restart dockerd), or drop --runtime`,
    );
  }
  if (!probe) return pass("runtime", `attempt containers run under '${name}' (offered: ${offered.join(", ")}); no probe container: the image is not usable`);
  let seen: RuntimeProbe;
  try {
    seen = await probeOciRuntime(runtime, probe.image, name, probe.needs.network, probe.labels, probe.channel);
  } catch (err) {
    return fail(
      "runtime",
      `a probe container under '${name}' with network ${probe.needs.network} did not run: ${errorMessage(err).slice(0, 600)}`,
      `see docs/isolation.md, "gVisor", for how to register runsc`,
    );
  }
  const problem = runtimeProblem(name, "--runtime", probe.needs, seen);
  if (problem) return fail("runtime", problem, `see docs/isolation.md, "gVisor"`);
  const how = probe.channel === "engine-api" ? "a unix socket the engine-api relay serves in a volume" : "a bind-mounted unix socket";
  const socket = seen.socket === "ok" ? `was answered through ${how}` : `could not reach ${how} (${seen.socket}), which this run does not need`;
  return pass(
    "runtime",
    `attempt containers run under '${name}' (offered: ${offered.join(", ")}): a probe container under it started with network ${probe.needs.network}, saw kernel ${seen.kernel} and the interfaces ${seen.interfaces.join(", ")}, and ${socket}`,
  );
}

/**
 * `--isolation strict` (contract R72): the runner shares its proxy socket with the container user
 * only, so it must run as root or as that uid; the allowlist is what the proxy will let through.
 */
export function checkIsolation(profile: string, allow: readonly string[], uid: number | undefined = process.getuid?.()): Check {
  if (profile !== "strict") return pass("isolation", profile);
  if (uid !== 0 && uid !== 1000) {
    return fail(
      "isolation",
      `strict needs the runner to run as root or as uid 1000 (the container user) to share the proxy socket; it runs as uid ${uid}`,
      "run the runner as root (or as uid 1000), or choose --isolation standard or offline",
    );
  }
  return pass("isolation", `strict: no network but loopback; out only through the runner's proxy to ${allow.join(", ")} on port 443`);
}

export type FindBinary = typeof findClaudeBinary;

/** How to get `image` into the engine: the fake's build, or the real one offline when a binary is at hand. */
export async function imageFix(image: string, version: string, findBinary: FindBinary = findClaudeBinary): Promise<string> {
  const versionFlag = version === CLAUDE_CODE_VERSION ? "" : ` --version ${version}`;
  if (image.startsWith("study-runner/fake-claude:")) {
    return `study-runner image build --fake${versionFlag} (the demo's scripted stand-in; it never calls a model)`;
  }
  const built = claudeCodeImageRef(version);
  const then = image === built ? "" : `; then pass --image ${built}`;
  let found;
  try {
    found = await findBinary({ version });
  } catch (err) {
    return `${errorMessage(err)}; remove what is there, then run study-runner image build --install${versionFlag}${then}`;
  }
  if (found) return `study-runner image build${versionFlag} (offline: it uses the binary at ${found.path})${then}`;
  return (
    `study-runner image build --install${versionFlag} (downloads ${NATIVE_PACKAGE}@${version}, about 257 MB, from the npm registry into ` +
    `${defaultCacheDir()}), or study-runner image build --claude-binary PATH; a host without registry access loads the image ` +
    `(docker save on a machine that built it, docker load here), or builds docker/claude-code/Dockerfile (docker/README.md)${then}`
  );
}

export async function checkImage(runtime: ContainerRuntime, image: string, version: string, findBinary?: FindBinary): Promise<Check> {
  let info;
  try {
    info = await runtime.inspectImage(image);
  } catch (err) {
    return fail("image", `cannot inspect ${image}: ${errorMessage(err)}`, "check the Docker engine (see the docker line)");
  }
  if (!info) return fail("image", `${image} is not in the Docker engine`, await imageFix(image, version, findBinary));
  const kind = info.labels[IMAGE_LABELS.kind] ?? "unlabelled";
  return pass("image", `${image} is present (${info.id.slice(0, 19)}, ${kind})`);
}

/**
 * The route a `--transport cli` run's gateway (its default credentials) takes to the model API:
 * the run's own probe, a TLS handshake from the host with nothing sent (contract R192). `fake`:
 * the image is the fake claude, which sends no model request, so only a test upstream is probed.
 */
export async function checkModelApi(upstream: UpstreamOptions | undefined, fake: boolean): Promise<Check> {
  if (fake && upstream === undefined) return pass("model-api", "not checked: the fake claude image sends no model request");
  const host = new URL(upstream?.url ?? DEFAULT_UPSTREAM).host;
  const problem = await probeUpstream(upstream);
  if (problem) return fail("model-api", `the gateway cannot reach the model API at ${problem.host} (${problem.error})`, upstreamFix(problem.host));
  return pass("model-api", `${host}: the gateway's TLS handshake succeeded from this machine (nothing was sent)`);
}

/** The run's own probe: `claude --version` in a throwaway hardened container, then the pin comparison. */
export async function checkClaudeVersion(runtime: ContainerRuntime, image: string, expected: string, labels: Record<string, string>): Promise<Check> {
  const rebuild = `rebuild the image (study-runner image build${expected === CLAUDE_CODE_VERSION ? "" : ` --version ${expected}`})`;
  let probed;
  try {
    probed = await probeVersion(runtime, image, { labels });
  } catch (err) {
    return fail("claude-version", errorMessage(err), rebuild);
  }
  if (probed.version !== expected) {
    return fail(
      "claude-version",
      `claude --version in ${image} prints ${probed.version}; the run expects ${expected} (--cli-version)`,
      `${rebuild} and pass it with --image; change --cli-version only when the protocol moves the pin`,
    );
  }
  // The run compares every attempt with the version's calibration profile (contract R221): the doctor finds it the same way.
  let found;
  try {
    found = runProfile(probed, image, expected);
  } catch (err) {
    return fail("claude-version", errorMessage(err), profileFix(expected));
  }
  // Only the project's pin is "pinned"; any other version is what its own profile says it is.
  const which = probed.version === CLAUDE_CODE_VERSION ? "the pinned version" : `the version --cli-version asks for, not the project's pin ${CLAUDE_CODE_VERSION}`;
  return pass(
    "claude-version",
    `claude --version in ${image} prints ${probed.version} (Claude Code), ${which}, its calibration profile ${found.source} (sha256 ${found.profile.sha256.slice(0, 12)}…); binary sha256 ${probed.binarySha256.slice(0, 12)}…`,
  );
}

/**
 * Whether the engine sees the runner's folders by path (contract R200), the run's own probe, and so
 * the channel the attempts, the adjudicator and session calls take when `--sandbox-channel` does not say (contract R244).
 */
export async function checkEngineFiles(runtime: ContainerRuntime, image: string, labels: Record<string, string>): Promise<{ check: Check; channel?: SandboxChannel }> {
  let problem: string | null;
  try {
    problem = await runnerFilesProblem(runtime, image, labels);
  } catch (err) {
    return { check: fail("engine-files", `cannot probe whether the engine sees this machine's files: ${errorMessage(err)}`, "check the Docker engine (see the docker line)") };
  }
  if (problem) {
    const check = pass(
      "engine-files",
      `channel engine-api: ${problem}. Study attempts, the adjudicator and session tasks get their content copied in (and a session's worktree copied back) and reach the runner's sockets as streams over the engine's API (--credentials gateway only); --credentials login-copy needs the engine's own host or a local engine`,
    );
    return { check, channel: "engine-api" };
  }
  const check = pass(
    "engine-files",
    "channel host-paths: the engine sees this machine's files (a probe container's bind of a runner folder was accepted): attempts reach their files and sockets by path",
  );
  return { check, channel: "host-paths" };
}

const LOGIN_SOURCE = { flag: "--claude-config-dir", CLAUDE_CONFIG_DIR: "CLAUDE_CONFIG_DIR", home: "~/.claude" } as const;

/** Facts about the host login (never the token): it exists, parses, has an access token, expires in the future. */
export async function checkLogin(opts: { configDir?: string; env?: NodeJS.ProcessEnv; homeDir?: string; now?: number } = {}): Promise<Check> {
  const location = resolveLogin({ configDir: opts.configDir, env: opts.env, homeDir: opts.homeDir });
  const facts = await inspectLogin(location, { now: opts.now });
  const from = LOGIN_SOURCE[location.source];
  if (facts.problems.length) {
    return fail(
      "login",
      `${facts.problems.map((p) => p.replace(`; ${RELOGIN}`, "")).join("; ")} (the folder comes from ${from})`,
      `${RELOGIN} (--claude-config-dir DIR or CLAUDE_CONFIG_DIR=DIR, the folder holding .credentials.json)`,
    );
  }
  const left = facts.expiresAt! - (opts.now ?? Date.now());
  const refresh = facts.hasRefreshToken ? "with a refresh token" : "without a refresh token (it cannot be renewed during the run)";
  const plan = facts.subscriptionType ? `, ${facts.subscriptionType} subscription` : "";
  return pass("login", `${facts.credentialsPath} (from ${from}): OAuth login valid until ${new Date(facts.expiresAt!).toISOString()} (${duration(left)} from now), ${refresh}${plan}`);
}

function duration(ms: number): string {
  const minutes = Math.floor(ms / 60_000);
  if (minutes < 120) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  return hours < 48 ? `${hours} h` : `${Math.floor(hours / 24)} days`;
}

/** One checkout: the run's checkRoot (top of a clean work tree, HEAD at the pin, every task source public at the pin). */
export async function checkRootOf(loaded: LoadedManifest, repository: string, dir: string | undefined, neededBy: string, exportLimits?: ExportLimits): Promise<Check> {
  const { manifest } = loaded;
  const name = `root:${repository}`;
  const pin = manifest.repositories[repository];
  if (pin === undefined) {
    const known = Object.keys(manifest.repositories).join(", ");
    return fail(name, `--root ${repository}=…: '${repository}' is not a repository of the manifest`, `give checkouts of the manifest's repositories only: ${known}`);
  }
  if (dir === undefined) {
    return fail(
      name,
      `no --root ${repository}=… given; ${neededBy} needs a checkout of ${repository} at ${pin}`,
      `git clone <${repository}'s repository> DIR && git -C DIR checkout --detach ${pin}, then pass --root ${repository}=DIR`,
    );
  }
  const result = await checkRoot(loaded, repository, dir, exportLimits ? { limits: exportLimits } : {});
  if (result.problems.length) {
    const prefix = `root '${repository}' (${dir}): `;
    return fail(
      name,
      `${dir}: ${result.problems.map((p) => (p.startsWith(prefix) ? p.slice(prefix.length) : p)).join("; ")}`,
      `make ${dir} a clean checkout of ${pin} (each problem names its own fix); a fresh clone checked out at the pin is one`,
    );
  }
  const keys = result.answerKeys.length
    ? `; answer keys kept out: ${result.answerKeys
        .map(
          (k) =>
            `'${k.key}'${k.resolvedTo.length ? ` (resolves to ${k.resolvedTo.join(", ")})` : ""} → ${[...k.byName.map((p) => `${p} (by name)`), ...k.byContent.map((p) => `${p} (same content)`)].join(", ")}`,
        )
        .join("; ")}`
    : "; no answer keys";
  return pass(
    name,
    `${dir}: clean, HEAD at the pin ${pin.slice(0, 12)}, ${result.sources} task source${result.sources === 1 ? "" : "s"} public at the pin, export of ${result.exportFiles} files / ${result.exportBytes} bytes within the limits${keys}`,
  );
}

const shellWord = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

/** The run's doc-bridge preflight: config in the server's order, doc.search fresh at the pin, one tool list, the deny list. */
export async function checkDocBridge(
  command: readonly string[],
  checkouts: readonly CheckoutToProbe[],
  timeoutMs?: number,
  loaded?: Pick<LoadedManifest, "path" | "manifest" | "bytes">,
): Promise<Check> {
  const reference = referenceEngineCommand();
  const isReference = command.length === reference.length && command.every((c, i) => c === reference[i]);
  const engine = isReference ? "the bundled reference engine" : JSON.stringify(command);
  try {
    const result = await preflightDocBridge({ command, checkouts, timeoutMs, loaded });
    const revision = result.checkouts[0]?.engineRevision;
    return pass(
      "doc-bridge",
      `${engine} answers doc.search from an index fresh at the pin in ${checkouts.map((c) => c.repository).join(", ")}; ` +
        `tools ${result.tools.join(", ")}; denied to the agent: ${result.deniedTools.join(", ") || "none"}${revision ? `; engine revision ${revision}` : ""}; ` +
        `the engine ${result.privileges.summary}; ` +
        `serves none of the answer keys (${result.checkouts.map((c) => `${c.repository}: ${c.forbiddenPathsChecked} path${c.forbiddenPathsChecked === 1 ? "" : "s"} refused by doc.get and absent from doc.search`).join("; ")})`,
    );
  } catch (err) {
    if (err instanceof EngineDidNotStartError) {
      return fail(
        "doc-bridge",
        errorMessage(err),
        `the engine did not start: correct --doc-bridge-command (a JSON array: the program and its arguments, each readable by the user the engine runs as), or leave it out to use the bundled reference engine`,
      );
    }
    const indexCommand = isReference ? referenceIndexCommand().map(shellWord).join(" ") : "your engine's index command (e.g. ak-docs index)";
    return fail(
      "doc-bridge",
      errorMessage(err),
      `in each checkout, build the index at the pin with ${indexCommand} (run in the checkout; an index written into the checkout must be git-ignored so it stays clean), and check --doc-bridge-command`,
    );
  }
}

/** The ledger path: a new file in an existing folder, outside every checkout and the project (checkOutputPath). */
export async function checkOutput(output: string | undefined, roots: ReadonlyMap<string, string>, projectRoot: string): Promise<Check> {
  if (!output) {
    return fail(
      "output",
      "no --output given; a run writes its private ledger (answers included) to a new file",
      "pass --output with a new file in an existing folder outside every checkout and outside this project, e.g. --output ~/study-ledgers/pilot.json",
    );
  }
  const problems = await checkOutputPath(output, { checkouts: roots, projectRoot });
  if (problems.length) return fail("output", problems.join("; "), "choose a new file name in an existing folder outside every checkout and outside this project");
  return pass("output", `${resolve(output)} is a new file outside every checkout and the project; the run creates it mode 0600`);
}

export function checkTransport(transport: Transport, env: ExecutionEnvironment, flags: RawRunFlags = {}): Check {
  if (transport === "cli") return pass("transport", "cli: Claude Code in a container with the CLI's own login; ANTHROPIC_API_KEY is never read; doctor --transport http checks the other transport");
  // The http transport's own requirements, by the run's rules; the key itself is never shown.
  const { issues } = checkExecution({ ...flags, approveBudget: true, pilot: true }, env, "http", [], new Map());
  const http = issues.filter((i) => i.about === "http").map((i) => i.message);
  if (http.length) {
    return fail(
      "transport",
      `http (the Messages API, the default --transport; this checked it): ${http.join("; ")}`,
      "export ANTHROPIC_API_KEY and the upper prices (STUDY_INPUT_PRICE_USD_PER_MTOK, STUDY_OUTPUT_PRICE_USD_PER_MTOK), or check the other transport with doctor --transport cli (Claude Code in a container with the CLI's own login, no API key)",
    );
  }
  return pass("transport", "http: the Messages API over fetch; ANTHROPIC_API_KEY is read from the environment only and never printed; doctor --transport cli checks the other transport");
}

/** Splits one of checkExecution's "problem; fix" messages. */
function split(message: string, fallbackFix: string): [string, string] {
  const at = message.indexOf("; ");
  return at < 0 ? [message, fallbackFix] : [message.slice(0, at), message.slice(at + 2)];
}

/** Beyond this many attempts the count is not refined: no plan is that long. */
const ATTEMPT_COUNT_LIMIT = 10_000;

/**
 * How many attempts the cap holds if every one were charged its full reservation (the budget's
 * own `reserve`, never settled): a completed attempt is charged its cost, so more may run.
 */
export function attemptsWithinCap(capUsd: number, attemptLimitUsd: number): number {
  let state: BudgetState = initialBudget(capUsd);
  let n = 0;
  while (n < ATTEMPT_COUNT_LIMIT) {
    const r = reserve(state, attemptLimitUsd);
    if (!r.ok) break;
    state = r.state;
    n++;
  }
  return n;
}

/**
 * STUDY_MODEL, STUDY_BUDGET_USD, the per-attempt limit and what the cap allows, by the run's
 * own rules (checkExecution); the approval flag is the run's to give, never the doctor's.
 */
export function checkSettings(input: { flags: RawRunFlags; env: ExecutionEnvironment; mode: Mode; planned: number; transport?: Transport }): Check[] {
  const { issues, parsed } = checkExecution({ ...input.flags, approveBudget: true, pilot: input.mode === "pilot", run: input.mode === "full" }, input.env, input.transport ?? "cli", [], new Map());
  const issue = (about: string) => issues.find((i) => i.about === about)?.message;
  const checks: Check[] = [];

  const model = issue("model");
  checks.push(model ? fail("model", ...split(model, "export STUDY_MODEL")) : pass("model", `STUDY_MODEL=${parsed.model}: every attempt passes it as --model and its transcript must report it`));

  const cap = issue("cap");
  checks.push(
    cap
      ? fail("budget", ...split(cap, "export STUDY_BUDGET_USD=<the approved cap in USD>, e.g. STUDY_BUDGET_USD=1 for the pilot"))
      : pass("budget", `STUDY_BUDGET_USD=${parsed.capUsd}: the approved cumulative cap of this run (the run also needs --approve-budget)`),
  );

  const limit = issue("attempt-limit");
  if (limit) {
    checks.push(fail("attempts", limit, "pass --attempt-budget-usd with a positive amount, e.g. 0.10 (the default)"));
  } else if (parsed.capUsd === undefined || parsed.attemptBudgetUsd === undefined) {
    checks.push(skip("attempts", "needs STUDY_BUDGET_USD to count the attempts the cap allows"));
  } else {
    const fits = attemptsWithinCap(parsed.capUsd, parsed.attemptBudgetUsd);
    const each = `--attempt-budget-usd ${parsed.attemptBudgetUsd} (reserved per attempt, passed as --max-budget-usd)`;
    if (fits === 0) {
      checks.push(fail("attempts", `${each} does not fit under the cap of ${parsed.capUsd} USD: the first attempt would be refused`, "lower --attempt-budget-usd, or have a larger cap approved"));
    } else {
      const count = fits >= ATTEMPT_COUNT_LIMIT ? `${ATTEMPT_COUNT_LIMIT} or more` : String(fits);
      const planned = `the ${input.mode === "pilot" ? "pilot" : "full study"} plans ${input.planned}`;
      const note = fits >= input.planned ? "" : `; the run ends blocked when the next limit no longer fits, though a completed attempt is charged its cost, not its limit`;
      checks.push(pass("attempts", `${each}: the cap holds ${count} attempts even if each is charged its full limit; ${planned}${note}`));
    }
  }
  return checks;
}
