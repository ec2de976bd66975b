/**
 * An MCP stdio client transport to the doc-bridge engine in its sandbox, with the tail of its
 * stderr kept for the error message: what the preflight probe and the http transport's per-attempt
 * server both start (the CLI transport's engine goes through the bridge, src/mcp/bridge.ts).
 */
import { ChildStdioTransport } from "../process/mcp-stdio.ts";
import type { EngineSandbox } from "./engine-sandbox.ts";

export interface EngineTransport {
  transport: ChildStdioTransport;
  /** The last `tailChars` characters the engine wrote to stderr so far. */
  stderrTail(): string;
}

/** The engine command of `sandbox` as a client transport (started by the client's connect). */
export function engineTransport(sandbox: EngineSandbox, tailChars: number): EngineTransport {
  const [command, ...args] = sandbox.command as [string, ...string[]];
  const transport = new ChildStdioTransport({ command, args, cwd: sandbox.cwd, env: sandbox.env });
  let stderr = "";
  transport.stderr.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString("utf8")).slice(-tailChars);
  });
  return { transport, stderrTail: () => stderr };
}
