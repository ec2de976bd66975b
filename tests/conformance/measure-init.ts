/**
 * Measures the init event the REAL Claude Code 2.1.296 writes for every kind of run the runner
 * starts, with the runner's own arguments, container and gateway, and (with --write) rewrites the
 * init events of the pin's bundled calibration profile (src/profile/), the expectation the transcript check compares every init
 * field with (contract R125):
 *
 *   node --import tsx tests/conformance/measure-init.ts [--write]
 *
 * The kinds: an attempt of each arm (the pilot, through the runner's study orchestrator), the
 * adjudicator (an adjudication of that pilot) and a session's start and resume (the demo's two
 * sessions). Each run goes through the runner's model gateway to the scripted Messages API; nothing
 * reaches a network or spends money. The fields that vary per run by nature and those that equal a
 * value the runner passed (src/claude/init-expectation.ts) are left out of the data; two runs of
 * the same kind must agree on every other field, or nothing is written.
 */
import { createHash } from "node:crypto";
import { mkdtemp, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";
import { Writable } from "node:stream";
import { runAdjudication } from "../../src/adjudicate/run.ts";
import { planAdjudication } from "../../src/adjudicate/plan.ts";
import { readRecord } from "../../src/adjudicate/store.ts";
import { DEFAULT_ADJUDICATOR_MODELS } from "../../src/cost/models.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { INIT_KINDS, INIT_PARAMETER_FIELDS, isSessionKind, varyingFields, type GeneratedInitEvents, type InitKind, type MeasuredInitKind } from "../../src/claude/init-expectation.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import { readTranscriptFile, transcriptLines } from "../../src/ledger/transcripts.ts";
import { startSessions } from "../../src/session/run.ts";
import { makeSessionDemo, sessionDemoScripts } from "../../src/demo/sessions.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { writeBundledProfilePart } from "./profile-write.ts";
import { armGuessScripts, correctVerdictScripts, pilotScripts } from "./scripts.ts";
import { MODEL, prepareCorpus, realImage, runConformanceStudy, runtime, startStudyApi } from "./support.ts";

export const REGENERATE_INIT_COMMAND = "node --import tsx tests/conformance/measure-init.ts --write";

/** One measured run: its kind, the arguments' values the parameters take, and its whole init event. */
export interface MeasuredInit {
  kind: InitKind;
  model: string;
  sessionId?: string;
  init: Record<string, unknown>;
  /** How the run ended, as the runner classified it. */
  status: string;
}

const sink = () =>
  new Writable({
    write(_chunk, _enc, cb) {
      cb();
    },
  });

const initOf = (lines: readonly string[]) => {
  for (const line of lines) {
    if (!line.includes('"init"')) continue;
    const event = JSON.parse(line) as Record<string, unknown>;
    if (event.type === "system" && event.subtype === "init") return event;
  }
  throw new Error("no init event in the transcript");
};

/** Runs every kind on the real binary; two or more runs of each kind. */
export async function measureInits(): Promise<MeasuredInit[]> {
  const image = (await realImage()).id;
  const corpus = await prepareCorpus("init");
  const out: MeasuredInit[] = [];
  try {
    // Attempts: the pilot (both arms), twice, so that each arm has two runs to agree.
    for (let round = 0; round < 2; round++) {
      const api = await startStudyApi(pilotScripts());
      try {
        const run = await runConformanceStudy({ corpus, api, image, plan: "pilot" });
        for (const o of run.ledger.observations) {
          out.push({ kind: o.arm === "mcp" ? "attempt-mcp" : "attempt-repository", model: MODEL, init: initOf(run.lines.get(o.index) ?? []), status: o.status ?? "open" });
        }
        if (round === 0) out.push(...(await adjudicate(corpus, image, run.summary.ledger, run.ledger)));
      } finally {
        await api.close();
      }
    }
    // Sessions: the demo's two, each a start and a resume.
    const demo = await makeSessionDemo(join(corpus.work, "sessions"));
    const api = await startStudyApi(sessionDemoScripts());
    if (api.route !== "gateway") throw new Error("sessions are measured through the gateway");
    try {
      const lines = new Map<string, { kind: InitKind; sessionId: string; lines: string[] }>();
      const started = await startSessions(
        {
          manifestPath: demo.manifestPath,
          roots: new Map(Object.entries(demo.roots)),
          output: join(await mkdtemp(join(corpus.work, "sessions-ledger-")), "sessions.json"),
          model: MODEL,
          image,
          expectedCliVersion: CLAUDE_CODE_VERSION,
          capUsd: 1,
          callBudgetUsd: 0.2,
          sessionBudgetUsd: 0.5,
          isolation: "offline",
          claudeConfigDir: corpus.loginDir,
          credentials: "gateway",
          gatewayUpstream: api.gateway,
          timeoutMs: 120_000,
        },
        {
          runtime,
          onTranscriptLine: (s, call, line) => {
            const key = `${s.id}/${call.index}`;
            const entry = lines.get(key) ?? { kind: call.mode === "resume" ? "session-resume" : "session-start", sessionId: s.id, lines: [] };
            entry.lines.push(line);
            lines.set(key, entry);
          },
        },
      );
      const statuses = new Map(started.ledger.sessions.flatMap((s) => s.calls.map((c) => [`${s.id}/${c.index}`, c.status ?? "open"] as const)));
      for (const [key, e] of lines) out.push({ kind: e.kind, model: MODEL, sessionId: e.sessionId, init: initOf(e.lines), status: statuses.get(key as `${string}/${number}`) ?? "unknown" });
    } finally {
      await api.close();
    }
  } finally {
    await corpus.cleanup();
  }
  return out;
}

/** The adjudicator over a pilot ledger: one scripted StructuredOutput call per item. */
async function adjudicate(
  corpus: Awaited<ReturnType<typeof prepareCorpus>>,
  image: string,
  ledgerPath: string,
  ledger: Awaited<ReturnType<typeof runConformanceStudy>>["ledger"],
): Promise<MeasuredInit[]> {
  const loaded = await loadManifest(DEMO_MANIFEST);
  const expected = loaded.manifest.tasks[0]!.expected.length;
  const scripts = correctVerdictScripts(ledger, expected);
  const api = await startStudyApi([...armGuessScripts(planAdjudication(ledger, loaded.manifest, 5).items), ...scripts]);
  if (api.route !== "gateway") throw new Error("the adjudicator is measured through the gateway");
  try {
    const output = join(await mkdtemp(join(corpus.work, "adjudication-")), "adjudication.json");
    const model = DEFAULT_ADJUDICATOR_MODELS[0]!;
    await runAdjudication(
      {
        ledgerPath,
        ledger,
        ledgerSha256: createHash("sha256")
          .update(await readFile(ledgerPath))
          .digest("hex"),
        loaded,
        roots: corpus.roots,
        model,
        forceSameModel: false,
        capUsd: 5,
        itemBudgetUsd: 2,
        seed: 5,
        output,
        image,
        expectedCliVersion: CLAUDE_CODE_VERSION,
        isolation: "offline",
        claudeConfigDir: corpus.loginDir,
        credentials: "gateway",
        gatewayUpstream: api.gateway,
        timeoutMs: 120_000,
        quiet: true,
      },
      { runtime, stdout: () => {}, stderr: sink() },
    );
    const record = await readRecord(output);
    const found: MeasuredInit[] = [];
    for (const item of record.items) {
      const file = await readTranscriptFile(output, item.observationIndex);
      if (file.kind !== "file") throw new Error(`adjudication item ${item.position} kept no transcript`);
      found.push({ kind: "adjudicator", model, init: initOf(transcriptLines(file.bytes)), status: item.run?.status ?? "none" });
    }
    return found;
  } finally {
    await api.close();
  }
}

/** The measured part of one run's init event: without the varying fields and those a parameter sets. */
function measuredPart(kind: InitKind, init: Record<string, unknown>): MeasuredInitKind {
  const varying = varyingFields(kind);
  const skip = new Set([...Object.keys(varying), ...Object.keys(INIT_PARAMETER_FIELDS)]);
  return {
    fields: Object.fromEntries(Object.entries(init).filter(([k]) => !skip.has(k))),
    varying: Object.keys(init)
      .filter((k) => k in varying)
      .sort(),
  };
}

/**
 * The generated data from the runs: per kind, the measured part of the init (the event without the
 * fields that vary per run and those a parameter sets). Differences between two runs of one kind,
 * or a kind with fewer than two runs, are returned as problems instead.
 */
export function generatedFrom(measured: readonly MeasuredInit[]): { data: GeneratedInitEvents; problems: string[] } {
  const problems: string[] = [];
  const kinds = {} as GeneratedInitEvents["kinds"];
  for (const kind of INIT_KINDS) {
    const runs = measured.filter((m) => m.kind === kind);
    if (runs.length < 2) problems.push(`${kind}: ${runs.length} run(s) measured; two are needed to tell a constant field from a varying one`);
    const parts = runs.map((r) => measuredPart(kind, r.init));
    for (const [i, p] of parts.entries()) {
      const first = parts[0]!;
      const keys = [...new Set([...Object.keys(p.fields), ...Object.keys(first.fields)])].filter((k) => !isDeepStrictEqual(p.fields[k], first.fields[k]));
      if (!isDeepStrictEqual(p.varying, first.varying)) keys.push(`the varying fields present (${p.varying.join(", ")} against ${first.varying.join(", ")})`);
      if (keys.length > 0) problems.push(`${kind}: run ${i} differs from run 0 in ${keys.join(", ")}`);
    }
    for (const r of runs) {
      for (const [k, v] of Object.entries(varyingFields(kind))) {
        if (k in r.init && !(typeof r.init[k] === "string" && v.shape.test(r.init[k] as string))) problems.push(`${kind}: ${k} ${JSON.stringify(r.init[k])} does not have the shape ${v.shape}`);
      }
      if (isSessionKind(kind) && r.init.session_id !== r.sessionId) problems.push(`${kind}: session_id ${JSON.stringify(r.init.session_id)} is not the id passed, ${r.sessionId}`);
      if (r.init.model !== r.model) problems.push(`${kind}: model ${JSON.stringify(r.init.model)} is not the --model passed, ${r.model}`);
    }
    const bad = runs.filter((r) => r.status !== "completed");
    if (bad.length > 0) problems.push(`${kind}: ${bad.length} run(s) did not complete (${bad.map((b) => b.status).join(", ")})`);
    if (parts[0]) kinds[kind] = parts[0];
  }
  return { data: { kinds }, problems };
}

async function main(): Promise<void> {
  const started = Date.now();
  const measured = await measureInits();
  const { data, problems } = generatedFrom(measured);
  process.stdout.write(`${JSON.stringify({ runs: measured.map((m) => `${m.kind} ${m.status}`), problems, seconds: (Date.now() - started) / 1000 }, null, 1)}\n`);
  if (process.argv.includes("--raw")) process.stdout.write(`${JSON.stringify(measured, null, 1)}\n`);
  if (problems.length > 0) {
    process.exitCode = 1;
    return;
  }
  if (process.argv.includes("--write")) process.stderr.write(`wrote ${await writeBundledProfilePart({ initEvents: data })}\n`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  await main();
}
