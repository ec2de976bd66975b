import { readFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  BUILTIN_DENIED_TOOLS,
  buildPrompt,
  cliArguments,
  denyList,
  DOC_BRIDGE_ALLOWED,
  HOME_READ_DENIALS,
  SYSTEM_READ_DENIALS,
  expectedInitTools,
  formatBudgetUsd,
  mcpToolName,
  type CliArgumentOptions,
} from "../../src/claude/args.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { PROMPT_LIMIT_BYTES } from "../../src/terms/limits.ts";

/** `claude --help` of 2.1.296 as the real CLI printed it (copied from shared/facts). */
const HELP = readFileSync(join(PROJECT_ROOT, "tests", "fixtures", "claude-2.1.296-help.txt"), "utf8");

interface HelpFlag {
  takesValue: boolean;
  variadic: boolean;
}

/** Every option the help lists, with whether it takes a value and whether that value is variadic. */
function helpFlags(): Map<string, HelpFlag> {
  const flags = new Map<string, HelpFlag>();
  const options = HELP.slice(HELP.indexOf("Options:"), HELP.indexOf("Commands:"));
  for (const line of options.split("\n")) {
    const m = /^ {2}((?:-{1,2}[A-Za-z][A-Za-z-]*(?:, )?)+)(?: (<[^>]+>|\[[^\]]+\]))?/.exec(line);
    if (!m) continue;
    const value = m[2];
    for (const name of m[1]!.split(", ")) {
      flags.set(name, { takesValue: value?.startsWith("<") ?? false, variadic: value?.endsWith("...>") ?? false });
    }
  }
  return flags;
}

const MEASURED_SERVER_TOOLS = ["doc.search", "doc.get", "handoff.resolve", "gate.status", "memory.promoteDraft"];
const MCP_CONFIG = { mcpServers: { "doc-bridge": { type: "stdio", command: "/usr/bin/doc-bridge", args: ["serve"] } } };

function options(arm: "repository" | "mcp", overrides: Partial<CliArgumentOptions> = {}): CliArgumentOptions {
  return {
    arm,
    model: "claude-haiku-5-5",
    maxBudgetUsd: 0.1,
    prompt: buildPrompt({ question: "Where is rounding configured?" }),
    deniedMcpTools: denyList(MEASURED_SERVER_TOOLS),
    ...(arm === "mcp" ? { mcpConfig: MCP_CONFIG } : {}),
    ...overrides,
  };
}

function flagValue(argv: string[], flag: string): string {
  const i = argv.indexOf(flag);
  expect(i, flag).toBeGreaterThanOrEqual(0);
  return argv[i + 1]!;
}

describe("cliArguments", () => {
  it("passes only flags that claude --help of 2.1.296 lists, with a value exactly where the help takes one", () => {
    const flags = helpFlags();
    expect(flags.size).toBeGreaterThan(40); // the parse found the option list
    for (const arm of ["repository", "mcp"] as const) {
      const argv = cliArguments(options(arm));
      const end = argv.indexOf("--");
      for (let i = 0; i < end; i++) {
        const flag = flags.get(argv[i]!);
        expect(flag, `${argv[i]} is not in the 2.1.296 help`).toBeDefined();
        if (flag!.takesValue) {
          expect(argv[i + 1]!.startsWith("-"), `${argv[i]} needs a value`).toBe(false);
          // A variadic flag would swallow a following word: the next token must be a flag.
          if (flag!.variadic) expect(argv[i + 2]!.startsWith("-"), `${argv[i]} is variadic and must be followed by a flag`).toBe(true);
          i++;
        }
      }
    }
  });

  it("puts the prompt last, after --, so no variadic flag can swallow it", () => {
    const prompt = "--tools Bash -- is text, not a flag";
    const argv = cliArguments(options("repository", { prompt }));
    expect(argv.at(-2)).toBe("--");
    expect(argv.at(-1)).toBe(prompt);
    expect(argv.indexOf("--")).toBe(argv.length - 2);
  });

  it("sets the measured read-only tool surface and non-interactive permissions", () => {
    const argv = cliArguments(options("repository"));
    expect(argv.slice(0, 4)).toEqual(["-p", "--output-format", "stream-json", "--verbose"]);
    expect(flagValue(argv, "--tools")).toBe("Read,Grep,Glob");
    expect(flagValue(argv, "--allowedTools")).toBe("Read,Grep,Glob");
    expect(flagValue(argv, "--permission-mode")).toBe("dontAsk");
    expect(flagValue(argv, "--permission-prompts")).toBe("none");
    expect(flagValue(argv, "--model")).toBe("claude-haiku-5-5");
    expect(flagValue(argv, "--max-budget-usd")).toBe("0.1");
    expect(argv).toContain("--strict-mcp-config");
    expect(argv).toContain("--no-session-persistence");
    expect(JSON.parse(flagValue(argv, "--mcp-config"))).toEqual({ mcpServers: {} });
  });

  it("differs between the arms only in the --mcp-config value and the three doc-bridge names in --allowedTools", () => {
    const repo = cliArguments(options("repository"));
    const mcp = cliArguments(options("mcp"));
    expect(mcp).toHaveLength(repo.length);
    const differing = repo.flatMap((token, i) => (token === mcp[i] ? [] : [repo[i - 1]]));
    expect(differing.sort()).toEqual(["--allowedTools", "--mcp-config"]);
    expect(flagValue(mcp, "--allowedTools")).toBe(`${flagValue(repo, "--allowedTools")},mcp__doc-bridge__doc_search,mcp__doc-bridge__doc_get,mcp__doc-bridge__handoff_resolve`);
    expect(JSON.parse(flagValue(mcp, "--mcp-config"))).toEqual(MCP_CONFIG);
  });

  it("denies the write, shell, web and sub-agent tools and every other doc-bridge tool, in both arms", () => {
    for (const arm of ["repository", "mcp"] as const) {
      const denied = flagValue(cliArguments(options(arm)), "--disallowedTools").split(",");
      for (const tool of ["Bash", "Edit", "Write", "NotebookEdit", "WebFetch", "WebSearch", "Task"]) expect(denied).toContain(tool);
      expect(denied).toContain("mcp__doc-bridge__gate_status");
      expect(denied).toContain("mcp__doc-bridge__memory_promoteDraft");
      for (const tool of ["Read", "Grep", "Glob", ...DOC_BRIDGE_ALLOWED.map((t) => mcpToolName("doc-bridge", t))]) expect(denied).not.toContain(tool);
      // The agent's HOME holds the login token: reads there are denied by rule (measured on 2.1.296).
      for (const rule of ["Read(//home/agent/**)", "Grep(//home/agent/**)", "Glob(//home/agent/**)"]) expect(denied).toContain(rule);
      // /proc names host paths and pids, /sys the host's devices; the staged login folder holds the token.
      for (const path of ["//proc/**", "//sys/**", "//run/study-runner-login/**"]) {
        for (const tool of ["Read", "Grep", "Glob"]) expect(denied).toContain(`${tool}(${path})`);
      }
      expect(denied).toEqual([...BUILTIN_DENIED_TOOLS, ...HOME_READ_DENIALS, ...SYSTEM_READ_DENIALS, "mcp__doc-bridge__gate_status", "mcp__doc-bridge__memory_promoteDraft"]);
    }
  });

  it("refuses a deny list that would remove an allowed tool or is not made of doc-bridge names", () => {
    expect(() => cliArguments(options("mcp", { deniedMcpTools: ["mcp__doc-bridge__doc_get"] }))).toThrow(/cannot be denied/);
    expect(() => cliArguments(options("mcp", { deniedMcpTools: ["Read"] }))).toThrow(/cannot be denied/);
    expect(() => cliArguments(options("mcp", { deniedMcpTools: ["mcp__doc-bridge__a,Read"] }))).toThrow(/cannot be denied/);
  });

  it("refuses a doc-bridge arm without its MCP config and a model that looks like a flag", () => {
    expect(() => cliArguments({ ...options("mcp"), mcpConfig: undefined })).toThrow(/doc-bridge arm needs its --mcp-config/);
    expect(() => cliArguments(options("repository", { model: "--dangerously-skip-permissions" }))).toThrow(/is not a model name/);
  });

  it("limits the prompt to 8 KiB of UTF-8, counted in bytes", () => {
    expect(() => cliArguments(options("repository", { prompt: "a".repeat(PROMPT_LIMIT_BYTES) }))).not.toThrow();
    expect(() => cliArguments(options("repository", { prompt: "a".repeat(PROMPT_LIMIT_BYTES + 1) }))).toThrow(
      /the prompt is 8193 bytes of UTF-8, above the 8192-byte \(8 KiB\) limit; shorten the task's question/,
    );
    // 2731 euro signs are 2731 characters but 8193 bytes.
    expect(() => cliArguments(options("repository", { prompt: "€".repeat(2731) }))).toThrow(/8193 bytes/);
    expect(() => cliArguments(options("repository", { prompt: "  " }))).toThrow(/the prompt is empty/);
    expect(() => cliArguments(options("repository", { prompt: "a\0b" }))).toThrow(/NUL byte/);
  });
});

describe("tool names", () => {
  it("names MCP tools as measured: dots become underscores, case kept", () => {
    expect(mcpToolName("doc-bridge", "memory.promoteDraft")).toBe("mcp__doc-bridge__memory_promoteDraft");
    expect(mcpToolName("doc-bridge", "doc.search")).toBe("mcp__doc-bridge__doc_search");
  });

  it("expects exactly the read tools, plus the three doc-bridge tools in the doc-bridge arm", () => {
    expect(expectedInitTools("repository")).toEqual(["Glob", "Grep", "Read"]);
    expect(expectedInitTools("mcp")).toEqual(["Glob", "Grep", "Read", "mcp__doc-bridge__doc_get", "mcp__doc-bridge__doc_search", "mcp__doc-bridge__handoff_resolve"]);
  });

  it("denies every listed doc-bridge tool except the three allowed ones", () => {
    expect(denyList(MEASURED_SERVER_TOOLS)).toEqual(["mcp__doc-bridge__gate_status", "mcp__doc-bridge__memory_promoteDraft"]);
    expect(denyList(["doc.search", "doc.get", "handoff.resolve"])).toEqual([]);
  });

  it("refuses a tool list that lacks an allowed tool, collides after renaming, or cannot be passed", () => {
    expect(() => denyList(["doc.search", "handoff.resolve"])).toThrow(/does not list 'doc.get'; the doc-bridge arm would lose its treatment/);
    expect(() => denyList([...MEASURED_SERVER_TOOLS, "doc_get"])).toThrow(/'doc.get' and 'doc_get' both become mcp__doc-bridge__doc_get/);
    expect(() => denyList([...MEASURED_SERVER_TOOLS, "evil,Read"])).toThrow(/cannot be passed in --disallowedTools/);
  });
});

describe("buildPrompt", () => {
  it("holds the question and the fixed instruction, never the expected answers", () => {
    const task = { question: "Which function rounds invoice totals?", expected: ["roundHalfEven in src/money.ts"] };
    const prompt = buildPrompt(task);
    expect(prompt).toContain(task.question);
    expect(prompt).toMatch(/repository in the current working directory/);
    expect(prompt).toMatch(/cite the file paths/);
    expect(prompt).not.toContain("roundHalfEven");
    expect(prompt.endsWith(task.question)).toBe(true);
  });

  it("leaves room for the manifest's longest question (6144 bytes) under the 8 KiB limit", () => {
    expect(Buffer.byteLength(buildPrompt({ question: "é".repeat(3072) }), "utf8")).toBeLessThanOrEqual(PROMPT_LIMIT_BYTES);
  });
});

describe("formatBudgetUsd", () => {
  it("writes whole micro-dollars as a plain decimal", () => {
    expect(formatBudgetUsd(0.1)).toBe("0.1");
    expect(formatBudgetUsd(1)).toBe("1");
    expect(formatBudgetUsd(0.000001)).toBe("0.000001");
    expect(formatBudgetUsd(0.1234567)).toBe("0.123456");
    expect(formatBudgetUsd(12.3456789)).toBe("12.345678");
  });

  it("never passes more than the reservation and loses less than a micro-dollar", () => {
    fc.assert(
      fc.property(fc.double({ min: 0.000001, max: 10_000, noNaN: true }), (usd) => {
        const passed = Number(formatBudgetUsd(usd));
        return passed <= usd && usd - passed < 1.000001e-6 && /^\d+(\.\d{1,6})?$/.test(formatBudgetUsd(usd));
      }),
    );
  });

  it("refuses zero, negative, non-finite and sub-micro-dollar budgets", () => {
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, 1e-7]) expect(() => formatBudgetUsd(bad)).toThrow(/USD/);
  });
});

describe("flags the transport decision rejects are never passed", () => {
  // --bare makes auth strictly ANTHROPIC_API_KEY or apiKeyHelper; --safe-mode disables MCP servers
  // (the treatment); a replaced system prompt changes the agent measured.
  const REJECTED = ["--bare", "--safe-mode", "--system-prompt", "--system-prompt-file"];
  const flagsOf = (argv: string[]) => argv.slice(0, argv.indexOf("--")).filter((a) => a.startsWith("--"));

  it("the rejected flags exist in claude --help of 2.1.296 (so leaving them out is a choice)", () => {
    for (const flag of ["--bare", "--safe-mode", "--system-prompt"]) expect(helpFlags().has(flag), flag).toBe(true);
  });

  it("neither arm's attempt arguments, nor the adjudicator's, carry one", async () => {
    const { adjudicatorArguments } = await import("../../src/adjudicate/prompt.ts");
    const sets = [cliArguments(options("repository")), cliArguments(options("mcp")), adjudicatorArguments({ model: "claude-haiku-5-5", maxBudgetUsd: 0.05, prompt: "Judge the answer." })];
    for (const argv of sets) {
      const flags = flagsOf(argv);
      expect(flags.length).toBeGreaterThan(5);
      for (const flag of REJECTED)
        expect(
          flags.filter((f) => f === flag || f.startsWith(`${flag}=`)),
          flag,
        ).toEqual([]);
    }
  });
});
