import { defaultIndexRoot, INDEX_DIR_ENV } from "./index-store.ts";

/** The MCP server name in `--mcp-config`; the CLI prefixes its tools with `mcp__doc-bridge__`. */
export const DOC_BRIDGE_SERVER = "doc-bridge";

/** The three doc-bridge tools the treatment allows (seed 000); every other listed tool is denied. */
export const ALLOWED_DOC_BRIDGE_TOOLS = ["doc.search", "doc.get", "handoff.resolve"] as const;

const CLI_PREFIX = `mcp__${DOC_BRIDGE_SERVER}__`;

/**
 * The name Claude Code gives an MCP tool: `mcp__<server>__<tool>` with dots replaced by
 * underscores, case kept (measured on 2.1.296: `memory.promoteDraft` ->
 * `mcp__doc-bridge__memory_promoteDraft`).
 */
export function mcpToolName(server: string, tool: string): string {
  return `mcp__${server}__${tool.replaceAll(".", "_")}`;
}

/** The name Claude Code gives a doc-bridge tool. */
export function cliToolName(serverToolName: string): string {
  return mcpToolName(DOC_BRIDGE_SERVER, serverToolName);
}

export function isDocBridgeCliName(name: string): boolean {
  return name.startsWith(CLI_PREFIX);
}

/**
 * Variables a doc-bridge server process may inherit. An allowlist, so credentials such as
 * `ANTHROPIC_API_KEY` never reach it (seed 000: "the environment is an allowlist").
 */
export const SERVER_ENV_ALLOWLIST = ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "TZ", "TMPDIR"] as const;

export function serverEnvironment(source: NodeJS.ProcessEnv = process.env): Record<string, string> {
  // Always explicit: the engine must find the index where this runner's indexer put it, even
  // when the cache variables that choose that folder are not on the allowlist.
  const env: Record<string, string> = { [INDEX_DIR_ENV]: defaultIndexRoot(source) };
  for (const key of SERVER_ENV_ALLOWLIST) {
    const value = source[key];
    // A value starting with "()" is an exported shell function; never pass those on.
    if (value !== undefined && !value.startsWith("()")) env[key] = value;
  }
  return env;
}
