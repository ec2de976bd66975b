import { createHash } from "node:crypto";
import { chmod, chown, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import { realClaudeImage } from "../support/real-claude-image.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import { parseScripts, type ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import { scriptedTotals } from "../support/scripted-totals.ts";
import { runHardened, SOCKET_DIR_IN_CONTAINER } from "./scripted-api-fixtures.ts";

// The REAL Claude Code 2.1.296 binary in the real image, NetworkMode none, driven by the scripted
// API through with-relay.cjs. Proves the scripted server is a Messages API the CLI accepts.

const TOKEN = "test-access-token-not-real";
const runtime = new DockerRuntime();
let image = "";
let api: ScriptedApi | undefined;
const dirs: string[] = [];

beforeAll(async () => {
  image = (await realClaudeImage(runtime)).id;
}, 600_000);

afterEach(async () => {
  await api?.close();
  api = undefined;
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function tempDir(prefix: string, mode: number, owner?: number): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  dirs.push(dir);
  await chmod(dir, mode);
  if (owner !== undefined) await chown(dir, owner, owner);
  return dir;
}

/** A writable HOME for uid 1000 holding a made-up login of the measured shape. */
async function homeWithLogin(): Promise<{ home: string; credentials: string }> {
  const home = await tempDir("claude-home-", 0o700, IMAGE_LAYOUT.uid);
  const claudeDir = join(home, ".claude");
  await mkdir(claudeDir, { mode: 0o700 });
  await chown(claudeDir, IMAGE_LAYOUT.uid, IMAGE_LAYOUT.gid);
  const credentials = JSON.stringify({
    claudeAiOauth: {
      accessToken: TOKEN,
      refreshToken: "test-refresh-token-not-real",
      expiresAt: Date.now() + 365 * 24 * 3600 * 1000,
      scopes: ["user:inference", "user:profile"],
      subscriptionType: "pro",
    },
  });
  const path = join(claudeDir, ".credentials.json");
  await writeFile(path, credentials, { mode: 0o600 });
  await chown(path, IMAGE_LAYOUT.uid, IMAGE_LAYOUT.gid);
  return { home, credentials: path };
}

function claudeArgs(prompt: string): string[] {
  return [
    "-p",
    "--output-format",
    "stream-json",
    "--verbose",
    "--model",
    "claude-haiku-5-5",
    "--max-budget-usd",
    "0.1",
    "--tools",
    "Read,Grep,Glob",
    "--allowedTools",
    "Read,Grep,Glob",
    "--disallowedTools",
    "Bash,Edit,Write",
    "--permission-mode",
    "dontAsk",
    "--permission-prompts",
    "none",
    "--strict-mcp-config",
    "--mcp-config",
    '{"mcpServers":{}}',
    "--no-session-persistence",
    "--",
    prompt,
  ];
}

async function runClaude(script: ScriptInput, prompt: string) {
  const socketDir = await tempDir("claude-api-", 0o755);
  const workspace = await tempDir("claude-ws-", 0o755);
  await writeFile(join(workspace, "README.md"), "The launch code word is PAPAYA.\n", { mode: 0o444 });
  await chmod(workspace, 0o555);
  const { home, credentials } = await homeWithLogin();
  api = await startScriptedApi({ socketPath: join(socketDir, "api.sock"), script });
  const run = await runHardened(runtime, {
    image,
    socketDir,
    home,
    mounts: [{ source: workspace, target: IMAGE_LAYOUT.workspace, readOnly: true }],
    entrypoint: [IMAGE_LAYOUT.node, `${IMAGE_LAYOUT.helpers}/with-relay.cjs`],
    cmd: [`${SOCKET_DIR_IN_CONTAINER}/api.sock`, "--", IMAGE_LAYOUT.claude, ...claudeArgs(prompt)],
    env: { ANTHROPIC_BASE_URL: "http://127.0.0.1:8080" },
    timeoutMs: 90_000,
  });
  // Every stdout line must be one JSON event: the wrapper and relay add nothing to the stream.
  const events = run.stdout
    .toString("utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Record<string, any>);
  return { run, events, credentials, home };
}

const READ_THEN_ANSWER: ScriptInput = {
  name: "read-then-answer",
  turns: [
    {
      text: "I will read the README.",
      toolCalls: [{ name: "Read", input: { file_path: "/workspace/README.md" } }],
      usage: {
        input_tokens: 2000,
        output_tokens: 40,
        cache_creation_input_tokens: 500,
        cache_creation: { ephemeral_5m_input_tokens: 200, ephemeral_1h_input_tokens: 300 },
      },
    },
    { answer: "The code word is PAPAYA.", usage: { input_tokens: 3000, output_tokens: 25, cache_read_input_tokens: 700 } },
  ],
};

describe("real Claude Code 2.1.296 against the scripted API", () => {
  it("runs a real Read tool call and a final answer; the result's usage equals the scripted sums", async () => {
    const { run, events, credentials } = await runClaude(READ_THEN_ANSWER, "What is the code word?");
    expect(run.exitCode, run.stderr).toBe(0);

    const init = events.find((e) => e.type === "system" && e.subtype === "init")!;
    expect(init).toMatchObject({ claude_code_version: "2.1.296", apiKeySource: "none", model: "claude-haiku-5-5", cwd: "/workspace", mcp_servers: [] });
    expect([...init.tools].sort()).toEqual(["Glob", "Grep", "Read"]);

    // The tool really ran in the container, on the read-only workspace.
    const toolUse = events.flatMap((e) => (e.type === "assistant" ? e.message.content : [])).find((b: any) => b.type === "tool_use");
    expect(toolUse).toMatchObject({ name: "Read", input: { file_path: "/workspace/README.md" } });
    const toolResult = events.flatMap((e) => (e.type === "user" ? e.message.content : [])).find((b: any) => b.type === "tool_result");
    expect(toolResult.tool_use_id).toBe(toolUse.id);
    expect(JSON.stringify(toolResult.content)).toContain("PAPAYA");

    const result = events.at(-1)!;
    expect(result).toMatchObject({ type: "result", subtype: "success", is_error: false, result: "The code word is PAPAYA.", permission_denials: [] });
    const totals = scriptedTotals(parseScripts(READ_THEN_ANSWER)[0]!);
    expect(result.usage).toMatchObject(totals);
    expect(result.modelUsage["claude-haiku-5-5"]).toMatchObject({
      inputTokens: totals.input_tokens,
      outputTokens: totals.output_tokens,
      cacheReadInputTokens: totals.cache_read_input_tokens,
      cacheCreationInputTokens: totals.cache_creation_input_tokens,
      costBasis: "list",
    });
    expect(Object.keys(result.modelUsage)).toEqual(["claude-haiku-5-5"]);

    // What the server saw: two scripted turns, the login's token as a bearer (never an API key),
    // and in the second request the real file content, found past the CLI's trailing system entry.
    const messages = api!.requests.filter((r) => r.path.startsWith("/v1/messages"));
    expect(messages.map((r) => r.answer.kind)).toEqual(["tool-calls", "answer"]);
    for (const r of messages) {
      expect(r.auth).toEqual({ bearer: true, apiKey: false, bearerSha256Prefix: createHash("sha256").update(TOKEN).digest("hex").slice(0, 12) });
      expect(r.body).toMatchObject({ model: "claude-haiku-5-5", stream: true, toolNames: ["Glob", "Grep", "Read"] });
    }
    expect(messages[1]!.body!.roles.at(-1)).toBe("system");
    expect(messages[1]!.body!.newestToolResults).toEqual([{ toolUseId: toolUse.id, isError: false, content: expect.stringContaining("PAPAYA") }]);
    expect(messages[1]!.conversation).toBe(`session:${init.session_id}`);
    // The login file is used as it is, not rewritten.
    expect(JSON.parse(await readFile(credentials, "utf8")).claudeAiOauth.accessToken).toBe(TOKEN);
  });

  it("an API error answer ends the run with is_error, the status, and exit code 1", async () => {
    const { run, events } = await runClaude({ name: "bad-request", turns: [{ error: { status: 400, type: "invalid_request_error", message: "scripted bad request" } }] }, "Anything?");
    expect(run.exitCode).toBe(1);
    const result = events.at(-1)!;
    // Measured: the subtype stays "success"; only is_error and api_error_status tell.
    expect(result).toMatchObject({ type: "result", is_error: true, api_error_status: 400, terminal_reason: "api_error", total_cost_usd: 0 });
    expect(result.result).toContain("scripted bad request");
    expect(api!.requests.every((r) => r.answer.kind === "error")).toBe(true);
  });
});
