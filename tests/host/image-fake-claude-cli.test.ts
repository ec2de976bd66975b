import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adjudicatorArguments, adjudicatorInitTools } from "../../src/adjudicate/prompt.ts";
import { cliArguments, expectedInitTools } from "../../src/claude/args.ts";
import { expectedInit, type InitKind } from "../../src/claude/init-expectation.ts";
import { SESSION_INIT_TOOLS, sessionArguments } from "../../src/session/args.ts";
import { readTranscript } from "../../src/transcript/reader.ts";
import { makeFakeDir, parseEvents, runFakeOnHost, streamJsonArgs, type FakeBehaviourFile } from "../support/fake-claude.ts";
import { activeProfile } from "../../src/profile/load.ts";

const GENERATED_INIT_EVENTS = activeProfile().initEvents;

// The fake claude run directly by this Node: its argv handling, transcripts and records.
// (tests/integration/image-fake-claude.test.ts runs it inside the hardened image.)

const REPO = fileURLToPath(new URL("../../", import.meta.url));
let workspace = "";

beforeAll(async () => {
  workspace = await mkdtemp(join(tmpdir(), "fake-ws-"));
  await writeFile(join(workspace, "README.md"), "# Demo\nthe demo project prints a greeting\n");
  await mkdir(join(workspace, "src"));
  await writeFile(join(workspace, "src", "main.ts"), "export const greeting = 'hello';\n");
});
const scratch: string[] = [];
afterAll(async () => {
  for (const dir of [workspace, ...scratch]) await rm(dir, { recursive: true, force: true });
});
async function scratchDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  scratch.push(dir);
  return dir;
}

async function run(args: string[], file?: FakeBehaviourFile, env: Record<string, string> = {}) {
  const fake = await makeFakeDir(file);
  try {
    const r = await runFakeOnHost(args, { cwd: workspace, fakeDir: fake.dir, env });
    return { ...r, records: await fake.records() };
  } finally {
    await fake.cleanup();
  }
}

const PRICE = { input: 0.1, output: 0.5, cacheRead: 0.01, cacheWrite5m: 0.125, cacheWrite1h: 0.2 };

describe("fake claude: version and argv", () => {
  it("prints the pinned version, or the behaviour file's", async () => {
    expect((await run(["--version"])).stdout).toBe("2.1.296 (Claude Code)\n");
    expect((await run(["-v"], { version: "2.1.295" })).stdout).toBe("2.1.295 (Claude Code)\n");
    expect((await run(["--version"], { default: { kind: "ok", version: "9.9.9" } })).stdout).toBe("9.9.9 (Claude Code)\n");
  });

  it("lets a variadic flag swallow a prompt placed after it, as the real CLI does", async () => {
    const r = await run(["-p", "--output-format", "stream-json", "--verbose", "--tools", "Read,Grep,Glob", "What is this?"]);
    expect(r.exitCode).toBe(1);
    expect(r.stderr).toMatch(/Input must be provided/);
    expect(r.stdout).toBe("");
  });

  it("fails an unknown option, stream-json without --verbose, and two prompts", async () => {
    const unknown = await run([...streamJsonArgs().slice(0, -2), "--max-turns", "3", "--", "q"]);
    expect([unknown.exitCode, unknown.stderr]).toEqual([1, "error: unknown option '--max-turns'\n"]);
    const noVerbose = await run(streamJsonArgs().filter((a) => a !== "--verbose"));
    expect(noVerbose.exitCode).toBe(1);
    expect(noVerbose.stderr).toMatch(/requires --verbose/);
    const two = await run([...streamJsonArgs(), "second"]);
    expect(two.exitCode).toBe(1);
    expect(two.stderr).toMatch(/too many arguments/);
  });

  it("fails loudly on a broken behaviour file instead of acting ok", async () => {
    const fake = await makeFakeDir();
    await writeFile(join(fake.dir, "behaviour.json"), "{ not json");
    const r = await runFakeOnHost(streamJsonArgs(), { cwd: workspace, fakeDir: fake.dir });
    expect(r.exitCode).toBe(70);
    expect(r.stdout).toBe("");
    await fake.cleanup();
  });
});

describe("fake claude: the init event comes from the measured data", () => {
  // contract: R125
  it("for the runner's own arguments of each kind of run, writes an init the whole-init check accepts, with no field kept by hand", async () => {
    const sessionId = "0b6f4a53-2f55-4c1e-9d0e-6a1f2b3c4d5e";
    const model = "claude-haiku-5-5";
    const kinds: Array<[InitKind, string[], readonly string[], string | undefined]> = [
      ["attempt-repository", cliArguments({ arm: "repository", model, maxBudgetUsd: 1, prompt: "What does the demo print?", deniedMcpTools: [] }), expectedInitTools("repository"), undefined],
      ["adjudicator", adjudicatorArguments({ model, maxBudgetUsd: 1, prompt: "Item: x\nP1 the demo prints a greeting" }), adjudicatorInitTools(), undefined],
      ["session-start", sessionArguments({ model, maxBudgetUsd: 1, sessionId, resume: false }), SESSION_INIT_TOOLS, sessionId],
    ];
    for (const [kind, argv, tools, id] of kinds) {
      const home = await scratchDir("fake-init-home-");
      const fake = await makeFakeDir();
      try {
        const r = await runFakeOnHost(argv, { cwd: workspace, fakeDir: fake.dir, env: { HOME: home }, input: "the task" });
        const init = parseEvents(r.stdout)[0];
        expect(init, `${kind}: ${r.stderr}`).toBeDefined();
        // The workspace is a host folder here; in the image it is /workspace, as measured.
        expect(init!.cwd).toBe(workspace);
        const facts = readTranscript(JSON.stringify({ ...init, cwd: "/workspace" }) + "\n", {
          arm: "repository",
          model,
          expectedTools: tools,
          cliVersion: "2.1.296",
          init: expectedInit(kind, { model, sessionId: id }),
        });
        expect([kind, facts.setupProblems]).toEqual([kind, ["no result event"]]);
        // Fields only the measurement knows, so never a hand-kept copy: the CLI's agents and skills.
        expect(init!.agents).toEqual(GENERATED_INIT_EVENTS.kinds[kind].fields.agents);
        expect(init!.skills).toEqual(GENERATED_INIT_EVENTS.kinds[kind].fields.skills);
      } finally {
        await fake.cleanup();
      }
    }
  });
});

describe("fake claude: the generated ok transcript", () => {
  it("is a consistent stream-json transcript built from argv and the real workspace", async () => {
    const r = await run(streamJsonArgs({ prompt: "What does the demo print?" }), { default: { kind: "ok", answer: "It prints a greeting." } });
    expect(r.exitCode).toBe(0);
    const events = parseEvents(r.stdout);
    const init = events[0]!;
    expect(init).toMatchObject({
      type: "system",
      subtype: "init",
      model: "claude-haiku-5-5",
      tools: ["Glob", "Grep", "Read"],
      mcp_servers: [],
      permissionMode: "dontAsk",
      apiKeySource: "none",
      claude_code_version: "2.1.296",
      cwd: workspace,
    });
    expect(events.filter((e) => e.type === "system" && e.subtype === "init")).toHaveLength(1);
    const results = events.filter((e) => e.type === "result");
    expect(results).toHaveLength(1);
    expect(events.at(-1)).toBe(results[0]);
    const result = results[0]!;
    expect(result).toMatchObject({ subtype: "success", is_error: false, result: "It prints a greeting.", permission_denials: [] });

    // Tool calls on real files: Read returns the README with line numbers.
    const uses = events
      .filter((e) => e.type === "assistant")
      .flatMap((e) => e.message.content)
      .filter((c: any) => c.type === "tool_use");
    expect(uses.map((u: any) => u.name)).toEqual(["Glob", "Grep", "Read"]);
    const toolResults = new Map(
      events
        .filter((e) => e.type === "user")
        .flatMap((e) => e.message.content)
        .map((c: any) => [c.tool_use_id, c]),
    );
    const read = uses.find((u: any) => u.name === "Read");
    expect(read.input.file_path).toBe(join(workspace, "README.md"));
    expect(toolResults.get(read.id).content).toBe("1\t# Demo\n2\tthe demo project prints a greeting\n3\t");
    expect(toolResults.get(uses[0].id).content).toBe(`${join(workspace, "README.md")}\n${join(workspace, "src", "main.ts")}`);

    // Per-message usage, de-duplicated by message id, equals modelUsage on the prompt side.
    const perMessage = new Map<string, any>();
    for (const e of events.filter((x) => x.type === "assistant")) perMessage.set(e.message.id, e.message.usage);
    const blocks = events.filter((x) => x.type === "assistant").length;
    expect(blocks).toBeGreaterThan(perMessage.size);
    const sum = (k: string) => [...perMessage.values()].reduce((s, u) => s + u[k], 0);
    const mu = result.modelUsage["claude-haiku-5-5"];
    expect(Object.keys(result.modelUsage)).toEqual(["claude-haiku-5-5"]);
    expect(sum("input_tokens")).toBe(mu.inputTokens);
    expect(sum("cache_read_input_tokens")).toBe(mu.cacheReadInputTokens);
    expect(sum("cache_creation_input_tokens")).toBe(mu.cacheCreationInputTokens);
    expect([...perMessage.values()].every((u) => u.output_tokens === 1)).toBe(true);
    expect(result.usage.input_tokens).toBe(mu.inputTokens);
    expect(result.usage.output_tokens).toBe(mu.outputTokens);
    expect(result.num_turns).toBe(perMessage.size);

    // The cost is the facts' tier-1 price table applied to those totals.
    const w5 = result.usage.cache_creation.ephemeral_5m_input_tokens;
    const w1 = result.usage.cache_creation.ephemeral_1h_input_tokens;
    const expected = (mu.inputTokens * PRICE.input + mu.outputTokens * PRICE.output + mu.cacheReadInputTokens * PRICE.cacheRead + w5 * PRICE.cacheWrite5m + w1 * PRICE.cacheWrite1h) / 1e6;
    expect(result.total_cost_usd).toBeCloseTo(expected, 12);
    expect(mu.costUSD).toBeCloseTo(expected, 12);
    expect(mu.costBasis).toBe("list");
  });

  it("offers only the tools --tools names, minus --disallowedTools, and calls only those", async () => {
    const r = await run(["-p", "--output-format", "stream-json", "--verbose", "--tools", "Read", "Grep", "--disallowedTools", "Grep", "--", "q"]);
    const events = parseEvents(r.stdout);
    expect(events[0]!.tools).toEqual(["Read"]);
    const uses = events
      .filter((e) => e.type === "assistant")
      .flatMap((e) => e.message.content)
      .filter((c: any) => c.type === "tool_use");
    expect(uses.map((u: any) => u.name)).toEqual(["Read"]);
  });

  it("on request, simulates a connected doc-bridge with the MCP names --allowedTools grants", async () => {
    const config = JSON.stringify({ mcpServers: { "doc-bridge": { command: "/absent/server" } } });
    const r = await run(streamJsonArgs({ allowed: ["Read", "Grep", "Glob", "mcp__doc-bridge__doc_search", "mcp__doc-bridge__doc_get"], mcpConfig: config }), {
      default: { kind: "ok", simulateMcp: true },
    });
    const init = parseEvents(r.stdout)[0]!;
    expect(init.tools).toEqual(["Glob", "Grep", "Read", "mcp__doc-bridge__doc_search", "mcp__doc-bridge__doc_get"]);
    expect(init.mcp_servers).toEqual([{ name: "doc-bridge", status: "connected", source: "dynamic" }]);
  });

  it("by default connects to a configured server like the real CLI: one that cannot start shows failed", async () => {
    const config = JSON.stringify({ mcpServers: { "doc-bridge": { command: "/absent/server" } } });
    const r = await run(streamJsonArgs({ allowed: ["Read", "mcp__doc-bridge__doc_search"], mcpConfig: config }));
    const init = parseEvents(r.stdout)[0]!;
    expect(init.mcp_servers).toEqual([{ name: "doc-bridge", status: "failed", source: "dynamic" }]);
    expect(init.tools.filter((t: string) => t.startsWith("mcp__"))).toEqual([]);
  });

  it("reports an API key in the environment as the key source", async () => {
    const r = await run(streamJsonArgs(), undefined, { ANTHROPIC_API_KEY: "test-key-value" });
    expect(parseEvents(r.stdout)[0]!.apiKeySource).toBe("ANTHROPIC_API_KEY");
  });

  it("mutates the transcript as asked: two results, a foreign model, an error subtype, a denied call, an exit code", async () => {
    const twice = parseEvents((await run(streamJsonArgs(), { default: { kind: "ok", twoResults: true } })).stdout);
    expect(twice.filter((e) => e.type === "result")).toHaveLength(2);

    const foreign = parseEvents((await run(streamJsonArgs(), { default: { kind: "ok", foreignModelUsage: true } })).stdout).at(-1)!;
    expect(Object.keys(foreign.modelUsage).sort()).toEqual(["claude-haiku-4-5", "claude-haiku-5-5"]);
    expect(foreign.total_cost_usd).toBeCloseTo(foreign.modelUsage["claude-haiku-4-5"].costUSD + foreign.modelUsage["claude-haiku-5-5"].costUSD, 12);

    const budget = parseEvents((await run(streamJsonArgs(), { default: { kind: "ok", subtype: "error_max_budget_usd" } })).stdout).at(-1)!;
    expect(budget).toMatchObject({ subtype: "error_max_budget_usd", is_error: true });
    expect(budget).not.toHaveProperty("result");

    const denied = await run(streamJsonArgs(), { default: { kind: "ok", callTool: { name: "Bash", input: { command: "ls" }, denied: true }, exitCode: 2 } });
    expect(denied.exitCode).toBe(2);
    const events = parseEvents(denied.stdout);
    const bash = events
      .filter((e) => e.type === "assistant")
      .flatMap((e) => e.message.content)
      .find((c: any) => c.name === "Bash");
    expect(bash).toMatchObject({ type: "tool_use", input: { command: "ls" } });
    expect(events.at(-1)!.permission_denials).toEqual([{ tool_name: "Bash", tool_use_id: bash.id, tool_input: { command: "ls" } }]);
    const bashResult = events
      .filter((e) => e.type === "user")
      .flatMap((e) => e.message.content)
      .find((c: any) => c.tool_use_id === bash.id);
    expect(bashResult.is_error).toBe(true);
  });

  it("prices a prompt above 100k tokens in the second tier and scales the reported cost when asked", async () => {
    const big = { input: 100_001, output: 10, cacheRead: 0, cacheWrite5m: 0, cacheWrite1h: 0 };
    const r = await run(["-p", "--output-format", "stream-json", "--verbose", "--model", "claude-haiku-5-5", "--tools", "", "--", "q"], {
      default: { kind: "ok", turnUsage: [big], reportedCostFactor: 3 },
    });
    const result = parseEvents(r.stdout).at(-1)!;
    expect(result.num_turns).toBe(1);
    const tier2 = (100_001 * 0.5 + 10 * 2.5) / 1e6;
    expect(result.modelUsage["claude-haiku-5-5"].costUSD).toBeCloseTo(tier2, 12);
    expect(result.total_cost_usd).toBeCloseTo(3 * tier2, 12);
  });
});

describe("fake claude: other behaviours", () => {
  it("prints canned events verbatim, after a malformed line when asked, per attempt index", async () => {
    const file: FakeBehaviourFile = {
      default: { kind: "ok" },
      attempts: { "2": { kind: "events", malformedFirst: true, events: [{ type: "system", subtype: "init" }, "raw line", { type: "result" }], exitCode: 4 } },
    };
    const r = await run(streamJsonArgs(), file, { STUDY_RUNNER_ATTEMPT: "2" });
    expect(r.exitCode).toBe(4);
    expect(r.stdout).toBe('this line is not JSON {\n{"type":"system","subtype":"init"}\nraw line\n{"type":"result"}\n');
    const other = await run(streamJsonArgs(), file, { STUDY_RUNNER_ATTEMPT: "1" });
    expect(parseEvents(other.stdout).at(-1)!.subtype).toBe("success");
  });

  it("exits with the given code, prints garbage, floods past a byte count", async () => {
    const exit = await run(streamJsonArgs(), { default: { kind: "exit", events: [{ type: "x" }], code: 9 } });
    expect([exit.exitCode, exit.stdout]).toEqual([9, '{"type":"x"}\n']);
    const garbage = await run(streamJsonArgs(), { default: { kind: "garbage", lines: 4 } });
    const lines = garbage.stdout.split("\n").filter(Boolean);
    expect(lines).toHaveLength(4);
    for (const l of lines) expect(() => JSON.parse(l)).toThrow();
    const flood = await run(streamJsonArgs(), { default: { kind: "flood", bytes: 300_000 } });
    expect(flood.stdout.length).toBeGreaterThanOrEqual(300_000);
    expect(flood.stdout.length).toBeLessThan(302_000);
  });

  it("sleeps for the given time before exiting", async () => {
    const started = Date.now();
    const r = await run(streamJsonArgs(), { default: { kind: "sleep", seconds: 1, exitCode: 0 } });
    expect(r.exitCode).toBe(0);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
  });
});

describe("fake claude: records", () => {
  it("records argv and env names, never env values", async () => {
    const r = await run(streamJsonArgs(), undefined, { STUDY_RUNNER_ATTEMPT: "5", SOME_TOKEN: "value-that-must-not-leak", ANTHROPIC_API_KEY: "another-secret-value" });
    expect(r.records).toHaveLength(1);
    const { file, record } = r.records[0]!;
    expect(file).toMatch(/^5-\d+-[0-9a-f]{8}\.json$/);
    expect(record.argv).toEqual(streamJsonArgs());
    expect(record.envNames).toEqual(expect.arrayContaining(["SOME_TOKEN", "ANTHROPIC_API_KEY", "STUDY_RUNNER_ATTEMPT"]));
    expect(record.anthropicApiKeyPresent).toBe(true);
    expect(record.attempt).toBe("5");
    expect(record.cwd).toBe(workspace);
    expect(record.listings[workspace]).toEqual({ entries: ["README.md", "src"] });
    expect(JSON.stringify(record)).not.toMatch(/value-that-must-not-leak|another-secret-value/);
  });

  it("names a run without an attempt index 'probe' and sees a login file without reading it", async () => {
    const home = await scratchDir("fake-home-");
    await mkdir(join(home, ".claude"));
    await writeFile(join(home, ".claude", ".credentials.json"), '{"claudeAiOauth":{"accessToken":"login-secret"}}');
    const r = await run(["--version"], undefined, { HOME: home });
    const { file, record } = r.records[0]!;
    expect(file).toMatch(/^probe-/);
    expect(record).toMatchObject({ home, homeWritable: true, credentialsPresent: true, anthropicApiKeyPresent: false });
    expect(JSON.stringify(record)).not.toContain("login-secret");
  });
});

describe("fake claude: acting as the CLI towards a real MCP server", () => {
  async function server(): Promise<string> {
    const dir = await scratchDir("fake-mcp-");
    const file = join(dir, "server.mjs");
    // A real stdio MCP server built with the SDK, with dotted tool names like doc-bridge's.
    await writeFile(
      file,
      `import { createRequire } from "node:module";
const require = createRequire(${JSON.stringify(join(REPO, "package.json"))});
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
const { z } = require("zod");
const server = new McpServer({ name: "doc-bridge", version: "0.0.1" });
server.registerTool("doc.search", { description: "search", inputSchema: { query: z.string() } }, async ({ query }) => ({ content: [{ type: "text", text: "hits for " + query }] }));
server.registerTool("doc.get", { description: "get", inputSchema: { id: z.string() } }, async ({ id }) => ({ content: [{ type: "text", text: "no " + id }], isError: true }));
server.registerTool("gate.status", { description: "status" }, async () => ({ content: [{ type: "text", text: "open" }] }));
await server.connect(new StdioServerTransport());
`,
    );
    return file;
  }

  it("connects, lists live tools minus the deny list, and puts real tool results into the transcript", async () => {
    const config = JSON.stringify({ mcpServers: { "doc-bridge": { command: process.execPath, args: [await server()] } } });
    const args = [
      "-p",
      "--output-format",
      "stream-json",
      "--verbose",
      "--model",
      "claude-haiku-5-5",
      "--tools",
      "Read",
      "--allowedTools",
      "Read",
      "mcp__doc-bridge__doc_search",
      "--disallowedTools",
      "mcp__doc-bridge__gate_status",
      "--mcp-config",
      config,
      "--strict-mcp-config",
      "--",
      "find docs",
    ];
    const r = await run(args, {
      default: {
        kind: "ok",
        mcpCalls: [
          { tool: "doc.search", arguments: { query: "pins" } },
          { tool: "doc.get", arguments: { id: "x" } },
        ],
      },
    });
    expect(r.stderr).toBe("");
    const events = parseEvents(r.stdout);
    expect(events[0]).toMatchObject({
      tools: ["Read", "mcp__doc-bridge__doc_search", "mcp__doc-bridge__doc_get"],
      mcp_servers: [{ name: "doc-bridge", status: "connected", source: "dynamic" }],
    });
    const uses = events
      .filter((e) => e.type === "assistant")
      .flatMap((e) => e.message.content)
      .filter((c: any) => c.type === "tool_use");
    const results = new Map(
      events
        .filter((e) => e.type === "user")
        .flatMap((e) => e.message.content)
        .map((c: any) => [c.tool_use_id, c]),
    );
    const search = uses.find((u: any) => u.name === "mcp__doc-bridge__doc_search");
    const get = uses.find((u: any) => u.name === "mcp__doc-bridge__doc_get");
    expect(search.input).toEqual({ query: "pins" });
    expect(results.get(search.id)).toMatchObject({ content: [{ type: "text", text: "hits for pins" }] });
    expect(results.get(search.id).is_error).toBeUndefined();
    expect(results.get(get.id)).toMatchObject({ is_error: true, content: [{ type: "text", text: "no x" }] });
    expect(events.at(-1)!.subtype).toBe("success");
  });

  it("shows a server that cannot start as failed, with its tools absent, and still succeeds", async () => {
    const config = JSON.stringify({ mcpServers: { "doc-bridge": { command: "/absent/doc-bridge" } } });
    const r = await run(streamJsonArgs({ allowed: ["Read", "mcp__doc-bridge__doc_search"], mcpConfig: config }), { default: { kind: "ok", mcpCalls: [] } });
    const events = parseEvents(r.stdout);
    expect(events[0]).toMatchObject({ tools: ["Glob", "Grep", "Read"], mcp_servers: [{ name: "doc-bridge", status: "failed", source: "dynamic" }] });
    expect(events.at(-1)!.subtype).toBe("success");
  });

  it("reads --mcp-config from a file path too", async () => {
    const dir = await scratchDir("fake-mcp-cfg-");
    const path = join(dir, "mcp.json");
    await writeFile(path, JSON.stringify({ mcpServers: { "doc-bridge": { command: process.execPath, args: [await server()] } } }));
    const r = await run(streamJsonArgs({ mcpConfig: path }), { default: { kind: "ok", mcpCalls: [] } });
    expect(parseEvents(r.stdout)[0]!.tools).toEqual(["Glob", "Grep", "Read", "mcp__doc-bridge__doc_search", "mcp__doc-bridge__doc_get", "mcp__doc-bridge__gate_status"]);
    expect(await readFile(path, "utf8")).toContain("doc-bridge");
  });
});
