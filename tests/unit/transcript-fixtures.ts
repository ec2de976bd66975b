import { computeCost, type CostResult } from "../../src/cost/compute.ts";
import { STDOUT_LIMIT_BYTES } from "../../src/terms/limits.ts";
import { classifyAttempt, type AttemptClassification } from "../../src/transcript/classify.ts";
import { readTranscript, type TranscriptExpectation, type TranscriptFacts } from "../../src/transcript/reader.ts";
import { attemptInitKind, expectedInit } from "../../src/claude/init-expectation.ts";
import { initEventFrom } from "../support/init-event.ts";

/**
 * Transcripts for the transcript, cost and property tests. The base transcripts are modelled
 * on the stream that Claude Code 2.1.296 wrote (shared facts: stream sample and "Per-message
 * usage in the stream, measured"): one event per content block with a repeated message id and
 * message_start usage, a rate_limit_event between turns, and a result whose usage is the
 * measured two-turn example (5,000 input, 65 output, 700 cache read, 500 cache write 5m:
 * 0.000602 USD).
 */

export const MODEL = "claude-haiku-5-5";
export const REPO_TOOLS = ["Glob", "Grep", "Read"] as const;
export const DOC_TOOLS = ["mcp__doc-bridge__doc_search", "mcp__doc-bridge__doc_get", "mcp__doc-bridge__handoff_resolve"] as const;
/** A distinctive answer: no setup problem, reason or cost problem may ever contain it. */
export const ANSWER = "SECRET-ANSWER: the retry limit lives in src/config/limits.ts (maxRetries = 7)";

export type { Arm } from "../../src/terms/terms.ts";
import type { Arm } from "../../src/terms/terms.ts";
export type Event = Record<string, any>;

export function expectation(arm: Arm): TranscriptExpectation {
  return { arm, model: MODEL, expectedTools: arm === "mcp" ? [...REPO_TOOLS, ...DOC_TOOLS] : [...REPO_TOOLS], init: expectedInit(attemptInitKind(arm), { model: MODEL }) };
}

/** The init event of an attempt of `arm` as the pinned CLI writes it (from the measurement). */
export function initEvent(arm: Arm): Event {
  return initEventFrom(expectedInit(attemptInitKind(arm), { model: MODEL }), { sessionId: SESSION, uuid: "dda43ec2-6145-40a4-ba84-69889902ab30", pid: 17 });
}

const SESSION = "4e082d2c-08fc-43ac-b18b-ad3e8d674eaf";

function assistant(id: string, block: Event, usage: Event): Event {
  return {
    type: "assistant",
    message: { id, type: "message", role: "assistant", model: MODEL, content: [block], stop_reason: null, stop_sequence: null, usage, context_management: null },
    parent_tool_use_id: null,
    session_id: SESSION,
    uuid: `uuid-${id}-${block.type}`,
  };
}

function toolResult(toolUseId: string, content: unknown, isError?: boolean): Event {
  const block: Event = { tool_use_id: toolUseId, type: "tool_result", content };
  if (isError !== undefined) block.is_error = isError;
  return { type: "user", message: { role: "user", content: [block] }, parent_tool_use_id: null, session_id: SESSION, uuid: `uuid-result-${toolUseId}` };
}

export function toolUse(id: string, name: string, input: unknown): Event {
  return { type: "tool_use", id, name, input };
}

export function resultEvent(): Event {
  return {
    type: "result",
    subtype: "success",
    is_error: false,
    duration_ms: 4178,
    duration_api_ms: 3032,
    num_turns: 2,
    result: ANSWER,
    stop_reason: "end_turn",
    session_id: SESSION,
    total_cost_usd: 0.000602,
    usage: {
      input_tokens: 5000,
      cache_creation_input_tokens: 500,
      cache_read_input_tokens: 700,
      output_tokens: 65,
      server_tool_use: { web_search_requests: 0, web_fetch_requests: 0 },
      service_tier: "standard",
      cache_creation: { ephemeral_1h_input_tokens: 0, ephemeral_5m_input_tokens: 500 },
    },
    modelUsage: {
      [MODEL]: {
        inputTokens: 5000,
        outputTokens: 65,
        cacheReadInputTokens: 700,
        cacheCreationInputTokens: 500,
        webSearchRequests: 0,
        costUSD: 0.000602,
        contextWindow: 1000000,
        maxOutputTokens: 128000,
        canonicalModel: MODEL,
        provider: "firstParty",
        costBasis: "list",
      },
    },
    permission_denials: [],
    terminal_reason: "completed",
    api_error_status: null,
    uuid: "2dea69bb-6140-4806-afcf-1d9c307e5b8f",
  };
}

/**
 * A valid transcript. Lines: 0 init; 1-3 message msg_01 (text, tool call A, tool call B);
 * 4-5 their results; 6 rate_limit_event; 7 message msg_02 (the answer); 8 result.
 * Repository arm: A = Grep, B = Read. MCP arm: A = doc_search, B = doc_get.
 */
export function baseEvents(arm: Arm): Event[] {
  const turn1 = {
    input_tokens: 2000,
    output_tokens: 1,
    cache_creation_input_tokens: 500,
    cache_read_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 500, ephemeral_1h_input_tokens: 0 },
  };
  const turn2 = { input_tokens: 3000, output_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 700, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 } };
  const mcp = arm === "mcp";
  return [
    initEvent(arm),
    assistant("msg_01", { type: "text", text: "Let me look for the retry setting." }, turn1),
    assistant("msg_01", mcp ? toolUse("toolu_01", "mcp__doc-bridge__doc_search", { query: "retry limit" }) : toolUse("toolu_01", "Grep", { pattern: "maxRetries" }), turn1),
    assistant("msg_01", mcp ? toolUse("toolu_02", "mcp__doc-bridge__doc_get", { id: "config/limits" }) : toolUse("toolu_02", "Read", { file_path: "/workspace/src/config/limits.ts" }), turn1),
    toolResult("toolu_01", mcp ? [{ type: "text", text: '{"hits":[{"id":"config/limits"}]}' }] : "src/config/limits.ts:3:export const maxRetries = 7;"),
    toolResult("toolu_02", mcp ? [{ type: "text", text: '{"doc":"limits"}' }] : "1\texport const maxRetries = 7;\n"),
    { type: "rate_limit_event", rate_limit_info: { status: "allowed" }, uuid: "rl-1", session_id: SESSION },
    assistant("msg_02", { type: "text", text: ANSWER }, turn2),
    resultEvent(),
  ];
}

export function toText(events: readonly unknown[]): string {
  return events.map((e) => (typeof e === "string" ? e : JSON.stringify(e))).join("\n") + "\n";
}

export interface Evaluation {
  facts: TranscriptFacts;
  cost: CostResult;
  classification: AttemptClassification;
}

/** Reads, prices and classifies a transcript the way the attempt pipeline does. */
export function evaluate(text: string, arm: Arm, run: { exitCode?: number | null; timedOut?: boolean; truncated?: boolean; stdoutLimitBytes?: number } = {}): Evaluation {
  const facts = readTranscript(text, expectation(arm));
  const cost = computeCost({ ...facts, model: MODEL });
  const classification = classifyAttempt({
    facts,
    cost,
    exitCode: run.exitCode === undefined ? 0 : run.exitCode,
    timedOut: run.timedOut ?? false,
    truncated: run.truncated ?? false,
    stdoutLimitBytes: run.stdoutLimitBytes ?? STDOUT_LIMIT_BYTES,
  });
  return { facts, cost, classification };
}

/** The stream sample the real Claude Code 2.1.296 wrote against a scripted server (shared facts), verbatim. */
export const REAL_SAMPLE_LINES: readonly string[] = [
  '{"type": "system", "subtype": "init", "cwd": "/workspace", "session_id": "4e082d2c-08fc-43ac-b18b-ad3e8d674eaf", "tools": ["Glob", "Grep", "Read"], "mcp_servers": [], "model": "claude-haiku-5-5", "permissionMode": "dontAsk", "slash_commands": ["deep-research", "design", "design-sync", "dataviz", "update-config", "verify", "debug", "code-review", "simplify", "batch", "fewer-permission-prompts", "doctor", "loop", "claude-api", "workflow-authoring", "run", "run-skill-generator", "plugin-authoring", "agents", "auto-mode-setup", "autocompact", "clear", "color", "compact", "config", "output-style", "context", "effort", "fast", "focus", "heapdump", "init", "mcp", "model", "__remote-workflow", "workflow-launch-exec", "reload-plugins", "reload-skills", "rename", "security-review", "usage", "insights", "recap", "goal", "design-consent", "design-revoke", "list-agents", "team-onboarding"], "terminal_slash_commands": ["doctor", "color", "focus", "reload-plugins"], "apiKeySource": "ANTHROPIC_API_KEY", "claude_code_version": "2.1.296", "output_style": "default", "agents": ["claude", "Explore", "general-purpose", "Plan", "statusline-setup"], "skills": ["deep-research", "design", "design-sync", "dataviz", "update-config", "verify", "debug", "code-review", "simplify", "batch", "fewer-permission-prompts", "doctor", "loop", "claude-api", "workflow-authoring", "run", "run-skill-generator", "plugin-authoring"], "plugins": [{"name": "cc-plugin-agents-md", "path": "builtin", "source": "cc-plugin-agents-md@builtin"}, {"name": "cc-plugin-telemetry", "path": "builtin", "source": "cc-plugin-telemetry@builtin"}, {"name": "cc-plugin-plugin-authoring", "path": "builtin", "source": "cc-plugin-plugin-authoring@builtin"}], "capabilities": ["interrupt_receipt_v1", "interrupt_cancel_queued_v1", "interrupt_send_now_v1", "msg_lifecycle_v1", "request_marker_lists_v1", "sdk_mcp_tools_list_changed", "sdk_mcp_manifests", "mcp_read_resource_v1", "mcp_tool_ui_meta_v1", "ui_surface_v1"], "analytics_disabled": false, "product_feedback_disabled": false, "uuid": "dda43ec2-6145-40a4-ba84-69889902ab30", "memory_paths": {"auto": "/home/agent/.claude/projects/-workspace/memory/"}, "messaging_socket_path": "/tmp/cc-socks/1.sock", "fast_mode_state": "off", "fast_mode_disabled_reason": "sdk_opt_in_required", "per_turn_effort_active": true, "view_mode": "default"}',
  '{"type": "assistant", "message": {"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-haiku-5-5", "content": [{"type": "tool_use", "id": "toolu_2_0", "name": "Read", "input": {"file_path": "/workspace/README.md"}}], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}, "context_management": null}, "parent_tool_use_id": null, "session_id": "4e082d2c-08fc-43ac-b18b-ad3e8d674eaf", "uuid": "0406b7d0-a921-4647-bba7-19e594843fe2", "timestamp": "2026-11-30T05:01:15.489Z"}',
  '{"type": "user", "message": {"role": "user", "content": [{"tool_use_id": "toolu_2_0", "type": "tool_result", "content": "1\\thello from export\\n2\\t"}]}, "parent_tool_use_id": null, "session_id": "4e082d2c-08fc-43ac-b18b-ad3e8d674eaf", "uuid": "c94876a6-8c5b-4875-b0a8-ca3eccf8e8d7", "timestamp": "2026-11-30T05:01:15.533Z", "tool_use_result": {"type": "text", "file": {"filePath": "/workspace/README.md", "content": "hello from export\\n", "numLines": 2, "startLine": 1, "totalLines": 2}}, "tool_result_meta": [{"id": "toolu_2_0", "permission_decision": {"decision": "accept", "source": "config", "reason_type": "rule"}}]}',
  '{"type": "assistant", "message": {"id": "msg_3", "type": "message", "role": "assistant", "model": "claude-haiku-5-5", "content": [{"type": "tool_use", "id": "toolu_3_0", "name": "Read", "input": {"file_path": "/workspace/README.md"}}], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}, "context_management": null}, "parent_tool_use_id": null, "session_id": "4e082d2c-08fc-43ac-b18b-ad3e8d674eaf", "uuid": "ce580069-1964-431f-a3d5-8da9ffe70724", "timestamp": "2026-11-30T05:01:15.564Z"}',
  '{"duration_api_ms": 32, "stop_reason": "end_turn", "session_id": "8bab4014-c9b9-4997-bc1d-1f2625116d08", "total_cost_usd": 2.5e-06, "usage": {"input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 3, "output_tokens_details": {"thinking_tokens": 0}, "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0}, "service_tier": "standard", "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0}, "inference_geo": "", "iterations": [], "speed": "standard", "fallback_credit": null}, "modelUsage": {"claude-haiku-5-5": {"inputTokens": 10, "outputTokens": 3, "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0, "webSearchRequests": 0, "costUSD": 2.5e-06, "contextWindow": 1000000, "maxOutputTokens": 128000, "thinkingTokens": 0, "canonicalModel": "claude-haiku-5-5", "provider": "firstParty", "costBasis": "list"}}, "permission_denials": [], "terminal_reason": "completed", "fast_mode_state": "off", "fast_mode_disabled_reason": "sdk_opt_in_required", "subagent_stats": {"spawned": 0, "requested": {"background": 0, "foreground": 0, "unset": 0}, "started_in_background": 0, "max_depth": 0, "spawned_by_subagents": 0, "completed": 0, "failed": 0, "killed": {"parent": 0, "user": 0, "system": 0}, "refused": {"depth_limit": 0, "concurrency_limit": 0, "budget": 0}, "by_type": {}}, "safety_stops": 0, "is_error": false, "num_turns": 1, "subtype": "success", "api_error_status": null, "result": "ok", "ttft_ms": 157, "type": "result", "duration_ms": 178, "uuid": "2dea69bb-6140-4806-afcf-1d9c307e5b8f", "ttft_stream_ms": 156, "time_to_request_ms": 144, "first_content_frame_ms": 156, "queued_turn_count": 0, "result_index": 0}',
];
