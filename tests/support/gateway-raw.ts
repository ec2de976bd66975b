/**
 * Requests written as raw bytes on an attempt's gateway socket, so the target, the headers and
 * duplicate keys are exactly what a process in the container could send, and a body of the shape
 * the pinned CLI sends.
 */
import { connect } from "node:net";
import { activeProfile } from "../../src/profile/load.ts";

const CLI_REQUEST_SHAPES = activeProfile().requestShapes;

export const MODEL = "claude-haiku-5-5";
export const REAL = "test-real-credential-not-a-real-token";
/** The beta list the pinned CLI sends (measured), so only what a test changes is unmeasured. */
export const BETAS = CLI_REQUEST_SHAPES.anthropicBeta.join(",");

/** A body of the shape the pinned CLI sends (every member here was measured). */
export const cliBody = (extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  max_tokens: 1000,
  stream: false,
  thinking: { type: "adaptive", display: "updates" },
  system: [{ type: "text", text: "You are a test.", cache_control: { type: "ephemeral", ttl: "1h" } }],
  tools: [{ name: "Read", description: "reads a file", input_schema: { type: "object", properties: { file_path: { type: "string" } } } }],
  metadata: { user_id: "{}" },
  messages: [
    { role: "user", content: "where is rounding?" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "Read", input: { file_path: "/workspace/a.md" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "half to even", is_error: false }] },
  ],
  ...extra,
});

export interface Raw {
  status: number;
  text: string;
}

/** Writes one HTTP/1.1 request as bytes on the attempt's socket and reads the answer until the gateway closes. */
export function raw(socketPath: string, o: { target?: string; token: string; body: string; headers?: Record<string, string> }): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const s = connect(socketPath);
    let text = "";
    s.setEncoding("utf8");
    s.on("data", (d: string) => (text += d));
    s.on("error", reject);
    s.on("close", () => resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text }));
    const headers: Record<string, string> = {
      host: "localhost",
      "content-type": "application/json",
      authorization: `Bearer ${o.token}`,
      "anthropic-beta": BETAS,
      "content-length": String(Buffer.byteLength(o.body)),
      connection: "close",
      ...o.headers,
    };
    const head = Object.entries(headers)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join("");
    s.write(`POST ${o.target ?? "/v1/messages?beta=true"} HTTP/1.1\r\n${head}\r\n`);
    // Not end(): a client that half-closes makes Node abort the request it is still answering.
    s.write(o.body);
  });
}
