/**
 * Measures what the pinned Claude Code binary sends to the Messages API in every scenario the
 * runner uses, and (with --write) rewrites the request shapes of the pin's bundled calibration profile (src/profile/), the shapes
 * the gateway admits (docs/gateway.md, "Allow list"):
 *
 *   node --import tsx tests/conformance/measure-requests.ts [--write]
 *
 * The real CLI runs in the real image against the scripted Messages API on a unix socket reached
 * through the relay (the direct route), so what is recorded is exactly what the gateway receives
 * from a container and nothing is filtered by the shapes being measured: a study pilot (an attempt
 * of each arm), the adjudicator on that pilot's ledger (`--json-schema`), and the session demo's
 * two sessions (a start and a `--resume` each). Zero cost, no network.
 */
import { createHash } from "node:crypto";
import { mkdtemp, readFile } from "node:fs/promises";
import { join } from "node:path";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { runAdjudication } from "../../src/adjudicate/run.ts";
import { planAdjudication } from "../../src/adjudicate/plan.ts";
import { DEFAULT_ADJUDICATOR_MODELS } from "../../src/cost/models.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { makeSessionDemo, sessionDemoScripts } from "../../src/demo/sessions.ts";
import { parseTarget, type MeasuredRequest, type RequestShapes } from "../../src/gateway/request-shape.ts";
import { inferShape } from "../support/infer-shape.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import type { RecordedRequest } from "../../src/stand-ins/scripted-api/server.ts";
import { startSessions } from "../../src/session/run.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import type { JsonValue } from "../../src/util/strict-json.ts";
import { writeBundledProfilePart } from "./profile-write.ts";
import { armGuessScripts, correctVerdictScripts, pilotScripts } from "./scripts.ts";
import { MODEL, prepareCorpus, realImage, runConformanceStudy, runtime, startApi, startStudyApi } from "./support.ts";

export const REGENERATE_COMMAND = "node --import tsx tests/conformance/measure-requests.ts --write";

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

const WHY_DIRECT = "measuring what the CLI sends, before any gateway shape check";

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

/** Keys in order, so the generated file is stable across runs. */
function sortedShape<T>(v: T): T {
  if (Array.isArray(v)) return v.map(sortedShape) as T;
  if (v === null || typeof v !== "object") return v;
  return Object.fromEntries(
    Object.keys(v)
      .sort()
      .map((k) => [k, sortedShape((v as Record<string, unknown>)[k])]),
  ) as T;
}

/** Runs every scenario once with the real CLI and returns what it sent. */
export async function measureRequests(): Promise<RecordedRequest[]> {
  const image = (await realImage()).id;
  const corpus = await prepareCorpus("measure-requests");
  const recorded: RecordedRequest[] = [];
  try {
    // 1. The study pilot: an attempt of each arm.
    // A model with adaptive thinking (what the CLI asks for) answers with a thinking block, which the CLI sends back in the history.
    const withThinking = pilotScripts().map((s) => ({ ...s, turns: s.turns.map((t, i) => (i === 0 && "toolCalls" in t ? { ...t, thinking: "Which files describe rounding?" } : t)) }));
    const studyApi = await startStudyApi(withThinking, { direct: WHY_DIRECT, recordBodies: true });
    let run: Awaited<ReturnType<typeof runConformanceStudy>>;
    try {
      run = await runConformanceStudy({ corpus, api: studyApi, image, plan: "pilot", timeoutMs: 120_000 });
      if (run.code !== 0) throw new Error(`the measured pilot exited ${run.code}: ${run.stderr.slice(-2000)}`);
    } finally {
      recorded.push(...studyApi.requests);
      await studyApi.close();
    }

    // 2. The adjudicator on that pilot: the grader answers through StructuredOutput at once.
    const loaded = await loadManifest(DEMO_MANIFEST);
    const expected = loaded.manifest.tasks[0]!.expected.length;
    const graderScripts = correctVerdictScripts(run.ledger, expected);
    const graderApi = await startApi([...armGuessScripts(planAdjudication(run.ledger, loaded.manifest, 5).items), ...graderScripts], { recordBodies: true });
    try {
      const bytes = await readFile(run.summary.ledger);
      let stderr = "";
      const code = await runAdjudication(
        {
          ledgerPath: run.summary.ledger,
          ledger: run.ledger,
          ledgerSha256: createHash("sha256").update(bytes).digest("hex"),
          loaded,
          roots: corpus.roots,
          model: DEFAULT_ADJUDICATOR_MODELS[0]!,
          forceSameModel: false,
          capUsd: 5,
          itemBudgetUsd: 2,
          seed: 5,
          output: join(await mkdtemp(join(corpus.work, "adjudication-")), "adjudication.json"),
          image,
          expectedCliVersion: CLAUDE_CODE_VERSION,
          isolation: "offline",
          claudeConfigDir: corpus.loginDir,
          credentials: "login-copy",
          modelApi: { socketPath: graderApi.socketPath },
          timeoutMs: 120_000,
          quiet: true,
        },
        {
          runtime,
          stdout: () => {},
          stderr: new Writable({
            write(chunk, _enc, cb) {
              stderr += String(chunk);
              cb();
            },
          }),
        },
      );
      if (code !== 0) throw new Error(`the measured adjudication exited ${code}: ${stderr.slice(-2000)}`);
    } finally {
      recorded.push(...graderApi.requests);
      await graderApi.close();
    }

    // 3. Sessions: a start and a resume of each of the demo's two sessions.
    const sessionsApi = await startApi(sessionDemoScripts(), { recordBodies: true });
    try {
      const demo = await makeSessionDemo(join(corpus.work, "sessions"));
      const out = await mkdtemp(join(corpus.work, "sessions-ledger-"));
      const started = await startSessions(
        {
          manifestPath: demo.manifestPath,
          roots: new Map(Object.entries(demo.roots)),
          output: join(out, "sessions.json"),
          model: MODEL,
          image,
          expectedCliVersion: CLAUDE_CODE_VERSION,
          capUsd: 1,
          callBudgetUsd: 0.2,
          sessionBudgetUsd: 0.5,
          isolation: "offline",
          claudeConfigDir: corpus.loginDir,
          credentials: "login-copy",
          modelApi: { socketPath: sessionsApi.socketPath },
          timeoutMs: 120_000,
        },
        { runtime },
      );
      const modes = started.ledger.sessions.flatMap((s) => s.calls.map((c) => `${c.mode}:${c.status}`));
      if (started.exitCode !== 0 || !modes.includes("resume:completed")) throw new Error(`the measured sessions did not start and resume: exit ${started.exitCode}, calls ${modes.join(" ")}`);
    } finally {
      recorded.push(...sessionsApi.requests);
      await sessionsApi.close();
    }
  } finally {
    await corpus.cleanup();
  }
  return recorded;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const started = Date.now();
  const requests = await measureRequests();
  const shapes = shapesOf(requests);
  const summary = { requests: shapes.requests, headers: shapes.headers, anthropicBeta: shapes.anthropicBeta, fromRequests: shapes.requestCount };
  process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  if (process.argv.includes("--write")) {
    process.stdout.write(`wrote ${await writeBundledProfilePart({ requestShapes: shapes })} (${Math.round((Date.now() - started) / 1000)} s)\n`);
  }
}
