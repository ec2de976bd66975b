/**
 * The init event of each kind of run (contract R125, R223): what a version's CLI writes first,
 * reduced to the fields compared by the transcript check (without those that vary per run and
 * those a parameter sets). Two runs of a kind must agree, and every run must have completed.
 */
import { jsonObjectLine } from "../util/json-line.ts";
import { isDeepStrictEqual } from "node:util";
import { expectedInitTools } from "../claude/args.ts";
import { InitEventSchema } from "../claude/events.ts";
import { INIT_KINDS, INIT_PARAMETER_FIELDS, isSessionKind, varyingFields, type GeneratedInitEvents, type InitKind, type MeasuredInitKind } from "../claude/init-expectation.ts";

/** One measured run: its kind, the arguments' values the parameters take, and its whole init event. */
export interface MeasuredInit {
  kind: InitKind;
  model: string;
  sessionId?: string;
  init: Record<string, unknown>;
  /** How the run ended, as the runner classified it. */
  status: string;
}

/** The init event among a run's stdout lines; null when it wrote none. */
export function initOf(lines: readonly string[]): Record<string, unknown> | null {
  for (const line of lines) {
    if (!line.includes('"init"')) continue;
    const event = jsonObjectLine(line);
    if (event?.type === "system" && event.subtype === "init") return event;
  }
  return null;
}

/** The measured part of one run's init event: without the varying fields and those a parameter sets. */
export function measuredPart(kind: InitKind, init: Record<string, unknown>): MeasuredInitKind {
  const varying = varyingFields(kind);
  const skip = new Set([...Object.keys(varying), ...Object.keys(INIT_PARAMETER_FIELDS)]);
  return {
    fields: Object.fromEntries(Object.entries(init).filter(([k]) => !skip.has(k))),
    varying: Object.keys(init)
      .filter((k) => k in varying)
      .sort(),
  };
}

/** Differences between two runs of one kind, and a kind with fewer than two runs, as problems. */
function agreementProblems(kind: InitKind, runs: readonly MeasuredInit[]): string[] {
  const problems: string[] = [];
  if (runs.length < 2) problems.push(`${kind}: ${runs.length} run(s) measured; two are needed to tell a constant field from a varying one`);
  const parts = runs.map((r) => measuredPart(kind, r.init));
  for (const [i, p] of parts.entries()) {
    const first = parts[0]!;
    const keys = [...new Set([...Object.keys(p.fields), ...Object.keys(first.fields)])].filter((k) => !isDeepStrictEqual(p.fields[k], first.fields[k]));
    if (!isDeepStrictEqual(p.varying, first.varying)) keys.push(`the varying fields present (${p.varying.join(", ")} against ${first.varying.join(", ")})`);
    if (keys.length > 0) problems.push(`${kind}: run ${i} differs from run 0 in ${keys.join(", ")}`);
  }
  return problems;
}

/** What one run's init must hold for the transcript rules: its varying fields in shape, the ids and model passed, and a completed run. */
function runProblems(kind: InitKind, r: MeasuredInit): string[] {
  const problems: string[] = [];
  for (const [k, v] of Object.entries(varyingFields(kind))) {
    if (k in r.init && !(typeof r.init[k] === "string" && v.shape.test(r.init[k] as string))) problems.push(`${kind}: ${k} ${JSON.stringify(r.init[k])} does not have the shape ${v.shape}`);
  }
  if (isSessionKind(kind) && r.init.session_id !== r.sessionId) problems.push(`${kind}: session_id ${JSON.stringify(r.init.session_id)} is not the id passed, ${r.sessionId}`);
  if (r.init.model !== r.model) problems.push(`${kind}: model ${JSON.stringify(r.init.model)} is not the --model passed, ${r.model}`);
  return problems;
}

/**
 * The init events from the runs: per kind, the measured part of the init. Differences between two
 * runs of one kind, a kind with fewer than two runs, a run that did not complete, or an init
 * without what the transcript rules read are returned as problems instead.
 */
export function generatedFrom(measured: readonly MeasuredInit[]): { data: GeneratedInitEvents; problems: string[] } {
  const problems: string[] = [];
  const kinds = {} as GeneratedInitEvents["kinds"];
  for (const kind of INIT_KINDS) {
    const runs = measured.filter((m) => m.kind === kind);
    problems.push(...agreementProblems(kind, runs));
    for (const r of runs) problems.push(...runProblems(kind, r));
    const bad = runs.filter((r) => r.status !== "completed");
    if (bad.length > 0) problems.push(`${kind}: ${bad.length} run(s) did not complete (${bad.map((b) => b.status).join(", ")})`);
    if (runs[0]) kinds[kind] = measuredPart(kind, runs[0].init);
  }
  return { data: { kinds }, problems };
}

/**
 * What the transcript rules read of an init (contract R223), checked on one run of each kind of
 * version `version`: the event's schema (model, tools, MCP servers), the version it names, the
 * API key source `none` (no key reached the container), and an attempt's exact tool set.
 */
export function initRuleProblems(measured: readonly MeasuredInit[], version: string): string[] {
  const problems: string[] = [];
  for (const kind of INIT_KINDS) {
    const run = measured.find((m) => m.kind === kind);
    if (!run) continue;
    const parsed = InitEventSchema.safeParse(run.init);
    if (!parsed.success) problems.push(`${kind}: the init lacks what the transcript rules read (${parsed.error.issues.map((i) => `${i.path.join(".") || "event"}: ${i.message}`).join("; ")})`);
    if (run.init.claude_code_version !== version) problems.push(`${kind}: the init names claude_code_version ${JSON.stringify(run.init.claude_code_version)}, not ${version}`);
    if (run.init.apiKeySource !== "none") problems.push(`${kind}: the init's apiKeySource is ${JSON.stringify(run.init.apiKeySource)}, not "none"`);
    if (kind === "attempt-repository" || kind === "attempt-mcp") {
      const tools = Array.isArray(run.init.tools) ? [...(run.init.tools as string[])].sort() : [];
      const want = expectedInitTools(kind === "attempt-mcp" ? "mcp" : "repository");
      if (!isDeepStrictEqual(tools, want)) problems.push(`${kind}: the init lists the tools ${tools.join(", ")}, not the arm's ${want.join(", ")}`);
    }
  }
  return problems;
}
