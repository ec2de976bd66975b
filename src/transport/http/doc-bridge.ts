import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { errorMessage } from "../../util/errors.ts";
import { ALLOWED_DOC_BRIDGE_TOOLS, cliToolName } from "../../terms/tool-names.ts";
import { prepareEngineSandbox } from "../../mcp/engine-sandbox.ts";
import { engineTransport } from "../../mcp/engine-client.ts";
import { gitHead } from "../../corpus/git.ts";
import type { ToolDefinition, ToolResult, ToolSet } from "./tools.ts";

/**
 * The doc-bridge arm of the Messages API transport: a fresh server per attempt, started on the
 * host as an MCP stdio child (cwd = the checkout, an allowlisted environment without the API
 * key), of which only the three allowed tools are offered. Their API names are Claude Code's
 * (`mcp__doc-bridge__doc_search`), so both transports count calls under the same names; each
 * is mapped back to the exact MCP name when called.
 */

/** The Messages API's rule for tool names. */
const API_TOOL_NAME_RE = /^[a-zA-Z0-9_-]{1,64}$/;
/** A tool result's text beyond this is cut (a runaway server must not fill memory). */
const MAX_RESULT_CHARS = 1024 * 1024;
const STDERR_TAIL = 2000;

export interface DocBridgeCallRecord {
  /** The exact MCP tool name. */
  name: string;
  isError: boolean;
  ms: number;
}

export interface DocBridgeTools extends ToolSet {
  /** Calls in the order they were answered (or failed). */
  calls: DocBridgeCallRecord[];
  serverInfo: { name: string; version: string } | null;
  /** The API names of the offered doc-bridge tools. */
  apiNames: string[];
}

function resultText(res: Record<string, unknown>): string {
  const blocks = Array.isArray(res.content) ? (res.content as Array<{ type?: unknown; text?: unknown }>) : [];
  const parts = blocks.map((b) => (b.type === "text" && typeof b.text === "string" ? b.text : `[${String(b.type)} content omitted]`));
  let text = parts.join("\n");
  if (text === "" && res.structuredContent !== undefined) text = JSON.stringify(res.structuredContent);
  return text.length > MAX_RESULT_CHARS ? `${text.slice(0, MAX_RESULT_CHARS)}\n[cut at ${MAX_RESULT_CHARS} characters]` : text;
}

/**
 * Starts the server and lists its tools. Throws (naming what failed, never the environment)
 * when it does not start within `timeoutMs` or lacks one of the three allowed tools.
 */
export async function openDocBridgeTools(o: { command: readonly string[]; cwd: string; timeoutMs: number; now?: () => number }): Promise<DocBridgeTools> {
  if (!o.command[0]) throw new Error("the doc-bridge engine command is empty");
  const now = o.now ?? (() => performance.now());
  const sandbox = await prepareEngineSandbox({ command: o.command, checkout: o.cwd, pin: await gitHead(o.cwd) });
  const { transport, stderrTail } = engineTransport(sandbox, STDERR_TAIL);
  const client = new Client({ name: "study-runner-http", version: "1.0.0" });
  const calls: DocBridgeCallRecord[] = [];
  const toMcp = new Map<string, string>();
  const definitions: ToolDefinition[] = [];
  try {
    await client.connect(transport, { timeout: o.timeoutMs });
    const listed: Array<{ name: string; description?: string; inputSchema: Record<string, unknown> }> = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor ? { cursor } : undefined, { timeout: o.timeoutMs });
      listed.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor);
    for (const name of ALLOWED_DOC_BRIDGE_TOOLS) {
      const tool = listed.find((t) => t.name === name);
      if (!tool) throw new Error(`the doc-bridge server does not list ${name}`);
      const apiName = cliToolName(name);
      if (!API_TOOL_NAME_RE.test(apiName)) throw new Error(`${apiName} is not a valid Messages API tool name`);
      toMcp.set(apiName, name);
      // `$schema` names the dialect for validators; it is no part of the tool's input, so it is not sent.
      const { $schema: _dialect, ...schema } = tool.inputSchema;
      definitions.push({ name: apiName, description: tool.description ?? "", input_schema: { ...schema, type: "object" } });
    }
  } catch (err) {
    await client.close().catch(() => {});
    await sandbox.remove().catch(() => {});
    const tail = stderrTail().trim().replace(/\s+/g, " ");
    throw new Error(`the doc-bridge server in ${o.cwd} did not start: ${errorMessage(err)}${tail ? ` (server stderr: ${tail.slice(-500)})` : ""}`);
  }
  const info = client.getServerVersion();

  return {
    calls,
    definitions,
    apiNames: [...toMcp.keys()],
    serverInfo: info ? { name: info.name, version: info.version } : null,
    async call(apiName, input, signal): Promise<ToolResult> {
      const name = toMcp.get(apiName);
      if (name === undefined) return { content: `no tool named ${apiName}`, isError: true };
      const started = now();
      let result: ToolResult;
      try {
        const res: Record<string, unknown> = await client.callTool({ name, arguments: input }, undefined, { timeout: o.timeoutMs, signal });
        result = { content: resultText(res), isError: res.isError === true };
      } catch (err) {
        // A JSON-RPC error (bad arguments, a server fault, a timeout) is the tool's answer, not the runner's fault.
        result = { content: `the doc-bridge server answered with an error: ${errorMessage(err)}`.slice(0, 2000), isError: true };
      }
      calls.push({ name, isError: result.isError, ms: Math.round(now() - started) });
      return result;
    },
    async close() {
      // close() ends stdin, then SIGTERM, then SIGKILL: the server never outlives its attempt.
      await client.close().catch(() => {});
      await sandbox.remove().catch(() => {});
    },
  };
}

/** Several tool sets as one; names must not collide. */
export function combineTools(...sets: ToolSet[]): ToolSet {
  const owner = new Map<string, ToolSet>();
  for (const set of sets) {
    for (const d of set.definitions) {
      if (owner.has(d.name)) throw new Error(`two tools are named ${d.name}`);
      owner.set(d.name, set);
    }
  }
  return {
    definitions: sets.flatMap((s) => s.definitions),
    call: (name, input, signal) => owner.get(name)?.call(name, input, signal) ?? Promise.resolve({ content: `no tool named ${name}`, isError: true }),
    close: async () => {
      for (const s of sets) await s.close();
    },
  };
}
