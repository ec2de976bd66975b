/**
 * Deterministic inputs of the benchmarks: a stream-json transcript of the real CLI's shape
 * (measured sample: /work/shared/facts/claude-2.1.296-stream-sample.jsonl) and the entries of
 * a source repository with files the public-path filter keeps out mixed in.
 */
import { expectedInit } from "../src/claude/init-expectation.ts";
import { initEventFrom } from "../tests/support/init-event.ts";
import type { FixtureEntry } from "../tests/support/git-fixture.ts";
import { seededRandom } from "../src/report/stats.ts";

/** A small seeded generator (the report's own, mulberry32), so every run measures the same bytes. */
export const prng = seededRandom;

const WORDS = [
  "const",
  "return",
  "function",
  "export",
  "import",
  "await",
  "value",
  "result",
  "options",
  "config",
  "amount",
  "ledger",
  "entry",
  "period",
  "queue",
  "retry",
  "backoff",
  "route",
  "match",
  "params",
  "if",
  "else",
  "for",
  "of",
  "new",
  "throw",
  "Error",
  "null",
  "undefined",
  "=>",
  "{",
  "}",
  "(",
  ")",
  "this",
  "let",
  "true",
  "false",
  "string",
  "number",
  '"text"',
  "'quoted'",
  "0",
  "1",
  "42",
  "+",
  "===",
];

/** Source-like text of about `bytes` bytes (compresses like code, not like random bytes). */
export function codeText(rand: () => number, bytes: number): string {
  const lines: string[] = [];
  let size = 0;
  while (size < bytes) {
    const indent = "  ".repeat(Math.floor(rand() * 4));
    const n = 3 + Math.floor(rand() * 9);
    const words: string[] = [];
    for (let i = 0; i < n; i++) words.push(WORDS[Math.floor(rand() * WORDS.length)]!);
    const line = `${indent}${words.join(" ")};`;
    lines.push(line);
    size += line.length + 1;
  }
  return `${lines.join("\n")}\n`.slice(0, Math.max(bytes, 1));
}

export const TRANSCRIPT_MODEL = "claude-haiku-5-5";
export const TRANSCRIPT_TOOLS = ["Glob", "Grep", "Read"] as const;
/** The measured init of a repository attempt with the transcript's model. */
export const TRANSCRIPT_INIT = expectedInit("attempt-repository", { model: TRANSCRIPT_MODEL });
export const TRANSCRIPT_VERSION = "2.1.296";
const SESSION = "4e082d2c-08fc-43ac-b18b-ad3e8d674eaf";
/** Room kept for the final answer and the result event. */
const TAIL_RESERVE = 4096;

export interface TranscriptShape {
  /** Lines (events) generated. */
  lines: number;
  bytes: number;
  toolCalls: number;
}

/**
 * The lines (without newlines) of a clean repository-arm transcript of at most `targetBytes`
 * bytes counting one newline per line: init, then turns of an assistant text event and an
 * assistant tool_use event (one event per content block, repeating the message's id and
 * usage, as the CLI does) and the user's tool_result (with the CLI's `tool_use_result`
 * copy), then the final answer and a result whose usage is the sum of the turns.
 * `shape` is filled in as lines are produced, so the generator holds no line it yielded.
 */
export function* transcriptLines(targetBytes: number, seed = 1, shape: TranscriptShape = { lines: 0, bytes: 0, toolCalls: 0 }): Generator<string> {
  const rand = prng(seed);
  const emit = (event: unknown): string => count(JSON.stringify(event));
  const count = (line: string): string => {
    shape.lines++;
    shape.bytes += Buffer.byteLength(line) + 1;
    return line;
  };
  const ts = (i: number) => new Date(Date.UTC(2026, 10, 30, 5, 0, 0) + i * 250).toISOString();
  const usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };

  // The init the pinned CLI writes for a repository attempt, from the measurement (src/claude/init-expectation.ts).
  yield emit(initEventFrom(TRANSCRIPT_INIT, { sessionId: SESSION, uuid: "dda43ec2-6145-40a4-ba84-69889902ab30", pid: 17 }));

  for (let turn = 1; ; turn++) {
    const msgId = `msg_${String(turn).padStart(6, "0")}`;
    const toolId = `toolu_${String(turn).padStart(6, "0")}`;
    const u = {
      input_tokens: 50 + Math.floor(rand() * 200),
      output_tokens: 20 + Math.floor(rand() * 120),
      cache_creation_input_tokens: turn === 1 ? 4000 : Math.floor(rand() * 600),
      cache_read_input_tokens: turn === 1 ? 0 : 4000 + turn * 300,
    };
    const kind = TRANSCRIPT_TOOLS[Math.floor(rand() * 3)]!;
    const file = `/workspace/src/module${Math.floor(rand() * 400)}/file${Math.floor(rand() * 50)}.js`;
    const input = kind === "Read" ? { file_path: file } : kind === "Grep" ? { pattern: "export function", path: "/workspace" } : { pattern: "**/*.js" };
    let body: string;
    if (kind === "Read") {
      body = codeText(rand, 400 + Math.floor(rand() * 6000))
        .split("\n")
        .map((l, i) => `${i + 1}\t${l}`)
        .join("\n");
    } else {
      const n = 5 + Math.floor(rand() * 40);
      body = Array.from({ length: n }, () => `/workspace/src/module${Math.floor(rand() * 400)}/file${Math.floor(rand() * 50)}.js`).join("\n");
    }
    const message = (content: unknown[]) => ({
      type: "assistant",
      message: { id: msgId, type: "message", role: "assistant", model: TRANSCRIPT_MODEL, content, stop_reason: null, stop_sequence: null, usage: u, context_management: null },
      parent_tool_use_id: null,
      session_id: SESSION,
      uuid: `${msgId}-${content.length}`,
      timestamp: ts(turn),
    });
    const lines = [
      JSON.stringify(message([{ type: "text", text: `Looking at ${kind === "Read" ? file : "the workspace"} next (step ${turn}).` }])),
      JSON.stringify(message([{ type: "tool_use", id: toolId, name: kind, input }])),
      JSON.stringify({
        type: "user",
        message: { role: "user", content: [{ tool_use_id: toolId, type: "tool_result", content: body }] },
        parent_tool_use_id: null,
        session_id: SESSION,
        uuid: `${toolId}-result`,
        timestamp: ts(turn),
        tool_use_result:
          kind === "Read" ? { type: "text", file: { filePath: file, content: body, numLines: body.split("\n").length, startLine: 1 } } : { mode: "files_with_matches", filenames: body.split("\n") },
      }),
    ];
    const turnBytes = lines.reduce((s, l) => s + Buffer.byteLength(l) + 1, 0);
    if (shape.bytes + turnBytes + TAIL_RESERVE > targetBytes) break;
    usage.input += u.input_tokens;
    usage.output += u.output_tokens;
    usage.cacheRead += u.cache_read_input_tokens;
    usage.cacheWrite += u.cache_creation_input_tokens;
    shape.toolCalls++;
    for (const line of lines) yield count(line);
  }

  const last = { input_tokens: 120, output_tokens: 180, cache_creation_input_tokens: 0, cache_read_input_tokens: 9000 };
  usage.input += last.input_tokens;
  usage.output += last.output_tokens;
  usage.cacheRead += last.cache_read_input_tokens;
  const answer = "The rounding is half to even, implemented by roundMinor in src/money.js.";
  yield emit({
    type: "assistant",
    message: {
      id: "msg_final",
      type: "message",
      role: "assistant",
      model: TRANSCRIPT_MODEL,
      content: [{ type: "text", text: answer }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: last,
      context_management: null,
    },
    parent_tool_use_id: null,
    session_id: SESSION,
    uuid: "final-answer",
    timestamp: ts(1_000_000),
  });
  const cost = (usage.input * 0.1 + usage.output * 0.5 + usage.cacheRead * 0.01 + usage.cacheWrite * 0.125) / 1e6;
  yield emit({
    type: "result",
    subtype: "success",
    is_error: false,
    duration_ms: 60_000,
    duration_api_ms: 40_000,
    num_turns: shape.toolCalls + 1,
    result: answer,
    stop_reason: "end_turn",
    session_id: SESSION,
    total_cost_usd: cost,
    usage: {
      input_tokens: usage.input,
      cache_creation_input_tokens: usage.cacheWrite,
      cache_read_input_tokens: usage.cacheRead,
      output_tokens: usage.output,
      server_tool_use: { web_search_requests: 0, web_fetch_requests: 0 },
      service_tier: "standard",
      cache_creation: { ephemeral_1h_input_tokens: 0, ephemeral_5m_input_tokens: usage.cacheWrite },
    },
    modelUsage: {
      [TRANSCRIPT_MODEL]: {
        inputTokens: usage.input,
        outputTokens: usage.output,
        cacheReadInputTokens: usage.cacheRead,
        cacheCreationInputTokens: usage.cacheWrite,
        webSearchRequests: 0,
        costUSD: cost,
        contextWindow: 1_000_000,
        maxOutputTokens: 128_000,
        costBasis: "list",
      },
    },
    permission_denials: [],
    terminal_reason: "completed",
    uuid: "2dea69bb-6140-4806-afcf-1d9c307e5b8f",
  });
}

export interface RepoShape {
  files: number;
  bytes: number;
  /** Entries the public-path filter keeps out, by the reason it should give. */
  filtered: Record<string, number>;
}

/**
 * About `files` entries totalling about `totalBytes`: source files under nested folders and,
 * mixed in, what the filter keeps out (node_modules and dist folders, dot-folders, lockfiles,
 * blobs over 200000 bytes, an answer-key folder named by `answerKey`).
 */
export function repoEntries(files: number, totalBytes: number, seed = 7): { entries: FixtureEntry[]; shape: RepoShape; answerKey: string } {
  const rand = prng(seed);
  const answerKey = "answers";
  const entries: FixtureEntry[] = [];
  const filtered: Record<string, number> = {};
  let bytes = 0;
  const add = (path: string, size: number, reason?: string) => {
    entries.push({ path, content: codeText(rand, size) });
    bytes += size;
    if (reason) filtered[reason] = (filtered[reason] ?? 0) + 1;
  };
  // Five files over the 200000-byte bound, and a few hundred small filtered ones.
  for (let i = 0; i < 5; i++) add(`assets/large-${i}.js`, 210_000 + i * 1000, "too-large");
  const smallFiltered = Math.round(files * 0.08);
  for (let i = 0; i < smallFiltered; i++) {
    const k = i % 5;
    const size = 2000 + Math.floor(rand() * 6000);
    if (k === 0) add(`node_modules/dep${i % 40}/lib/index${i}.js`, size, "build-or-dependency-dir");
    else if (k === 1) add(`packages/p${i % 30}/dist/bundle${i}.js`, size, "build-or-dependency-dir");
    else if (k === 2) add(`.github/workflows/w${i}.yml`, size, "hidden");
    else if (k === 3) add(`packages/p${i}/package-lock.json`, size, "lockfile");
    else add(`${answerKey}/task${i}.md`, size, "answer-key");
  }
  const kept = files - entries.length;
  const perFile = Math.max(1, Math.floor((totalBytes - bytes) / kept));
  for (let i = 0; i < kept; i++) {
    // Sizes spread around the mean (0.2x to 1.8x), under the size bound.
    const size = Math.min(199_000, Math.max(64, Math.floor(perFile * (0.2 + 1.6 * rand()))));
    const dir = `src/area${i % 25}/module${Math.floor(i / 25) % 20}`;
    add(`${dir}/file${i}.${i % 7 === 0 ? "md" : "js"}`, size);
  }
  return { entries, shape: { files: entries.length, bytes, filtered }, answerKey };
}
