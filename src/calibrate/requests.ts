/**
 * The request shapes of a Claude Code version (contract R140, R223): what the CLI sent to the
 * scripted Messages API in every scenario the runner uses, reduced to the targets, header names,
 * `anthropic-beta` values and the body's shape the gateway admits (docs/gateway.md, "Allow list").
 */
import { parseTarget, type MeasuredRequest, type RequestShapes } from "../gateway/request-shape.ts";
import type { RecordedRequest } from "../stand-ins/scripted-api/server.ts";
import type { JsonValue } from "../util/strict-json.ts";
import { inferShape } from "./infer-shape.ts";

/**
 * Members whose content is data rather than the request's structure, so any JSON is admitted
 * there: a tool's input JSON Schema (the CLI's tools, the doc-bridge server's, the verdict
 * schema of `--json-schema`) and a tool call's arguments (chosen by the model, echoed back in the
 * history). Neither is read by the API as a request option.
 */
export const OPAQUE_MEMBERS: Readonly<Record<string, string>> = {
  input_schema: "a tool's JSON Schema: data of the tool, not a request option",
  input: "a tool call's arguments, chosen by the model and echoed back in the history",
};

export const SCENARIOS = [
  "study pilot: an attempt of the repository arm and of the doc-bridge arm (tests/conformance/scripts.ts), the first answer of each with a thinking block",
  "adjudicator: one grader run per observation of that pilot, --json-schema (StructuredOutput)",
  "sessions: the session demo's two sessions, each a start and a --resume in a fresh container",
] as const;

/** The shapes of `requests` (what the scripted API recorded, bodies included). */
export function shapesOf(requests: readonly RecordedRequest[]): RequestShapes {
  const triples = new Map<string, MeasuredRequest>();
  const headers = new Set<string>();
  const betas = new Set<string>();
  for (const r of requests) {
    const target = parseTarget(r.path);
    if (!target) throw new Error(`the CLI sent a target that is not origin-form: ${r.path}`);
    triples.set(`${r.method} ${target.path}${target.search}`, { method: r.method, ...target });
    for (const [name, value] of Object.entries(r.headers)) {
      headers.add(name);
      if (name === "anthropic-beta") for (const b of value.split(",")) betas.add(b.trim());
    }
    if (r.rawBody === undefined) throw new Error(`request ${r.seq} (${r.path}) has no recorded body`);
  }
  return {
    scenarios: [...SCENARIOS],
    requestCount: requests.length,
    requests: [...triples.values()].sort((a, b) => `${a.method} ${a.path}${a.search}`.localeCompare(`${b.method} ${b.path}${b.search}`)),
    headers: [...headers].sort(),
    anthropicBeta: [...betas].sort(),
    body: sortedShape(
      inferShape(
        requests.map((r) => r.rawBody as JsonValue),
        OPAQUE_MEMBERS,
      ),
    ),
  };
}

/** Keys in order, so the profile is stable across measurements. */
function sortedShape<T>(v: T): T {
  if (Array.isArray(v)) return v.map(sortedShape) as T;
  if (v === null || typeof v !== "object") return v;
  return Object.fromEntries(
    Object.keys(v)
      .sort()
      .map((k) => [k, sortedShape((v as Record<string, unknown>)[k])]),
  ) as T;
}
