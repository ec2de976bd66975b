import { z } from "zod";
import { BUILTIN_DENIED_TOOLS, EMPTY_MCP_CONFIG, HOME_READ_DENIALS, printModeArguments, SYSTEM_READ_DENIALS } from "../claude/args.ts";
import { SessionResultSchema, type SessionResult } from "./schema.ts";

/** A session's tools: the read tools and the two that edit files in the working folder. */
export const SESSION_TOOLS = ["Read", "Edit", "Write", "Glob", "Grep"] as const;
/**
 * What init lists for those tools with `--json-schema` (measured on 2.1.296 by
 * tests/conformance/sessions.test.ts): the CLI adds `StructuredOutput`, the tool the model calls
 * to return the result.
 */
export const SESSION_INIT_TOOLS = [...SESSION_TOOLS, "StructuredOutput"].sort();

/**
 * Edits outside the worktree: HOME holds the CLI's own state (its session files) and the staged
 * login (src/transport/cli/spec.ts); the container's mounts make everything else read-only, and these
 * rules keep the agent from rewriting what the wrapper sends back out (through a channel the
 * kernel keeps it out of, contract R141).
 */
export const SESSION_EDIT_DENIALS = ["//home/agent/**", "//proc/**", "//sys/**"].flatMap((p) => [`Edit(${p})`, `Write(${p})`]);

/** The `--json-schema` value: done with a summary, or one question with a summary so far. */
export function sessionJsonSchema(): string {
  // One object with a status enum rather than oneOf: a flat schema is what a tool input accepts.
  return JSON.stringify({
    type: "object",
    properties: {
      status: { type: "string", enum: ["done", "question"], description: "done when the work is finished; question when one clarifying answer is needed first" },
      summary: { type: "string", description: "what was changed so far and why" },
      question: { type: "string", description: "with status question: the one question to ask" },
    },
    required: ["status", "summary"],
    additionalProperties: false,
  });
}

/** The instruction the task's prompt is wrapped in: how to finish and how to ask. */
export function sessionPrompt(taskPrompt: string): string {
  return [
    "You work in the repository in the current working directory and may edit its files.",
    'When the work is finished, return status "done" with a summary.',
    'If one decision is needed that the repository does not settle, do not guess: return status "question" with the question and a summary of what you did so far.',
    "",
    "Task:",
    taskPrompt,
  ].join("\n");
}

/** The prompt of a resume: the answer, marked as the person's reply to the question. */
export function answerPrompt(answer: string): string {
  return ["The answer to your question:", answer, "", 'Continue the task. Return status "done" with a summary when it is finished, or "question" if you need one more decision.'].join("\n");
}

export interface SessionArgumentOptions {
  model: string;
  maxBudgetUsd: number;
  sessionId: string;
  resume: boolean;
}

/**
 * The session call's `claude` arguments. The same hardening as an attempt (stream-json, the
 * model, the per-call cap, the built-in deny list and HOME/system read denials, no MCP server)
 * with the session's tools, `acceptEdits`, the session flag and `--json-schema`; no prompt
 * operand: the prompt goes on stdin. `--no-session-persistence` is absent: the session file is
 * what a resume needs.
 */
export function sessionArguments(o: SessionArgumentOptions): string[] {
  if (!z.uuid().safeParse(o.sessionId).success) throw new Error(`session id ${o.sessionId} is not a UUID`);
  const denied = [...BUILTIN_DENIED_TOOLS.filter((t) => t !== "Edit" && t !== "Write"), ...HOME_READ_DENIALS, ...SYSTEM_READ_DENIALS, ...SESSION_EDIT_DENIALS];
  return [
    ...printModeArguments(o.model, o.maxBudgetUsd),
    "--tools",
    SESSION_TOOLS.join(","),
    "--allowedTools",
    SESSION_TOOLS.join(","),
    "--disallowedTools",
    denied.join(","),
    "--restricted",
    "--permission-mode",
    "acceptEdits",
    "--permission-prompts",
    "none",
    "--strict-mcp-config",
    "--mcp-config",
    JSON.stringify(EMPTY_MCP_CONFIG),
    o.resume ? "--resume" : "--session-id",
    o.sessionId,
    "--json-schema",
    sessionJsonSchema(),
  ];
}

export type ResultReading = { ok: true; result: SessionResult; source: "structured_output" | "result" } | { ok: false; problem: string };

/** The session result: `structured_output`, else the JSON text of `result` (the field notes' fallback). */
export function readSessionResult(structuredOutput: unknown, resultText: string | null): ResultReading {
  let candidate = structuredOutput;
  let source: "structured_output" | "result" = "structured_output";
  if (candidate === undefined || candidate === null) {
    if (resultText === null) return { ok: false, problem: "the result has neither structured_output nor a result text" };
    try {
      candidate = JSON.parse(resultText);
      source = "result";
    } catch {
      return { ok: false, problem: "the result has no structured_output and its result text is not JSON" };
    }
  }
  const parsed = SessionResultSchema.safeParse(candidate);
  if (!parsed.success)
    return {
      ok: false,
      problem: `the structured result is neither done with a summary nor question with a question and a summary (${parsed.error.issues.map((i) => i.path.join(".") || "(root)").join(", ")})`,
    };
  return { ok: true, result: parsed.data, source };
}
