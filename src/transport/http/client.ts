import { z } from "zod";
import { parseUsage, type CacheReported, type MeteredUsage } from "../../cost/usage.ts";
import { UsageError, errorMessage } from "../../util/errors.ts";

/**
 * One call of the Anthropic Messages API over Node's built-in `fetch`, so
 * the study adds no SDK dependency. Non-streaming JSON, no redirects, bounded
 * in time and size. Every way a call can end is a value, never an exception, so the caller can
 * decide what stays charged; nothing here ever puts the key into a message.
 */

export const ANTHROPIC_VERSION = "2023-06-01";
export const DEFAULT_API_BASE_URL = "https://api.anthropic.com";
/** A reply larger than this is not read to the end: the call counts as lost (and stays charged). */
export const MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost"]);

/**
 * The API base: `https://api.anthropic.com`, or a loopback `http://127.0.0.1:<port>` /
 * `http://localhost:<port>` for tests (the scripted Messages API). Anything else is refused, so
 * the key can only ever travel to the real API or to this machine.
 */
export function parseApiBaseUrl(value: string | undefined): string {
  if (value === undefined) return DEFAULT_API_BASE_URL;
  const fix = "--api-base-url accepts only https://api.anthropic.com, http://127.0.0.1:<port> or http://localhost:<port> (tests)";
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`--api-base-url is not a URL; ${fix}`);
  }
  const bare = url.username === "" && url.password === "" && url.search === "" && url.hash === "" && url.pathname === "/";
  const real = url.protocol === "https:" && url.hostname === "api.anthropic.com" && url.port === "";
  const loopback = url.protocol === "http:" && LOOPBACK_HOSTS.has(url.hostname) && url.port !== "";
  if (!bare || !(real || loopback)) throw new UsageError(`--api-base-url ${url.origin} is refused; ${fix}`);
  return url.origin;
}

/**
 * The key is sent as a header: only visible ASCII may pass, so `fetch` never has a reason to
 * quote it in a header-validation error. The message never includes the value.
 */
export function checkApiKey(key: string): string | undefined {
  if (key === "") return "ANTHROPIC_API_KEY is empty";
  if (/[\r\n]/.test(key)) return "ANTHROPIC_API_KEY contains a line break; export the key alone";
  if (!/^[\x21-\x7e]+$/.test(key)) return "ANTHROPIC_API_KEY contains a space or a character outside visible ASCII; export the key alone";
  return undefined;
}

/** `text` with every occurrence of `secret` (as is, and as it reads inside a JSON string) replaced. */
export function redactSecret(text: string, secret: string): string {
  if (secret === "") return text;
  let out = text.split(secret).join("[redacted]");
  const escaped = JSON.stringify(secret).slice(1, -1);
  if (escaped !== secret) out = out.split(escaped).join("[redacted]");
  return out;
}

/** A deep copy of `value` with `secret` redacted from every string (keys included). */
export function redactDeep<T>(value: T, secret: string): T {
  const walk = (v: unknown): unknown => {
    if (typeof v === "string") return redactSecret(v, secret);
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [redactSecret(k, secret), walk(x)]));
    return v;
  };
  return walk(value) as T;
}

const TextBlockSchema = z.looseObject({ type: z.literal("text"), text: z.string() });
const ToolUseBlockSchema = z.looseObject({
  type: z.literal("tool_use"),
  id: z.string().min(1).max(200),
  name: z.string().min(1).max(200),
  input: z.record(z.string(), z.unknown()),
});

const MessageSchema = z.looseObject({
  type: z.literal("message"),
  role: z.literal("assistant"),
  model: z.string().min(1),
  content: z.array(z.looseObject({ type: z.string() })),
  stop_reason: z.string().nullable(),
});

/**
 * A reply's usage, read by the gateway's own reading (`parseUsage`, src/cost/usage.ts).
 * `cacheReported` says which cache figures the reply gave: one it left out is unknown, counted as zero.
 */
export interface MeasuredUsage extends MeteredUsage {
  cacheReported: CacheReported;
}

export type ContentBlock =
  | { type: "text"; text: string }
  | { type: "tool_use"; id: string; name: string; input: Record<string, unknown> }
  /** Any other block type (thinking, server tools, ...): the request asked for none. */
  | { type: "other"; blockType: string };

export interface AssistantMessage {
  model: string;
  content: ContentBlock[];
  stopReason: string | null;
}

export type CallOutcome =
  /** A reply with valid usage and a usable message. */
  | { kind: "message"; httpStatus: number; usage: MeasuredUsage; message: AssistantMessage }
  /** Valid usage, but the body is not a usable message: charged as measured, the attempt fails. */
  | { kind: "bad-message"; httpStatus: number; usage: MeasuredUsage; problem: string }
  /** A 2xx JSON reply whose usage is missing or invalid: nothing measured, the reservation stays charged. */
  | { kind: "invalid-usage"; httpStatus: number; problem: string }
  /** An HTTP error status (its body carries no usage): the reservation stays charged. */
  | { kind: "api-error"; httpStatus: number; errorType: string | null; problem: string }
  /** No complete reply: reset, refused, redirected, aborted, unreadable. Ambiguous, so charged. */
  | { kind: "lost"; problem: string; aborted: "deadline" | "signal" | null };

export interface SendOptions {
  /** `parseApiBaseUrl` output. */
  baseUrl: string;
  apiKey: string;
  /** The JSON request body, exactly as sent (its bytes were reserved for). */
  body: string;
  /** The call is aborted (and counts as lost) after this many milliseconds. */
  timeoutMs: number;
  /** Aborts the call (SIGINT/SIGTERM). */
  signal?: AbortSignal;
  maxResponseBytes?: number;
}

function describe(err: unknown): string {
  const cause = (err as { cause?: unknown }).cause;
  const code = (cause as { code?: unknown } | undefined)?.code;
  const detail = cause === undefined ? "" : ` (${typeof code === "string" ? code : errorMessage(cause)})`;
  return `${errorMessage(err)}${detail}`;
}

async function readBounded(res: Response, limit: number): Promise<Buffer | "too-large"> {
  if (!res.body) return Buffer.alloc(0);
  const chunks: Buffer[] = [];
  let size = 0;
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      return "too-large";
    }
    chunks.push(Buffer.from(value));
  }
  return Buffer.concat(chunks);
}

/**
 * The usage of a 2xx reply: the one reading the gateway uses too, so what it refuses is refused
 * here and what it reads is read the same way. The request asks for no caching, but cache tokens a
 * reply reports are counted and priced like any other (src/transport/http/pricing.ts), never ignored.
 */
function readUsage(raw: unknown): { ok: true; usage: MeasuredUsage } | { ok: false; problem: string } {
  const reading = parseUsage(raw);
  return reading.ok ? { ok: true, usage: { ...reading.usage, cacheReported: reading.cacheReported } } : reading;
}

function parseMessage(json: Record<string, unknown>): { ok: true; message: AssistantMessage } | { ok: false; problem: string } {
  const m = MessageSchema.safeParse(json);
  if (!m.success) return { ok: false, problem: `the reply is not an assistant message (${[...new Set(m.error.issues.map((i) => i.path.join(".") || "body"))].join(", ")})` };
  const content: ContentBlock[] = [];
  for (const [i, block] of m.data.content.entries()) {
    if (block.type === "text") {
      const t = TextBlockSchema.safeParse(block);
      if (!t.success) return { ok: false, problem: `content[${i}] is not a valid text block` };
      content.push({ type: "text", text: t.data.text });
    } else if (block.type === "tool_use") {
      const t = ToolUseBlockSchema.safeParse(block);
      if (!t.success) return { ok: false, problem: `content[${i}] is not a valid tool_use block` };
      content.push({ type: "tool_use", id: t.data.id, name: t.data.name, input: t.data.input });
    } else {
      content.push({ type: "other", blockType: block.type.slice(0, 100) });
    }
  }
  return { ok: true, message: { model: m.data.model, content, stopReason: m.data.stop_reason } };
}

/** Sends one request and classifies what came back. Never throws for anything the network or the API does. */
export async function sendMessages(o: SendOptions): Promise<CallOutcome> {
  const redact = (text: string) => redactSecret(text, o.apiKey);
  const timeout = AbortSignal.timeout(Math.max(1, Math.floor(o.timeoutMs)));
  const signal = o.signal ? AbortSignal.any([timeout, o.signal]) : timeout;
  const abortedBy = (): "deadline" | "signal" | null => (o.signal?.aborted ? "signal" : timeout.aborted ? "deadline" : null);

  let res: Response;
  let raw: Buffer | "too-large";
  try {
    res = await fetch(`${o.baseUrl}/v1/messages`, {
      method: "POST",
      headers: {
        "x-api-key": o.apiKey,
        "anthropic-version": ANTHROPIC_VERSION,
        "content-type": "application/json",
        accept: "application/json",
      },
      body: o.body,
      // A redirect could carry the key elsewhere; the API never redirects this endpoint.
      redirect: "error",
      signal,
    });
    raw = await readBounded(res, o.maxResponseBytes ?? MAX_RESPONSE_BYTES);
  } catch (err) {
    const aborted = abortedBy();
    const why = aborted === "deadline" ? `no complete reply within ${Math.round(o.timeoutMs)} ms` : aborted === "signal" ? "aborted by a signal" : redact(describe(err));
    return { kind: "lost", problem: `the request got no complete reply: ${why}`, aborted };
  }
  if (raw === "too-large") return { kind: "lost", problem: `the reply is larger than ${o.maxResponseBytes ?? MAX_RESPONSE_BYTES} bytes`, aborted: null };

  let json: unknown;
  try {
    json = JSON.parse(raw.toString("utf8"));
  } catch {
    json = undefined;
  }
  const obj = json !== null && typeof json === "object" && !Array.isArray(json) ? (json as Record<string, unknown>) : undefined;

  if (res.status < 200 || res.status > 299) {
    const error = obj?.error as { type?: unknown; message?: unknown } | undefined;
    const type = typeof error?.type === "string" ? error.type.slice(0, 100) : null;
    const message = typeof error?.message === "string" ? error.message.slice(0, 300) : "no error message";
    return { kind: "api-error", httpStatus: res.status, errorType: type === null ? null : redact(type), problem: redact(`HTTP ${res.status}${type ? ` ${type}` : ""}: ${message}`) };
  }
  if (!obj) return { kind: "lost", problem: `HTTP ${res.status} with a body that is not a JSON object`, aborted: null };
  const usage = readUsage(obj.usage);
  if (!usage.ok) return { kind: "invalid-usage", httpStatus: res.status, problem: usage.problem };
  const message = parseMessage(obj);
  if (!message.ok) return { kind: "bad-message", httpStatus: res.status, usage: usage.usage, problem: message.problem };
  return { kind: "message", httpStatus: res.status, usage: usage.usage, message: message.message };
}
