import type { RequestShapes, ShapeNode } from "../profile/schema.ts";
import { ownValue } from "../util/own-keys.ts";
import { jsonPath, type JsonValue } from "../util/strict-json.ts";

/**
 * The shape of the requests the pinned CLI sends, measured on the real binary (every scenario the
 * runner uses; `study-runner calibrate`, src/calibrate/) and kept in the version's calibration
 * profile (contract R220). The gateway admits a request only when it fits: its method, path
 * and query are a measured triple, each header name was measured, each `anthropic-beta` value was
 * measured, and its body fits the measured body shape. Nothing is listed as bad: whatever the
 * measurement never saw is refused (docs/gateway.md, "Allow list").
 */

export type { MeasuredRequest, RequestShapes, ShapeNode } from "../profile/schema.ts";

/** The base a request target is resolved against: only an origin-form target keeps this origin. */
const TARGET_BASE = "http://gateway.invalid";

/** Which of a body position's object kinds `o` is (its string `type`, or "" without one): the one rule of the measurement and the check. */
export const variantOf = (o: { [key: string]: JsonValue }): string => (typeof o.type === "string" ? o.type : "");

const kindOf = (v: JsonValue) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v === "object" ? "object" : (typeof v as "boolean" | "number" | "string"));
const listed = (names: readonly string[]) => {
  const shown = names.slice(0, 12).map((n) => JSON.stringify(n || "(none)"));
  return `${shown.join(", ")}${names.length > 12 ? ", …" : ""}`;
};

/** Null when `value` fits `node`; else what does not fit, naming the body path and what was measured there. */
export function shapeProblem(node: ShapeNode, value: JsonValue, path = ""): string | null {
  if (node.any !== undefined) return null;
  const where = path || "the body";
  const kind = kindOf(value);
  if (kind !== "object" && kind !== "array") {
    if (node[kind]) return null;
    return `${where} is a ${kind}, which the pinned CLI never sends there`;
  }
  if (Array.isArray(value)) {
    if (!node.array) return `${where} is an array, which the pinned CLI never sends there`;
    for (let i = 0; i < value.length; i++) {
      const p = shapeProblem(node.array, value[i]!, jsonPath(path, i));
      if (p) return p;
    }
    return null;
  }
  const o = value as { [key: string]: JsonValue };
  if (!node.object) return `${where} is an object, which the pinned CLI never sends there`;
  const variant = variantOf(o);
  // Own members only: a `type` or a member named "constructor" or "__proto__" is never measured by inheritance.
  const members = ownValue(node.object, variant);
  if (!members) {
    const kinds = Object.keys(node.object);
    return variant === ""
      ? `${where} is an object without a "type", which the pinned CLI never sends there (it sends the types ${listed(kinds)})`
      : `${jsonPath(path, "type")} is ${JSON.stringify(variant.slice(0, 100))}, which the pinned CLI never sends there (it sends ${listed(kinds)})`;
  }
  for (const [k, m] of Object.entries(o)) {
    if (k === "type" && variant !== "") continue;
    const shape = ownValue(members, k);
    if (!shape) return `${where} has the member ${JSON.stringify(k.slice(0, 100))}, which the pinned CLI never sends there${variant ? ` (in a "${variant}")` : ""}`;
    const p = shapeProblem(shape, m, jsonPath(path, k));
    if (p) return p;
  }
  return null;
}

/**
 * The request target (`req.url`) read by a URL parser; null when it is not origin-form
 * (`/path?query`) or is not already the parser's own serialization (dot segments, a fragment,
 * anything the parser would rewrite): the target checked is the target sent.
 */
export function parseTarget(target: string): { path: string; search: string } | null {
  if (!target.startsWith("/") || target.startsWith("//")) return null;
  let url: URL;
  try {
    url = new URL(target, TARGET_BASE);
  } catch {
    return null;
  }
  if (url.origin !== TARGET_BASE || `${url.pathname}${url.search}` !== target) return null;
  return { path: url.pathname, search: url.search };
}

/** Null when the method and target are a measured request; else why not. */
export function targetProblem(shapes: RequestShapes, method: string, target: string): string | null {
  const parsed = parseTarget(target);
  if (!parsed) return `the request target ${JSON.stringify(target.slice(0, 200))} is not a path the pinned CLI sends`;
  const ok = shapes.requests.some((r) => r.method === method && r.path === parsed.path && r.search === parsed.search);
  if (ok) return null;
  const measured = shapes.requests.map((r) => `${r.method} ${r.path}${r.search}`).join(", ");
  return `${method} ${parsed.path}${parsed.search} is not a request the pinned CLI makes for an attempt (it sends only ${measured})`;
}

/** Null when every header name and every `anthropic-beta` value was measured; else the first that was not. */
export function headerProblem(shapes: RequestShapes, rawHeaders: readonly string[]): string | null {
  const names = new Set(shapes.headers);
  const betas = new Set(shapes.anthropicBeta);
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toLowerCase();
    if (!names.has(name)) return `the header ${JSON.stringify(name.slice(0, 100))} is not one the pinned CLI sends`;
    if (name === "anthropic-beta") {
      for (const beta of rawHeaders[i + 1]!.split(",").map((b) => b.trim())) {
        if (!betas.has(beta)) return `the anthropic-beta value ${JSON.stringify(beta.slice(0, 100))} is not one the pinned CLI sends (it sends ${listed([...betas])})`;
      }
    }
  }
  return null;
}
