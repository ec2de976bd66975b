/**
 * The real Claude Code CLI (the pinned native binary in the real image, built by
 * buildImage and reused by its context digest) answering through the scripted Messages API,
 * through the real orchestrator: `runStudy` with `modelApi` (the API on a host unix socket,
 * reached by with-relay.cjs in the attempt container, network none). Three repository-arm
 * attempts of the demo study in one run: the first is a warm-up, two are measured, timed as in
 * the attempt benchmark (bench/study.ts). Each attempt makes two real tool calls (Read, Grep)
 * on its export before the scripted answer.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildImage } from "../src/image/build.ts";
import { claudeCodeImageSpec } from "../src/image/specs.ts";
import { ensureClaudeBinary } from "../src/image/install.ts";
import { DockerRuntime } from "../src/sandbox/docker.ts";
import { startScriptedApi } from "../src/stand-ins/scripted-api/server.ts";
import type { ScriptInput } from "../src/stand-ins/scripted-api/script.ts";
import { loadManifest } from "../src/manifest/load.ts";
import { planStudy } from "../src/plan/plan.ts";
import { referenceEngineCommand } from "../src/mcp/preflight.ts";
import { DEMO_MANIFEST } from "../src/util/paths.ts";
import { makeDemoCorpus } from "../src/demo/corpus.ts";
import { writeTestLogin } from "../src/demo/setup.ts";
import { CLAUDE_CODE_VERSION } from "../src/claude/version.ts";
import { note, round, runMain, stats } from "./lib.ts";
import { runTimedStudy } from "./study.ts";

const MODEL = "claude-haiku-5-5";
const ATTEMPTS = 3;

/** One script per attempt: the scripted API hands the next unclaimed one to each new conversation. */
const script = (n: number): ScriptInput => ({
  name: `read-grep-answer-${n}`,
  turns: [
    {
      text: "I will read the README first.",
      toolCalls: [{ name: "Read", input: { file_path: "/workspace/README.md" } }],
      usage: { input_tokens: 2000, output_tokens: 40, cache_creation_input_tokens: 500, cache_creation: { ephemeral_5m_input_tokens: 500, ephemeral_1h_input_tokens: 0 } },
    },
    {
      text: "Now the rounding function.",
      toolCalls: [{ name: "Grep", input: { pattern: "export", path: "/workspace" } }],
      usage: { input_tokens: 2600, output_tokens: 35, cache_read_input_tokens: 500 },
    },
    { answer: "The answer, citing README.md.", usage: { input_tokens: 3100, output_tokens: 25, cache_read_input_tokens: 500 } },
  ],
});

async function main(): Promise<Record<string, unknown>> {
  const work = await mkdtemp(join(tmpdir(), "study-runner-bench-real-"));
  try {
    const runtime = new DockerRuntime();
    const binary = process.env.CLAUDE_CODE_BINARY ?? (await ensureClaudeBinary()).path;
    note(`real-cli: building (or reusing, by context digest) the real image from ${binary}`);
    const imageStarted = Date.now();
    const built = await buildImage(runtime, await claudeCodeImageSpec({ claudeBinary: binary }));
    const imageMs = Date.now() - imageStarted;

    const corpus = await makeDemoCorpus(join(work, "corpus"));
    const loaded = await loadManifest(DEMO_MANIFEST);
    const full = planStudy(loaded.manifest, "full");
    const plan = full
      .filter((a) => a.arm === "repository")
      .slice(0, ATTEMPTS)
      .map((a, index) => ({ ...a, index }));
    const loginDir = join(work, "login");
    await writeTestLogin(loginDir);
    // The socket's folder is mounted into every attempt: it holds the socket and nothing else.
    const socketDir = join(work, "api");
    await mkdir(socketDir, { mode: 0o755 });
    const api = await startScriptedApi({ socketPath: join(socketDir, "api.sock"), script: plan.map((_, n) => script(n)) });
    let timed;
    try {
      timed = await runTimedStudy(
        {
          loaded,
          mode: "full",
          plan,
          fullPlanSize: full.length,
          roots: new Map(Object.entries(corpus).map(([name, { dir }]) => [name, dir])),
          model: MODEL,
          capUsd: 1,
          attemptBudgetUsd: 0.1,
          output: join(work, "ledger.json"),
          image: built.id,
          expectedCliVersion: CLAUDE_CODE_VERSION,
          isolation: "offline",
          docBridgeCommand: referenceEngineCommand(),
          claudeConfigDir: loginDir,
          modelApi: { socketPath: join(socketDir, "api.sock") },
          timeoutMs: 120_000,
        },
        runtime,
      );
    } finally {
      await api.close();
    }
    const measured = timed.slice(1);
    const messages = api.requests.filter((r) => r.path.startsWith("/v1/messages"));
    return {
      image: { id: built.id.slice(0, 19), built: built.built, prepareMs: imageMs },
      attempts: measured.length,
      attemptMs: stats(measured.map((t) => t.ms)),
      containerMs: stats(measured.map((t) => t.observation.wallTimeMs!)),
      toolCallsPerAttempt: measured.map((t) => t.observation.toolCalls),
      apiRequests: messages.length,
      path: "runStudy with modelApi (scripted API on a unix socket, with-relay.cjs, network none)",
      warmupMs: round(timed[0]!.ms, 1),
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

runMain("real-cli", main);
