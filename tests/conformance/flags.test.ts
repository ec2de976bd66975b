/**
 * Conformance of the runner's flags and init expectations with the REAL Claude Code 2.1.296 in
 * the real image: the help text is read from a throwaway container of that image (not from the
 * stored copy), and the init events come from a pilot the runner ran through the real CLI.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildPrompt, cliArguments, expectedInitTools, EMPTY_MCP_CONFIG } from "../../src/claude/args.ts";
import { claudeInImage as runClaudeInImage } from "../../src/calibrate/help.ts";
import { containerMcpConfig } from "../../src/mcp/bridge.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { checkFlags } from "../../src/calibrate/flags.ts";
import { activeProfile } from "../../src/profile/load.ts";
import { messageRequests, MODEL, prepareCorpus, realImage, runConformanceStudy, runtime, startStudyApi, toolUses, type Corpus, type StudyApi, type StudyRun } from "./support.ts";
import { pilotScripts } from "./scripts.ts";

/** Runs the image's `claude <args>` in a throwaway container with the probe's hardening; returns stdout. */
const claudeInImage = (image: string, args: string[]) => runClaudeInImage(runtime, image, args, { "study-runner.test": "conformance-help" });

interface HelpFlag {
  takesValue: boolean;
  variadic: boolean;
}

/** Every option of the help's "Options:" section, with whether it takes a (variadic) value. */
function parseHelp(help: string): Map<string, HelpFlag> {
  const start = help.indexOf("Options:");
  const end = help.indexOf("Commands:");
  expect(start, "the help has an Options: section").toBeGreaterThanOrEqual(0);
  const flags = new Map<string, HelpFlag>();
  for (const line of help.slice(start, end < 0 ? undefined : end).split("\n")) {
    const m = /^ {2}((?:-{1,2}[A-Za-z][A-Za-z-]*(?:, )?)+)(?: (<[^>]+>|\[[^\]]+\]))?/.exec(line);
    if (!m) continue;
    for (const name of m[1]!.split(", ")) flags.set(name, { takesValue: m[2]?.startsWith("<") ?? false, variadic: m[2]?.endsWith("...>") ?? false });
  }
  return flags;
}

let image = "";
let help = "";
let corpus: Corpus;
let api: StudyApi | undefined;
let pilot: StudyRun;

beforeAll(async () => {
  image = (await realImage()).id; // by id: other checkouts on this engine retag the same name
  const shown = await claudeInImage(image, ["--help"]);
  expect(shown.exitCode).toBe(0);
  help = shown.stdout;
  corpus = await prepareCorpus("flags");
  api = await startStudyApi(pilotScripts());
  pilot = await runConformanceStudy({ corpus, api, image, plan: "pilot" });
}, 300_000);

afterAll(async () => {
  await api?.close();
  await corpus?.cleanup();
});

describe("cliArguments() against `claude --help` of the real image", () => {
  it("passes only flags the image's help lists, with a value exactly where the help takes one", () => {
    const flags = parseHelp(help);
    expect(flags.size).toBeGreaterThan(40);
    // The deny list the runner derived from the reference server's live tools/list in the pilot.
    const deny = pilot.ledger.docBridge!.denyList;
    expect(deny.length).toBeGreaterThan(0);
    for (const arm of ["repository", "mcp"] as const) {
      const argv = cliArguments({
        arm,
        model: MODEL,
        maxBudgetUsd: 0.1,
        prompt: buildPrompt({ question: "Which function rounds amounts?" }),
        deniedMcpTools: deny,
        mcpConfig: arm === "mcp" ? containerMcpConfig() : EMPTY_MCP_CONFIG,
      });
      const end = argv.indexOf("--");
      expect(end).toBe(argv.length - 2);
      const seen: string[] = [];
      for (let i = 0; i < end; i++) {
        const flag = flags.get(argv[i]!);
        expect(flag, `${argv[i]} (${arm} arm) is not in claude --help of the image`).toBeDefined();
        seen.push(argv[i]!);
        if (flag!.takesValue) {
          expect(argv[i + 1]!.startsWith("-"), `${argv[i]} needs a value`).toBe(false);
          if (flag!.variadic) expect(argv[i + 2]!.startsWith("-"), `${argv[i]} is variadic and must be followed by a flag`).toBe(true);
          i++;
        } else {
          expect(argv[i + 1]!.startsWith("-"), `${argv[i]} takes no value, so the next token must be a flag or --`).toBe(true);
        }
      }
      // The parse really walked the whole flag list: every flag the runner relies on was checked.
      expect(seen).toEqual(
        expect.arrayContaining([
          "-p",
          "--output-format",
          "--verbose",
          "--model",
          "--max-budget-usd",
          "--tools",
          "--allowedTools",
          "--disallowedTools",
          "--permission-mode",
          "--permission-prompts",
          "--strict-mcp-config",
          "--mcp-config",
          "--no-session-persistence",
        ]),
      );
    }
  });

  // contract: R222
  it("every command line the runner builds walks the image's help, and the flags found are the calibration profile's", () => {
    expect(checkFlags(help)).toEqual({ flags: activeProfile().flags, problems: [] });
  });

  it("the stored copy the unit tests read is the image's help, byte for byte", async () => {
    expect(await readFile(join(PROJECT_ROOT, "tests", "fixtures", "claude-2.1.296-help.txt"), "utf8")).toBe(help);
  });

  it("the image reports the pinned version", async () => {
    expect((await claudeInImage(image, ["--version"])).stdout.trim()).toBe("2.1.296 (Claude Code)");
  });
});

describe("the init event of each arm, as the runner ran it through the real CLI", () => {
  it("the pilot completed, so the runner's own init checks passed in both arms", () => {
    expect(pilot.code).toBe(0);
    expect(pilot.ledger.observations.map((o) => [o.arm, o.status, o.setupProblems])).toEqual([
      ["repository", "completed", []],
      ["mcp", "completed", []],
    ]);
  });

  it("shows exactly the expected tools, permission mode dontAsk, the login (no key) and the MCP server status", () => {
    for (const [index, arm] of [
      [0, "repository"],
      [1, "mcp"],
    ] as const) {
      const inits = pilot.events(index).filter((e) => e.type === "system" && e.subtype === "init");
      expect(inits).toHaveLength(1);
      const init = inits[0]!;
      expect([...init.tools].sort()).toEqual(expectedInitTools(arm));
      expect(init.tools).toHaveLength(new Set(init.tools).size);
      expect(init).toMatchObject({ permissionMode: "dontAsk", apiKeySource: "none", claude_code_version: "2.1.296", model: MODEL, cwd: "/workspace" });
      if (arm === "repository") expect(init.mcp_servers).toEqual([]);
      else expect(init.mcp_servers).toEqual([expect.objectContaining({ name: "doc-bridge", status: "connected" })]);
    }
  });

  it("the tools the CLI offers the model are the init tools; every tool_use id the API issued came back as a result", () => {
    const requests = messageRequests(api!);
    for (const [index, arm] of [
      [0, "repository"],
      [1, "mcp"],
    ] as const) {
      const session = pilot.events(index).find((e) => e.type === "system" && e.subtype === "init")!.session_id as string;
      const mine = requests.filter((r) => r.conversation === `session:${session}`);
      expect(mine.length).toBeGreaterThan(1);
      for (const r of mine) expect([...r.body!.toolNames].sort()).toEqual(expectedInitTools(arm));
      const issued = mine.flatMap((r) => (r.answer.kind === "tool-calls" ? r.answer.toolUseIds : []));
      const answered = mine.flatMap((r) => r.body!.newestToolResults.map((t) => t.toolUseId));
      expect(
        toolUses(pilot.events(index))
          .map((u) => u.id)
          .sort(),
      ).toEqual([...issued].sort());
      expect([...answered].sort()).toEqual([...issued].sort());
    }
  });
});
