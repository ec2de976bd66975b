import type { Arm } from "../terms/terms.ts";
import type { Task } from "../manifest/schema.ts";
import { UsageError } from "../util/errors.ts";
import { modelProblem } from "../cost/models.ts";
import { formatByteBound, PROMPT_LIMIT_BYTES } from "../terms/limits.ts";
import { ALLOWED_DOC_BRIDGE_TOOLS, DOC_BRIDGE_SERVER, mcpToolName } from "../terms/tool-names.ts";

/**
 * The `claude` argument array (contract R63). Every flag
 * here appears in `claude --help` of 2.1.296 (facts/claude-2.1.296-help.txt); a test parses that
 * text. The two arms differ only in the `--mcp-config` value and the three doc-bridge names
 * appended to `--allowedTools`.
 */

/** Measured on 2.1.288: `--tools Read,Grep,Glob` loads tools named exactly so. */
export const BUILTIN_READ_TOOLS = ["Read", "Grep", "Glob"] as const;

/**
 * Built-in tools refused outright, beside `--tools` (which already limits the built-in set):
 * anything that writes, runs code, reaches the network or starts a sub-agent. Denying a name the
 * CLI does not have is harmless; the init event's exact tool set is the live check.
 */
export const BUILTIN_DENIED_TOOLS = [
  "Bash",
  "BashOutput",
  "KillShell",
  "Edit",
  "MultiEdit",
  "Write",
  "NotebookEdit",
  "WebFetch",
  "WebSearch",
  "Task",
  "Agent",
  "TodoWrite",
  "Skill",
  "SlashCommand",
  "ExitPlanMode",
] as const;

/**
 * Read rules that keep the agent out of its own HOME. Measured on 2.1.296
 * (docs/claude-cli-observations.md): without them a Read or Grep of
 * ~/.claude/.credentials.json returns the login token; with them those reads are denied
 * (listed in permission_denials, which the contract accepts for built-in reads) and the init
 * tool set is unchanged. `//` marks an absolute path in a permission rule.
 */
export const HOME_READ_DENIALS = ["Read(//home/agent/**)", "Grep(//home/agent/**)", "Glob(//home/agent/**)"] as const;

/**
 * Read rules for the rest of the container that is not the corpus: `/proc` (its mountinfo names
 * host paths, its environ and status the runner's pids), `/sys`, and the staged login folder
 * (src/transport/cli/spec.ts, CONTAINER.loginDir), denied the same way as HOME.
 */
export const SYSTEM_READ_DENIALS = ["//proc/**", "//sys/**", "//run/study-runner-login/**"].flatMap((path) => BUILTIN_READ_TOOLS.map((tool) => `${tool}(${path})`));

export { DOC_BRIDGE_SERVER, mcpToolName };
export const DOC_BRIDGE_ALLOWED = ALLOWED_DOC_BRIDGE_TOOLS;

/** The repository-only arm's `--mcp-config`: no server, so both arms carry the same flags. */
export const EMPTY_MCP_CONFIG = { mcpServers: {} } as const;

/** A server tool name that is safe inside a comma-separated flag value. */
const SERVER_TOOL_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

const ALLOWED_MCP_NAMES = DOC_BRIDGE_ALLOWED.map((t) => mcpToolName(DOC_BRIDGE_SERVER, t));

/** The exact tool set the init event must list for an arm, sorted. */
export function expectedInitTools(arm: Arm): string[] {
  return [...BUILTIN_READ_TOOLS, ...(arm === "mcp" ? ALLOWED_MCP_NAMES : [])].sort();
}

/**
 * The CLI names of every tool the doc-bridge server lists except the three allowed ones
 * (facts: a listed tool not in --disallowedTools stays in the init list). Throws when the server
 * lacks an allowed tool (the treatment would be lost) or when two listed names map to one CLI
 * name (denying one would deny the other).
 */
export function denyList(serverTools: readonly string[]): string[] {
  const problems: string[] = [];
  const byCliName = new Map<string, string>();
  for (const tool of serverTools) {
    if (!SERVER_TOOL_RE.test(tool)) {
      problems.push(`the doc-bridge server lists a tool named ${JSON.stringify(tool)}, which cannot be passed in --disallowedTools`);
      continue;
    }
    const cli = mcpToolName(DOC_BRIDGE_SERVER, tool);
    const other = byCliName.get(cli);
    if (other !== undefined && other !== tool) {
      problems.push(`the doc-bridge tools '${other}' and '${tool}' both become ${cli}; they cannot be told apart in --allowedTools/--disallowedTools`);
    }
    byCliName.set(cli, tool);
  }
  for (const tool of DOC_BRIDGE_ALLOWED) {
    if (!serverTools.includes(tool)) problems.push(`the doc-bridge server does not list '${tool}'; the doc-bridge arm would lose its treatment`);
  }
  if (problems.length) throw new UsageError(problems.join("\n"), problems);
  return [...byCliName.keys()].filter((name) => !ALLOWED_MCP_NAMES.includes(name)).sort();
}

/**
 * The prompt: the task's question only, never its expected propositions, after a fixed
 * instruction. The same text in both arms.
 */
export function buildPrompt(task: Pick<Task, "question">): string {
  return [
    "Answer the question below about the repository in the current working directory.",
    "Base the answer on the repository's files, and cite the file paths that support it.",
    "",
    "Question:",
    task.question,
  ].join("\n");
}

export interface CliArgumentOptions {
  arm: Arm;
  model: string;
  /** The attempt's reservation; passed rounded down to whole micro-dollars. */
  maxBudgetUsd: number;
  prompt: string;
  /** `denyList()` of the live doc-bridge tools/list, probed once per run; the same in both arms. */
  deniedMcpTools: readonly string[];
  /** The doc-bridge arm's MCP config (object or JSON text); the repository arm always gets `EMPTY_MCP_CONFIG`. */
  mcpConfig?: object | string;
}

/** A USD amount as a plain decimal with at most 6 places, never above `usd`. */
export function formatBudgetUsd(usd: number): string {
  if (!Number.isFinite(usd) || usd <= 0) throw new UsageError(`the attempt budget must be a positive number of USD, got ${usd}`);
  let micros = Math.round(usd * 1e6);
  if (micros / 1e6 > usd) micros -= 1;
  if (micros <= 0) throw new UsageError(`the attempt budget ${usd} USD is below 0.000001 USD, the smallest amount passed to --max-budget-usd`);
  const whole = Math.floor(micros / 1e6);
  const fraction = String(micros % 1e6)
    .padStart(6, "0")
    .replace(/0+$/, "");
  return fraction ? `${whole}.${fraction}` : String(whole);
}

export function assertPrompt(prompt: string): void {
  const bytes = Buffer.byteLength(prompt, "utf8");
  if (prompt.trim() === "") throw new UsageError("the prompt is empty; the task needs a question");
  if (prompt.includes("\0")) throw new UsageError("the prompt contains a NUL byte, which cannot be passed as an argument; remove it from the question");
  if (bytes > PROMPT_LIMIT_BYTES) {
    throw new UsageError(`the prompt is ${bytes} bytes of UTF-8, above the ${PROMPT_LIMIT_BYTES}-byte (${formatByteBound(PROMPT_LIMIT_BYTES)}) limit; shorten the task's question`);
  }
}

export function cliArguments(opts: CliArgumentOptions): string[] {
  assertPrompt(opts.prompt);
  const prefix = `mcp__${DOC_BRIDGE_SERVER}__`;
  for (const name of opts.deniedMcpTools) {
    if (!name.startsWith(prefix) || !SERVER_TOOL_RE.test(name.slice(prefix.length)) || ALLOWED_MCP_NAMES.includes(name)) {
      throw new UsageError(`'${name}' cannot be denied: the deny list holds ${prefix}* names other than the three allowed doc-bridge tools (build it with denyList())`);
    }
  }
  let mcpConfig: string;
  if (opts.arm === "mcp") {
    if (opts.mcpConfig === undefined) throw new UsageError("the doc-bridge arm needs its --mcp-config");
    mcpConfig = typeof opts.mcpConfig === "string" ? opts.mcpConfig : JSON.stringify(opts.mcpConfig);
  } else {
    mcpConfig = JSON.stringify(EMPTY_MCP_CONFIG);
  }
  return hardenedArguments({
    model: opts.model,
    maxBudgetUsd: opts.maxBudgetUsd,
    allowedTools: [...BUILTIN_READ_TOOLS, ...(opts.arm === "mcp" ? ALLOWED_MCP_NAMES : [])],
    deniedTools: opts.deniedMcpTools,
    mcpConfig,
    prompt: opts.prompt,
  });
}

/**
 * The hardening every Claude Code run of this runner gets, attempts and adjudicator alike:
 * stream-json, the model, the budget cap, read tools only, the built-in deny list and the HOME
 * read denials (the login copy lives there), non-interactive permissions, only the given MCP
 * config, no session on disk; `extra` flags (e.g. `--json-schema`) before the prompt, which
 * comes last after `--` because a variadic flag swallows a following word (facts).
 */
export function hardenedArguments(opts: {
  model: string;
  maxBudgetUsd: number;
  allowedTools: readonly string[];
  /** Denied on top of the built-in deny list and the HOME read denials. */
  deniedTools?: readonly string[];
  mcpConfig: string;
  extra?: readonly string[];
  prompt: string;
}): string[] {
  const denied = [...BUILTIN_DENIED_TOOLS, ...HOME_READ_DENIALS, ...SYSTEM_READ_DENIALS, ...(opts.deniedTools ?? [])];
  return [
    ...printModeArguments(opts.model, opts.maxBudgetUsd),
    "--tools",
    BUILTIN_READ_TOOLS.join(","),
    "--allowedTools",
    opts.allowedTools.join(","),
    "--disallowedTools",
    denied.join(","),
    "--permission-mode",
    "dontAsk",
    "--permission-prompts",
    "none",
    "--strict-mcp-config",
    "--mcp-config",
    opts.mcpConfig,
    "--no-session-persistence",
    ...(opts.extra ?? []),
    "--",
    opts.prompt,
  ];
}

/** A model name the CLI gets as one argument; a value starting with '-' would be read as a flag (the check is cost/models.ts's). */
function assertModelName(model: string): void {
  const problem = modelProblem(model, { what: "the model", argument: true });
  if (problem) throw new UsageError(problem);
}

/**
 * The head of every `claude` command line of this runner (attempts, the adjudicator, session
 * calls): print mode with the stream-json transcript, the checked model and the per-run cap.
 */
export function printModeArguments(model: string, maxBudgetUsd: number): string[] {
  assertModelName(model);
  return ["-p", "--output-format", "stream-json", "--verbose", "--model", model, "--max-budget-usd", formatBudgetUsd(maxBudgetUsd)];
}
