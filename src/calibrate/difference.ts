import { isDeepStrictEqual } from "node:util";
import { INIT_KINDS } from "../claude/init-expectation.ts";
import type { Profile, ShapeNode, TierPrices } from "../profile/schema.ts";

/**
 * A readable difference between two calibration profiles (contract R224): what a researcher reads
 * before trusting a new version, or before moving the pin. Lines, grouped by part: the flags gone,
 * added or read differently; per kind of run, the init fields and list members (tools, commands,
 * skills) added or gone and the values changed; the request targets, header names and
 * `anthropic-beta` values added or gone and whether the body's shape changed; the price rows added,
 * gone or changed, and the aliases that resolve elsewhere; the `@` imports inlined (without and with
 * `--restricted`), structured output, resume and the retry events whose reading changed. Nothing
 * else (dates, hashes) is a difference.
 */
export function profileDifference(from: Profile, to: Profile): string[] {
  return [...flagLines(from, to), ...initLines(from, to), ...requestLines(from, to), ...priceLines(from, to), ...behaviourLines(from, to)];
}

const list = (xs: readonly string[]) => xs.join(", ");

function setLines(label: string, before: readonly string[], after: readonly string[]): string[] {
  const added = after.filter((x) => !before.includes(x));
  const gone = before.filter((x) => !after.includes(x));
  return [...(added.length ? [`${label} added: ${list(added)}`] : []), ...(gone.length ? [`${label} gone: ${list(gone)}`] : [])];
}

function flagLines(from: Profile, to: Profile): string[] {
  const lines = setLines("flags", Object.keys(from.flags), Object.keys(to.flags));
  for (const [name, flag] of Object.entries(to.flags)) {
    const was = from.flags[name];
    if (was && !isDeepStrictEqual(was, flag)) lines.push(`flag ${name}: ${JSON.stringify(was)} → ${JSON.stringify(flag)}`);
  }
  return lines;
}

const isStringList = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === "string");

/** A list of objects each named by a string `name` (the init's plugins, MCP servers): compared by name. */
const isNamedList = (v: unknown): v is Array<{ name: string }> => Array.isArray(v) && v.every((x) => typeof (x as { name?: unknown } | null)?.name === "string");
const names = (v: ReadonlyArray<{ name: string }>) => v.map((x) => x.name);

const short = (v: unknown) => {
  const s = JSON.stringify(v) ?? "undefined";
  return s.length > 120 ? `${s.slice(0, 117)}...` : s;
};

function initLines(from: Profile, to: Profile): string[] {
  const lines: string[] = [];
  for (const kind of INIT_KINDS) {
    const a = from.initEvents.kinds[kind].fields;
    const b = to.initEvents.kinds[kind].fields;
    for (const key of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
      if (isDeepStrictEqual(a[key], b[key])) continue;
      const label = `init ${kind}: ${key}`;
      if (!(key in a)) lines.push(`${label} added: ${short(b[key])}`);
      else if (!(key in b)) lines.push(`${label} gone (was ${short(a[key])})`);
      else if (isStringList(a[key]) && isStringList(b[key])) {
        const changes = setLines(label, a[key], b[key]);
        lines.push(...(changes.length > 0 ? changes : [`${label}: reordered`]));
      } else if (isNamedList(a[key]) && isNamedList(b[key])) {
        const changes = setLines(label, names(a[key]), names(b[key]));
        lines.push(...(changes.length > 0 ? changes : [`${label}: ${short(a[key])} → ${short(b[key])}`]));
      } else lines.push(`${label}: ${short(a[key])} → ${short(b[key])}`);
    }
    lines.push(...setLines(`init ${kind}: varying fields`, from.initEvents.kinds[kind].varying, to.initEvents.kinds[kind].varying));
  }
  return lines;
}

function requestLines(from: Profile, to: Profile): string[] {
  const target = (r: { method: string; path: string; search: string }) => `${r.method} ${r.path}${r.search}`;
  const a = from.requestShapes;
  const b = to.requestShapes;
  return [
    ...setLines("request targets", a.requests.map(target), b.requests.map(target)),
    ...setLines("request headers", a.headers, b.headers),
    ...setLines("anthropic-beta values", a.anthropicBeta, b.anthropicBeta),
    ...setLines("request body members", shapePaths(a.body), shapePaths(b.body)),
    ...(isDeepStrictEqual(a.body, b.body) || !isDeepStrictEqual(shapePaths(a.body), shapePaths(b.body)) ? [] : ["request body shape changed (the same members, other kinds of value)"]),
  ];
}

/** Every member of a body shape as a path: `messages[].content[].<text>.text` (an object's `type` value in angle brackets). */
export function shapePaths(node: ShapeNode, at = "", out: string[] = []): string[] {
  if (node.array) shapePaths(node.array, `${at}[]`, out);
  for (const [variant, members] of Object.entries(node.object ?? {})) {
    const base = variant === "" ? at : `${at}<${variant}>`;
    if (variant !== "") out.push(base);
    for (const [name, member] of Object.entries(members)) {
      const path = base === "" ? name : `${base}.${name}`;
      out.push(path);
      shapePaths(member, path, out);
    }
  }
  return at === "" ? [...new Set(out)].sort() : out;
}

function rateChanges(model: string, tier: string, a: TierPrices | null, b: TierPrices | null): string[] {
  if (isDeepStrictEqual(a, b)) return [];
  if (!a || !b) return [`price ${model} ${tier}: ${a ? "gone" : "added"}`];
  return (Object.keys(b) as Array<keyof TierPrices>).filter((k) => a[k] !== b[k]).map((k) => `price ${model} ${tier} ${k}: ${a[k]} → ${b[k]} USD per million tokens`);
}

function priceLines(from: Profile, to: Profile): string[] {
  const a = from.prices;
  const b = to.prices;
  const lines = setLines("priced models", Object.keys(a.models), Object.keys(b.models));
  for (const [model, row] of Object.entries(b.models)) {
    const was = a.models[model];
    if (!was) continue;
    lines.push(...rateChanges(model, "tier 1", was.tier1, row.tier1), ...rateChanges(model, "tier 2", was.tier2, row.tier2));
    if (was.tier1MaxPromptTokens !== row.tier1MaxPromptTokens) lines.push(`price ${model}: second tier above ${was.tier1MaxPromptTokens} → ${row.tier1MaxPromptTokens} prompt tokens`);
  }
  for (const [alias, now] of Object.entries(b.aliases)) {
    const was = a.aliases[alias];
    if (was && was.initModel !== now.initModel) lines.push(`alias ${alias}: runs as ${was.initModel} → ${now.initModel}`);
  }
  return lines;
}

/** The measured behaviours (contract R263), by the label a difference line gives them. */
const BEHAVIOURS = { imports: "imports", structuredOutput: "structured output", resume: "resume", retries: "retries" } as const;

/** Every leaf of a measured behaviour by its path (`plain.maxHops`, `events[0].fields`); a list of strings is one leaf. */
function leaves(v: unknown, at = "", out = new Map<string, unknown>()): Map<string, unknown> {
  if (Array.isArray(v) && !isStringList(v)) {
    for (const [i, x] of v.entries()) leaves(x, `${at}[${i}]`, out);
  } else if (v !== null && typeof v === "object" && !Array.isArray(v)) for (const [k, x] of Object.entries(v)) leaves(x, at === "" ? k : `${at}.${k}`, out);
  else out.set(at, v);
  return out;
}

function behaviourLines(from: Profile, to: Profile): string[] {
  const lines: string[] = [];
  for (const [key, label] of Object.entries(BEHAVIOURS) as Array<[keyof typeof BEHAVIOURS, string]>) {
    const a = from[key] as Record<string, unknown>;
    const b = to[key] as Record<string, unknown>;
    for (const member of [...new Set([...Object.keys(a), ...Object.keys(b)])]) {
      const was = leaves(a[member], member);
      const now = leaves(b[member], member);
      for (const path of [...new Set([...was.keys(), ...now.keys()])]) {
        const x = was.get(path);
        const y = now.get(path);
        if (isDeepStrictEqual(x, y)) continue;
        const name = `${label} ${path}`;
        if (isStringList(x) && isStringList(y)) lines.push(...setLines(name, x, y));
        else if (!was.has(path)) lines.push(`${name} added: ${short(y)}`);
        else if (!now.has(path)) lines.push(`${name} gone (was ${short(x)})`);
        else lines.push(`${name}: ${short(x)} → ${short(y)}`);
      }
    }
  }
  return lines;
}
