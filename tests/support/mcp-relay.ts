import { fileURLToPath } from "node:url";

/** The relay script on the host (the image build copies it to CONTAINER_RELAY_PATH): tests run it as a stdio MCP server of their own. */
export const RELAY_SCRIPT_PATH = fileURLToPath(new URL("../../docker/helpers/mcp-relay.cjs", import.meta.url));
