/** The MCP server name in `--mcp-config`; the CLI prefixes its tools with `mcp__doc-bridge__`. */
export const DOC_BRIDGE_SERVER = "doc-bridge";

/** The three doc-bridge tools the treatment allows (contract R16); every other listed tool is denied. */
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
