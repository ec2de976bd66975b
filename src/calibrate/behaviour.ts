/**
 * What a Claude Code version does beyond its init, requests and prices (contract R263, R264):
 * which `@` imports of the working folder's CLAUDE.md it inlines, without and with `--restricted`;
 * what `--json-schema` gives a run's result; what a `--resume` in a fresh container reports; and
 * what it writes while it retries a 429 and a 529. The imports and the retries are probes of their
 * own (one container run each, the attempt's arguments and container, the scripted Messages API on
 * a unix socket, every request body recorded); structured output and resume are read off the
 * calibration's adjudicator and session scenarios. The readers are pure, so the unit tests feed them.
 */
import { chmod, chown, mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { cliArguments } from "../claude/args.ts";
import { resolveLogin, stageLogin } from "../credentials/login.ts";
import { IMPORT_CHAIN_PROBED, type ImportRules, type Imports, type Profile, type Resume, type Retries, type StructuredOutput } from "../profile/schema.ts";
import { runBounded } from "../sandbox/bounded.ts";
import { dockerSandbox } from "../sandbox/docker-sandbox.ts";
import type { ContainerRuntime } from "../sandbox/port.ts";
import type { ScriptInput, ScriptedUsage } from "../stand-ins/scripted-api/script.ts";
import { startScriptedApi, type RecordedRequest } from "../stand-ins/scripted-api/server.ts";
import { rateLimitStatus } from "../study/attempts.ts";
import { attemptContainerSpec, CONTAINER } from "../transport/cli/spec.ts";
import { jsonObjectLine } from "../util/json-line.ts";
import { MODEL } from "./env.ts";
import { predictedCost } from "./price-probe.ts";

// ---------------------------------------------------------------- imports

/** The import lines of the probe's CLAUDE.md, by the form each measures. */
export const IMPORT_FORMS = {
  relative: "@imports/relative.md",
  absoluteInWorkspace: "@/workspace/imports/absolute.md",
  absoluteOutside: `@${CONTAINER.home}/outside-abs.md`,
  tilde: "@~/outside-tilde.md",
} as const;

const marker = (name: string) => `IMPORT-PROBE-${name.replace(/[^A-Za-z0-9]/g, "_")}-5d1b`;
const CLAUDE_MD_MARKER = marker("CLAUDE.md");
const chainFile = (level: number) => `imports/chain/level${level}.md`;

/**
 * Writes the import probe: a working folder whose CLAUDE.md imports one file in each form and the
 * head of a chain IMPORT_CHAIN_PROBED deep (each link relative to the file importing it), and a
 * HOME holding the two targets outside the working folder. Every file names its own marker.
 */
export async function writeImportProbe(workspace: string, home: string): Promise<void> {
  const put = async (file: string, text: string) => {
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, text, { mode: 0o644 });
  };
  await put(join(workspace, "CLAUDE.md"), `# Notes\n\nMarker ${CLAUDE_MD_MARKER}.\n\n${[...Object.values(IMPORT_FORMS), `@${chainFile(1)}`].join("\n")}\n`);
  await put(join(workspace, "imports", "relative.md"), `Marker ${marker("relative")}.\n`);
  await put(join(workspace, "imports", "absolute.md"), `Marker ${marker("absoluteInWorkspace")}.\n`);
  for (let level = 1; level <= IMPORT_CHAIN_PROBED; level++) {
    await put(join(workspace, chainFile(level)), `Marker ${marker(`level${level}`)}.\n${level < IMPORT_CHAIN_PROBED ? `@level${level + 1}.md\n` : ""}`);
  }
  await put(join(home, "outside-abs.md"), `Marker ${marker("absoluteOutside")}.\n`);
  await put(join(home, "outside-tilde.md"), `Marker ${marker("tilde")}.\n`);
}

/** The import rules a first request body shows: each form's marker present, and how deep the chain's markers go unbroken. */
export function importRulesOf(body: string): ImportRules {
  let maxHops = 0;
  while (maxHops < IMPORT_CHAIN_PROBED && body.includes(marker(`level${maxHops + 1}`))) maxHops++;
  return {
    claudeMd: body.includes(CLAUDE_MD_MARKER),
    relative: body.includes(marker("relative")),
    absoluteInWorkspace: body.includes(marker("absoluteInWorkspace")),
    absoluteOutside: body.includes(marker("absoluteOutside")),
    tilde: body.includes(marker("tilde")),
    maxHops,
  };
}

// ---------------------------------------------------------------- retries

/** The errors the retry probe serves before its answer: a 429 with `retry-after: 1`, then a 529. */
export const RETRY_SCRIPT: ScriptInput = {
  name: "retry-probe",
  turns: [
    { error: { status: 429, type: "rate_limit_error", message: "scripted rate limit" }, times: 1, retryAfterSeconds: 1 },
    { error: { status: 529, type: "overloaded_error", message: "scripted overload" }, times: 1 },
    { answer: "answered after the retries", usage: { input_tokens: 10, output_tokens: 2 } },
  ],
};
const RETRY_SERVED = [429, 529];

const num = (v: unknown) => (typeof v === "number" && Number.isInteger(v) ? v : null);

/** How the announced delay of the retry after the 429 compares with its `retry-after: 1`. */
function retryAfterOf(delay: unknown): Retries["retryAfter"] {
  if (typeof delay !== "number") return "none";
  return delay === 1000 ? "exact" : delay > 1000 ? "longer" : "shorter";
}

/** What the retry probe's stream and requests show (see RetriesSchema). */
export function retriesOf(lines: readonly string[], requests: readonly RecordedRequest[]): Retries {
  const events = lines.map(jsonObjectLine).filter((e): e is Record<string, unknown> => e !== undefined);
  const start = events.findIndex((e) => e.type === "system" && e.subtype === "init");
  const end = events.findIndex((e) => e.type === "assistant" || e.type === "result");
  const between = events.slice(start + 1, end < 0 ? events.length : end);
  const result = events.find((e) => e.type === "result");
  const first429 = between.find((e) => e.error_status === 429);
  return {
    served: RETRY_SERVED,
    requests: requests.filter((r) => r.path.split("?")[0] === "/v1/messages").length,
    events: between.map((e) => ({
      type: String(e.type),
      subtype: typeof e.subtype === "string" ? e.subtype : null,
      errorStatus: num(e.error_status),
      attempt: num(e.attempt),
      maxRetries: num(e.max_retries),
      fields: Object.keys(e).sort(),
    })),
    retryAfter: retryAfterOf(first429?.retry_delay_ms),
    result: { subtype: typeof result?.subtype === "string" ? result.subtype : null, isError: typeof result?.is_error === "boolean" ? result.is_error : null },
  };
}

/**
 * Why the runner cannot serve a version that retries like this (contract R264): its loop backs off
 * on the 429 and 529 it reads from the stream (`rateLimitStatus`), so both must be announced where
 * that reader finds them, and the run must end in a success after them.
 */
export function retryProblems(lines: readonly string[], retries: Retries): string[] {
  const problems: string[] = [];
  const seen = lines.map(rateLimitStatus).filter((s): s is number => s !== null);
  if (!isDeepStrictEqual(seen, RETRY_SERVED)) {
    problems.push(
      `retry: the stream announced the statuses ${JSON.stringify(seen)} where the runner reads them (system/api_retry error_status), not ${JSON.stringify(RETRY_SERVED)}: its backoff would not see a rate limit`,
    );
  }
  if (retries.result.subtype !== "success" || retries.result.isError !== false) {
    problems.push(`retry: after a 429 and a 529 the run ended ${retries.result.subtype} (is_error ${retries.result.isError}), not a success`);
  }
  return problems;
}

// ---------------------------------------------------------------- structured output

/** What `--json-schema` gave each grader run's transcript (see StructuredOutputSchema); every run must show a property for it to hold. */
export function structuredOutputOf(transcripts: ReadonlyArray<readonly string[]>): StructuredOutput {
  const runs = transcripts.map((lines) => {
    const events = lines.map(jsonObjectLine).filter((e): e is Record<string, unknown> => e !== undefined);
    const init = events.find((e) => e.type === "system" && e.subtype === "init");
    const result = events.find((e) => e.type === "result");
    const calls = events.flatMap((e) =>
      e.type === "assistant" ? ((e.message as { content?: Array<Record<string, unknown>> } | undefined)?.content ?? []).filter((b) => b.type === "tool_use" && b.name === "StructuredOutput") : [],
    );
    let text: unknown;
    try {
      text = typeof result?.result === "string" ? JSON.parse(result.result) : undefined;
    } catch {
      text = undefined;
    }
    const output = result?.structured_output;
    return {
      initTool: Array.isArray(init?.tools) && (init.tools as unknown[]).includes("StructuredOutput"),
      resultField: output !== undefined && output !== null,
      equalsToolInput: output !== undefined && calls.length > 0 && isDeepStrictEqual(calls.at(-1)!.input, output),
      resultTextIsJson: text !== undefined && output !== undefined && isDeepStrictEqual(text, output),
    };
  });
  const all = (k: keyof StructuredOutput) => runs.length > 0 && runs.every((r) => r[k]);
  return { initTool: all("initTool"), resultField: all("resultField"), equalsToolInput: all("equalsToolInput"), resultTextIsJson: all("resultTextIsJson") };
}

// ---------------------------------------------------------------- resume

/** One CLI call of a session as the scenario saw it. */
export interface SessionCallLines {
  sessionId: string;
  mode: "start" | "resume";
  status: string;
  lines: readonly string[];
}

/** The cost tolerance between the CLI's figure and the scripted usage priced (USD). */
const COST_TOLERANCE_USD = 1e-9;

/**
 * What the sessions' resumes show (see ResumeSchema): each session's resume must have completed,
 * kept the id, sent the first call's turns, and every one's cost must read the same way. A
 * resume's own cost is its own requests' scripted usage (found by the message ids of its stream)
 * priced by `row`, the version's price row of the scenario's model.
 */
export function resumeOf(calls: readonly SessionCallLines[], requests: readonly RecordedRequest[], scripts: readonly ScriptInput[], row: Profile["prices"]["models"][string] | undefined): Resume {
  const sessions = [...new Set(calls.map((c) => c.sessionId))];
  const each = sessions.map((id) => {
    const start = calls.find((c) => c.sessionId === id && c.mode === "start");
    const resume = calls.find((c) => c.sessionId === id && c.mode === "resume");
    const events = (c: SessionCallLines | undefined) => (c?.lines ?? []).map(jsonObjectLine).filter((e): e is Record<string, unknown> => e !== undefined);
    const resumeEvents = events(resume);
    const startTotal = events(start).find((e) => e.type === "result")?.total_cost_usd;
    const result = resumeEvents.find((e) => e.type === "result");
    const ownIds = new Set(resumeEvents.filter((e) => e.type === "assistant").map((e) => (e.message as { id?: unknown } | undefined)?.id));
    const own = requests.filter((r) => (r.answer.kind === "answer" || r.answer.kind === "tool-calls") && ownIds.has(r.answer.messageId)).sort((a, b) => a.seq - b.seq);
    let ownCost: number | undefined = row ? 0 : undefined;
    for (const r of own) {
      const usage = r.answer.kind === "answer" || r.answer.kind === "tool-calls" ? scriptedUsage(scripts, r.answer.script, r.answer.turn) : undefined;
      if (!usage || !row || ownCost === undefined) ownCost = undefined;
      else ownCost += predictedCost(row, tokensOf(usage));
    }
    const total = result?.total_cost_usd;
    let cost: Resume["cost"] = "other";
    if (typeof total === "number" && typeof startTotal === "number" && ownCost !== undefined && own.length > 0) {
      if (Math.abs(total - (startTotal + ownCost)) <= COST_TOLERANCE_USD) cost = "cumulative";
      else if (Math.abs(total - ownCost) <= COST_TOLERANCE_USD) cost = "per-call";
    }
    return {
      completed: resume?.status === "completed",
      sessionIdKept: result?.session_id === id,
      historySent: own.length > 0 && (own[0]!.body?.assistantTurns ?? 0) > 0,
      cost,
    };
  });
  const all = (k: "completed" | "sessionIdKept" | "historySent") => each.length > 0 && each.every((e) => e[k]);
  const costs = [...new Set(each.map((e) => e.cost))];
  return { completed: all("completed"), sessionIdKept: all("sessionIdKept"), historySent: all("historySent"), cost: costs.length === 1 ? costs[0]! : "other" };
}

/** The usage a script's turn was written with (defaults filled as the server fills them). */
function scriptedUsage(scripts: readonly ScriptInput[], name: string, turn: number): ScriptedUsage | undefined {
  const t = scripts.find((s) => s.name === name)?.turns[turn];
  if (!t || !("usage" in t)) return undefined;
  return { cache_read_input_tokens: 0, cache_creation_input_tokens: 0, ...t.usage };
}

function tokensOf(u: ScriptedUsage) {
  const split = u.cache_creation;
  return {
    input: u.input_tokens,
    output: u.output_tokens,
    read: u.cache_read_input_tokens,
    write5m: split?.ephemeral_5m_input_tokens ?? 0,
    write1h: split?.ephemeral_1h_input_tokens ?? 0,
    writeUnsplit: split ? 0 : u.cache_creation_input_tokens,
  };
}

// ---------------------------------------------------------------- the probes on the machine

export interface BehaviourProbeEnv {
  runtime: ContainerRuntime;
  image: string;
  /** Folder with the test login's .credentials.json. */
  loginDir: string;
  /** Scratch folder. */
  work: string;
}

/** One run of the CLI with an attempt's arguments (plus `extra` flags) in the probe's working folder, HOME a host folder holding the outside targets. */
async function probeRun(env: BehaviourProbeEnv, label: string, script: ScriptInput, extra: readonly string[]): Promise<{ lines: string[]; requests: RecordedRequest[]; tail: string }> {
  const dir = await mkdtemp(join(env.work, `probe-${label}-`));
  const workspace = join(dir, "workspace");
  const home = join(dir, "home");
  await mkdir(workspace);
  await mkdir(home);
  await writeImportProbe(workspace, home);
  await chmod(workspace, 0o755);
  // HOME is normally a tmpfs; here a host folder the container user may write, holding the outside targets.
  await chmod(home, 0o777);
  if (process.getuid?.() === 0) await chown(home, 1000, 1000);
  const apiDir = join(dir, "api");
  await mkdir(apiDir, { mode: 0o755 });
  await chmod(apiDir, 0o755);
  const api = await startScriptedApi({ socketPath: join(apiDir, "api.sock"), script, recordBodies: true });
  try {
    await mkdir(join(dir, "login"));
    const staged = await stageLogin(resolveLogin({ configDir: env.loginDir }), join(dir, "login", "home"));
    const argv = cliArguments({ arm: "repository", model: MODEL, maxBudgetUsd: 1, prompt: `${label} probe`, deniedMcpTools: [] });
    const end = argv.indexOf("--");
    const spec = attemptContainerSpec({
      image: env.image,
      argv: [...argv.slice(0, end), ...extra, ...argv.slice(end)],
      exportDir: workspace,
      homeDir: staged.homeDir,
      // As a study attempt: no name to look up (contract R281).
      network: { mode: "none", names: false },
      labels: { "study-runner.calibrate": label },
      attemptIndex: 0,
      modelApiSocket: api.socketPath,
    });
    delete spec.tmpfs[CONTAINER.home];
    spec.mounts.push({ source: home, target: CONTAINER.home, readOnly: false });
    const lines: string[] = [];
    const raw = await runBounded(dockerSandbox(env.runtime).containers, spec, (line) => lines.push(line), { timeoutMs: 120_000 });
    return { lines, requests: [...api.requests], tail: `exit ${raw.exitCode}: ${(raw.stderrTail ?? "").slice(-300)}` };
  } finally {
    await api.close();
  }
}

const isMessages = (r: RecordedRequest) => r.path.split("?")[0] === "/v1/messages";
const firstBody = (requests: readonly RecordedRequest[]) => JSON.stringify(requests.find(isMessages)?.rawBody ?? "");

/**
 * The probes of a version (contract R263, R264): the imports with an attempt's arguments (served
 * a 429 and a 529 before its answer, so the same run measures the retries), and again with
 * `--restricted` (the flag check has found it in V's help: session calls pass it).
 */
export async function measureProbes(env: BehaviourProbeEnv): Promise<{ imports: Imports; retries: Retries; problems: string[] }> {
  const plain = await probeRun(env, "imports-retries", RETRY_SCRIPT, []);
  const retries = retriesOf(plain.lines, plain.requests);
  const restricted = await probeRun(env, "imports-restricted", { name: "restricted-probe", turns: [{ answer: "done", usage: { input_tokens: 10, output_tokens: 2 } }] }, ["--restricted"]);
  const problems = [plain, restricted]
    .filter((r) => !r.requests.some(isMessages))
    .map((r) => `imports: the ${r === plain ? "" : "--restricted "}probe sent no Messages request, so nothing about its imports was measured (${r.tail})`);
  return {
    imports: { plain: importRulesOf(firstBody(plain.requests)), restricted: importRulesOf(firstBody(restricted.requests)) },
    retries,
    problems: [...problems, ...retryProblems(plain.lines, retries)],
  };
}
