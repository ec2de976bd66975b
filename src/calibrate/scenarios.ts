/**
 * The scenarios a calibration runs a Claude Code version through (contract R223), each with the
 * runner's own run kind, arguments, containers and ledger, against the scripted Messages API: the
 * demo pilot (an attempt of each arm), the adjudicator over that pilot (`--json-schema`), and the
 * session demo's two sessions (a start and a `--resume` each, in fresh containers). A scenario on
 * the direct route records every request the CLI sent before any gateway check; on the gateway
 * route every request passes the gateway's checks of the version's profile and is metered.
 */
import { createHash } from "node:crypto";
import { mkdtemp, readFile } from "node:fs/promises";
import { join } from "node:path";
import { Writable } from "node:stream";
import { planAdjudication } from "../adjudicate/plan.ts";
import { runAdjudication } from "../adjudicate/run.ts";
import { readRecord } from "../adjudicate/store.ts";
import { DEFAULT_ADJUDICATOR_MODELS } from "../cost/models.ts";
import { makeSessionDemo, sessionDemoScripts } from "../demo/sessions.ts";
import type { InitKind } from "../claude/init-expectation.ts";
import { readTranscriptFile, transcriptLines } from "../ledger/transcripts.ts";
import { loadManifest } from "../manifest/load.ts";
import type { ContainerRuntime } from "../sandbox/port.ts";
import type { ScriptInput } from "../stand-ins/scripted-api/script.ts";
import type { RecordedRequest } from "../stand-ins/scripted-api/server.ts";
import { startSessions } from "../session/run.ts";
import { DEMO_MANIFEST } from "../util/paths.ts";
import { apiRoute, MODEL, runPilotStudy, startStudyApi, type Corpus, type StudyRun } from "./env.ts";
import { initOf, type MeasuredInit } from "./init.ts";
import { armGuessScripts, correctVerdictScripts, pilotScripts } from "./scripts.ts";
import { resumeOf, structuredOutputOf, type SessionCallLines } from "./behaviour.ts";
import { findProfile } from "../profile/load.ts";
import type { Resume, StructuredOutput } from "../profile/schema.ts";

/** `direct`: the scripted API on a unix socket, every request recorded whole; `gateway`: through the runner's model gateway. */
export type Route = "direct" | "gateway";

export interface ScenarioContext {
  runtime: ContainerRuntime;
  /** The image's id (never the tag: another build may move it). */
  image: string;
  cliVersion: string;
  corpus: Corpus;
  timeoutMs?: number;
}

export interface ScenarioResult {
  name: "pilot" | "adjudicator" | "sessions";
  /** Every CLI run's init (a run that wrote none is missing here and counted in `statuses`). */
  inits: MeasuredInit[];
  /** Each run's status, as the runner classified it. */
  statuses: string[];
  /** What the CLI sent (the direct route; empty through the gateway). */
  requests: RecordedRequest[];
  /** Every run completed. */
  completed: boolean;
  /** The runner's stderr tail, to say why a scenario did not complete. */
  detail: string;
  /** The adjudicator: what `--json-schema` gave its runs' results (contract R263). */
  structuredOutput?: StructuredOutput;
  /** The sessions: what their resumes showed (contract R263). */
  resume?: Resume;
}

const WHY_DIRECT = "measuring what the CLI sends, before any gateway shape check";

function sink(into: { text: string }) {
  return new Writable({
    write(chunk, _enc, cb) {
      into.text = (into.text + String(chunk)).slice(-4000);
      cb();
    },
  });
}

async function scriptedApi(script: readonly ScriptInput[], route: Route) {
  return startStudyApi(script, route === "direct" ? { direct: WHY_DIRECT, recordBodies: true } : {});
}

/** The pilot: an attempt of each arm; the first answer of each with a thinking block (what the CLI then sends back). */
export async function pilotScenario(ctx: ScenarioContext, route: Route): Promise<ScenarioResult & { run: StudyRun }> {
  const withThinking = pilotScripts().map((s) => ({ ...s, turns: s.turns.map((t, i) => (i === 0 && "toolCalls" in t ? { ...t, thinking: "Which files describe rounding?" } : t)) }));
  const api = await scriptedApi(withThinking, route);
  try {
    const run = await runPilotStudy({ corpus: ctx.corpus, runtime: ctx.runtime, cliVersion: ctx.cliVersion, api, image: ctx.image, plan: "pilot", timeoutMs: ctx.timeoutMs ?? 120_000 });
    const inits: MeasuredInit[] = [];
    for (const o of run.ledger.observations) {
      const init = initOf(run.lines.get(o.index) ?? []);
      if (init) inits.push({ kind: o.arm === "mcp" ? "attempt-mcp" : "attempt-repository", model: MODEL, init, status: o.status ?? "open" });
    }
    const statuses = run.ledger.observations.map((o) => o.status ?? "open");
    const completed = run.code === 0 && statuses.length === 2 && statuses.every((s) => s === "completed");
    return { name: "pilot", run, inits, statuses, requests: [...api.requests], completed, detail: run.stderr.slice(-1500) };
  } finally {
    await api.close();
  }
}

/** The adjudicator over a completed pilot: one scripted StructuredOutput verdict and one arm guess per item. */
export async function adjudicatorScenario(ctx: ScenarioContext, route: Route, pilot: StudyRun): Promise<ScenarioResult> {
  const loaded = await loadManifest(DEMO_MANIFEST);
  const expected = loaded.manifest.tasks[0]!.expected.length;
  const api = await scriptedApi([...armGuessScripts(planAdjudication(pilot.ledger, loaded.manifest, 5).items), ...correctVerdictScripts(pilot.ledger, expected)], route);
  const stderr = { text: "" };
  try {
    const output = join(await mkdtemp(join(ctx.corpus.work, "adjudication-")), "adjudication.json");
    const model = DEFAULT_ADJUDICATOR_MODELS[0]!;
    const code = await runAdjudication(
      {
        ledgerPath: pilot.ledgerPath,
        ledger: pilot.ledger,
        ledgerSha256: createHash("sha256")
          .update(await readFile(pilot.ledgerPath))
          .digest("hex"),
        loaded,
        roots: ctx.corpus.roots,
        model,
        forceSameModel: false,
        capUsd: 5,
        itemBudgetUsd: 2,
        seed: 5,
        output,
        image: ctx.image,
        expectedCliVersion: ctx.cliVersion,
        isolation: "offline",
        claudeConfigDir: ctx.corpus.loginDir,
        ...apiRoute(api),
        timeoutMs: ctx.timeoutMs ?? 120_000,
        quiet: true,
      },
      { runtime: ctx.runtime, stdout: () => {}, stderr: sink(stderr) },
    );
    const record = await readRecord(output).catch(() => null);
    const inits: MeasuredInit[] = [];
    const statuses: string[] = [];
    const transcripts: string[][] = [];
    for (const item of record?.items ?? []) {
      statuses.push(item.run?.status ?? "none");
      const file = await readTranscriptFile(output, item.observationIndex).catch(() => null);
      const lines = file?.kind === "file" ? transcriptLines(file.bytes) : [];
      transcripts.push(lines);
      const init = initOf(lines);
      if (init) inits.push({ kind: "adjudicator", model, init, status: item.run?.status ?? "none" });
    }
    const completed = code === 0 && statuses.length === pilot.ledger.observations.length && statuses.every((s) => s === "completed");
    return { name: "adjudicator", inits, statuses, requests: [...api.requests], completed, detail: stderr.text.slice(-1500), structuredOutput: structuredOutputOf(transcripts) };
  } finally {
    await api.close();
  }
}

/** The session demo: two sessions, each a start, a scripted answer and a resume in a fresh container. */
export async function sessionsScenario(ctx: ScenarioContext, route: Route): Promise<ScenarioResult> {
  const demo = await makeSessionDemo(await mkdtemp(join(ctx.corpus.work, "sessions-")));
  const scripts = sessionDemoScripts();
  const api = await scriptedApi(scripts, route);
  try {
    const lines = new Map<string, { kind: InitKind; sessionId: string; lines: string[] }>();
    const started = await startSessions(
      {
        manifestPath: demo.manifestPath,
        roots: new Map(Object.entries(demo.roots)),
        output: join(await mkdtemp(join(ctx.corpus.work, "sessions-ledger-")), "sessions.json"),
        model: MODEL,
        image: ctx.image,
        expectedCliVersion: ctx.cliVersion,
        capUsd: 1,
        callBudgetUsd: 0.2,
        sessionBudgetUsd: 0.5,
        isolation: "offline",
        claudeConfigDir: ctx.corpus.loginDir,
        ...apiRoute(api),
        timeoutMs: ctx.timeoutMs ?? 120_000,
      },
      {
        runtime: ctx.runtime,
        onTranscriptLine: (s, call, line) => {
          const key = `${s.id}/${call.index}`;
          const entry = lines.get(key) ?? { kind: call.mode === "resume" ? "session-resume" : "session-start", sessionId: s.id, lines: [] };
          entry.lines.push(line);
          lines.set(key, entry);
        },
      },
    );
    const calls = started.ledger.sessions.flatMap((s) => s.calls.map((c) => ({ key: `${s.id}/${c.index}`, mode: c.mode, status: c.status ?? "open" })));
    const inits: MeasuredInit[] = [];
    for (const [key, e] of lines) {
      const init = initOf(e.lines);
      if (init) inits.push({ kind: e.kind, model: MODEL, sessionId: e.sessionId, init, status: calls.find((c) => c.key === key)?.status ?? "unknown" });
    }
    const statuses = calls.map((c) => `${c.mode}:${c.status}`);
    const completed = started.exitCode === 0 && calls.some((c) => c.mode === "resume") && calls.every((c) => c.status === "completed");
    const callLines: SessionCallLines[] = calls.map((c) => {
      const e = lines.get(c.key);
      return { sessionId: e?.sessionId ?? c.key.split("/")[0]!, mode: c.mode, status: c.status, lines: e?.lines ?? [] };
    });
    // The resume's own cost is priced with the version's measured table (the draft's while calibrating).
    const row = findProfile(ctx.cliVersion)?.profile.prices.models[MODEL];
    const resume = resumeOf(callLines, api.requests, scripts, row);
    return { name: "sessions", inits, statuses, requests: [...api.requests], completed, detail: `exit ${started.exitCode}`, resume };
  } finally {
    await api.close();
  }
}
