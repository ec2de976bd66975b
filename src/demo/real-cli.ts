/**
 * `study-runner demo --real-cli`: the demo with the REAL pinned Claude Code binary instead of the
 * fake image. The model is still scripted (src/scripted-api on a unix socket, reached through the
 * relay inside each network-less container), so it costs nothing and needs no network beyond the
 * one-time npm install of the pinned binary. Each planned attempt gets a conversation of its own:
 * the repository arm globs and reads the task's sources, the doc-bridge arm searches and fetches
 * the task's first document; the answer names the sources and says no model ran.
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { buildImage } from "../image/build.ts";
import { ensureClaudeBinary } from "../image/install.ts";
import { claudeCodeImageSpec } from "../image/specs.ts";
import type { Manifest } from "../manifest/schema.ts";
import type { PlannedAttempt } from "../plan/plan.ts";
import type { ContainerRuntime } from "../runtime/port.ts";
import type { ScriptInput } from "../scripted-api/script.ts";
import { startScriptedApi } from "../scripted-api/server.ts";

export interface RealCliDemo {
  /** The real image's tag. */
  image: string;
  /** Pass as --model-api-socket. */
  socketPath: string;
  close(): Promise<void>;
}

/**
 * One scripted conversation per task and arm, selected by the task's question (in the first user
 * message) and, for the doc-bridge arm, by the doc-bridge tool it offers: attempts that run at
 * once (--concurrency) each get their own task's conversation whatever order they reach the API.
 * The doc-bridge scripts come first, since the question alone matches both arms.
 */
export function demoScripts(manifest: Manifest, plan: readonly PlannedAttempt[]): ScriptInput[] {
  const seen = new Set<string>();
  const distinct = plan.filter((a) => {
    const key = `${a.taskIndex}/${a.arm}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
  distinct.sort((x, y) => (x.arm === y.arm ? 0 : x.arm === "mcp" ? -1 : 1));
  return distinct.map((a) => {
    const task = manifest.tasks[a.taskIndex]!;
    const doc = task.sources.find((s) => s.endsWith(".md")) ?? task.sources[0]!;
    const answer = `Scripted demo answer (no model ran): see ${task.sources.join(", ")}.`;
    const turns: ScriptInput["turns"] =
      a.arm === "mcp"
        ? [
            {
              toolCalls: [{ name: "mcp__doc-bridge__doc_search", input: { query: task.question } }],
              usage: { input_tokens: 2600, output_tokens: 24, cache_creation_input_tokens: 500, cache_creation: { ephemeral_5m_input_tokens: 500, ephemeral_1h_input_tokens: 0 } },
            },
            { toolCalls: [{ name: "mcp__doc-bridge__doc_get", input: { path: doc } }], usage: { input_tokens: 3100, output_tokens: 20, cache_read_input_tokens: 2600 } },
            { answer, usage: { input_tokens: 3600, output_tokens: 45, cache_read_input_tokens: 3100 } },
          ]
        : [
            {
              toolCalls: [{ name: "Glob", input: { pattern: "docs/*.md" } }],
              usage: { input_tokens: 2500, output_tokens: 18, cache_creation_input_tokens: 500, cache_creation: { ephemeral_5m_input_tokens: 500, ephemeral_1h_input_tokens: 0 } },
            },
            { toolCalls: task.sources.map((s) => ({ name: "Read", input: { file_path: `/workspace/${s}` } })), usage: { input_tokens: 3000, output_tokens: 30, cache_read_input_tokens: 2500 } },
            { answer, usage: { input_tokens: 4200, output_tokens: 50, cache_read_input_tokens: 3000 } },
          ];
    return { name: `task-${a.taskIndex}-${a.arm}`, marker: task.question, ...(a.arm === "mcp" ? { tool: "mcp__doc-bridge__doc_search" } : {}), turns };
  });
}

/** Installs the pinned binary when missing, builds the real image (cached), starts the scripted API. */
export async function startRealCliDemo(workdir: string, runtime: ContainerRuntime, manifest: Manifest, plan: readonly PlannedAttempt[], options: { turnDelayMs?: number } = {}): Promise<RealCliDemo> {
  const binary = await ensureClaudeBinary();
  const image = await buildImage(runtime, await claudeCodeImageSpec({ claudeBinary: binary.path }));
  // A folder of its own: it is mounted into every attempt container, so it holds only the socket.
  const dir = await mkdtemp(join(workdir, "model-api-"));
  await chmod(dir, 0o755);
  const api = await startScriptedApi({ socketPath: join(dir, "api.sock"), script: demoScripts(manifest, plan), turnDelayMs: options.turnDelayMs });
  return {
    image: image.tag,
    socketPath: api.socketPath!,
    close: async () => {
      await api.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
