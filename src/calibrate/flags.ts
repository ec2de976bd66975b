import { adjudicatorArguments } from "../adjudicate/prompt.ts";
import { buildPrompt, cliArguments, EMPTY_MCP_CONFIG } from "../claude/args.ts";
import { DEFAULT_ADJUDICATOR_MODELS } from "../cost/models.ts";
import { containerMcpConfig } from "../mcp/bridge.ts";
import type { HelpFlag } from "../profile/schema.ts";
import { sessionArguments } from "../session/args.ts";

/**
 * The flags the runner passes to `claude`, checked against a version's own `--help` (contract
 * R222): every command line the runner builds (an attempt of each arm, the adjudicator, a
 * session's start and resume) is walked flag by flag; each flag must be listed, take a value
 * exactly where the help says it does, and a variadic flag must be followed by a flag.
 */

/** Every option of the help's "Options:" section, with whether it takes a (variadic) value. */
export function parseHelpFlags(help: string): Map<string, HelpFlag> {
  const start = help.indexOf("Options:");
  const end = help.indexOf("Commands:");
  const flags = new Map<string, HelpFlag>();
  if (start < 0) return flags;
  for (const line of help.slice(start, end < start ? undefined : end).split("\n")) {
    const m = /^ {2}((?:-{1,2}[A-Za-z][A-Za-z-]*(?:, )?)+)(?: (<[^>]+>|\[[^\]]+\]))?/.exec(line);
    if (!m) continue;
    for (const name of m[1]!.split(", ")) flags.set(name, { takesValue: m[2]?.startsWith("<") ?? false, optionalValue: m[2]?.startsWith("[") ?? false, variadic: m[2]?.endsWith("...>") ?? false });
  }
  return flags;
}

const SAMPLE_MODEL = DEFAULT_ADJUDICATOR_MODELS[0]!;
const SAMPLE_SESSION = "00000000-0000-4000-8000-000000000000";

/** One command line of each kind the runner builds, by name (sample values; the flags are what matter). */
export function runnerCommandLines(): Record<string, string[]> {
  const prompt = buildPrompt({ question: "Which function rounds amounts?" });
  const deny = ["mcp__doc-bridge__search_everything"];
  return {
    "attempt-repository": cliArguments({ arm: "repository", model: SAMPLE_MODEL, maxBudgetUsd: 0.1, prompt, deniedMcpTools: deny, mcpConfig: EMPTY_MCP_CONFIG }),
    "attempt-mcp": cliArguments({ arm: "mcp", model: SAMPLE_MODEL, maxBudgetUsd: 0.1, prompt, deniedMcpTools: deny, mcpConfig: containerMcpConfig() }),
    adjudicator: adjudicatorArguments({ model: SAMPLE_MODEL, maxBudgetUsd: 0.1, prompt }),
    "session-start": sessionArguments({ model: SAMPLE_MODEL, maxBudgetUsd: 0.1, sessionId: SAMPLE_SESSION, resume: false }),
    "session-resume": sessionArguments({ model: SAMPLE_MODEL, maxBudgetUsd: 0.1, sessionId: SAMPLE_SESSION, resume: true }),
  };
}

/**
 * Walks each command line against `help`: the flags found (as the help lists them) and one
 * problem per flag that is gone or used against its listing. No problem: every line parses.
 */
export function checkFlags(help: string): { flags: Record<string, HelpFlag>; problems: string[] } {
  const listed = parseHelpFlags(help);
  const flags: Record<string, HelpFlag> = {};
  const problems: string[] = [];
  if (listed.size === 0) problems.push("the help has no Options: section the runner can read");
  for (const [kind, argv] of Object.entries(runnerCommandLines())) {
    const end = argv.indexOf("--");
    const stop = end < 0 ? argv.length : end;
    for (let i = 0; i < stop; i++) {
      const name = argv[i]!;
      // A word that is not a flag is the value of a flag the help does not list (already a problem), not a flag itself.
      if (!name.startsWith("-")) continue;
      const flag = listed.get(name);
      if (!flag) {
        problems.push(`${name} (${kind}) is not in claude --help: the runner needs it`);
        continue;
      }
      flags[name] = flag;
      const next = argv[i + 1];
      if (flag.optionalValue) {
        if (next !== undefined && !next.startsWith("-")) i++;
      } else if (flag.takesValue) {
        if (next === undefined || next.startsWith("-")) problems.push(`${name} (${kind}) takes a value in claude --help, and the runner passes none`);
        else if (flag.variadic && argv[i + 2] !== undefined && !argv[i + 2]!.startsWith("-"))
          problems.push(`${name} (${kind}) is variadic in claude --help and would swallow ${JSON.stringify(argv[i + 2]!.slice(0, 40))}`);
        i++;
      } else if (next !== undefined && !next.startsWith("-")) {
        problems.push(`${name} (${kind}) takes no value in claude --help, so the runner's next word ${JSON.stringify(next.slice(0, 40))} would be read as an operand`);
      }
    }
  }
  return { flags: Object.fromEntries(Object.entries(flags).sort(([a], [b]) => a.localeCompare(b))), problems: [...new Set(problems)] };
}
