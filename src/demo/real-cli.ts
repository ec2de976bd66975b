/**
 * `study-runner demo --real-cli`: the demo with the REAL pinned Claude Code binary instead of the
 * fake image, on the default path: `--credentials gateway`. The model is still scripted
 * (src/stand-ins/scripted-api over TLS on a loopback port, with a throw-away CA made here), and it is the
 * upstream of the runner's model gateway, exactly where https://api.anthropic.com would be: each
 * network-less container holds a placeholder login and reaches it only through its gateway socket,
 * every request is checked and metered, and the ledger carries the per-request records. The
 * gateway's credential is a test token in a file of the demo's (never a login of the host, never
 * CLAUDE_CODE_OAUTH_TOKEN). It costs nothing and needs no network beyond the one-time npm install
 * of the pinned binary. Each planned attempt gets a conversation of its own: the repository arm
 * globs and reads the task's sources, the doc-bridge arm searches and fetches the task's first
 * document; the answer names the sources and says no model ran.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { buildImage } from "../image/build.ts";
import { ensureClaudeBinary } from "../image/install.ts";
import { claudeCodeImageSpec } from "../image/specs.ts";
import type { Manifest } from "../manifest/schema.ts";
import type { PlannedAttempt } from "../plan/plan.ts";
import type { ContainerRuntime } from "../sandbox/port.ts";
import type { ScriptInput } from "../stand-ins/scripted-api/script.ts";
import { startScriptedApi, type StartScriptedApiOptions } from "../stand-ins/scripted-api/server.ts";
import { makeTestCa } from "./test-ca.ts";

/** The token the demo's gateway swaps in: it authenticates nothing, and only the scripted API on loopback sees it. */
export const DEMO_GATEWAY_TOKEN = "demo-gateway-token-not-a-real-credential";

/** The scripted API as the gateway's upstream, and what the runner needs to use it (the hidden test flags). */
export interface DemoGatewayApi {
  /** `--test-gateway-upstream`: https://127.0.0.1:<port>. */
  upstream: string;
  /** `--test-gateway-ca`: the PEM file of the CA the gateway trusts for it. */
  caFile: string;
  /** The CA's PEM text (for a config that takes it directly). */
  ca: string;
  /** `--oauth-token-file`: a file holding DEMO_GATEWAY_TOKEN. */
  tokenFile: string;
  close(): Promise<void>;
}

/** Starts the scripted API over TLS on loopback for the gateway, with its CA and token files in a fresh folder under `workdir`. */
export async function startDemoGatewayApi(workdir: string, o: Pick<StartScriptedApiOptions, "script" | "turnDelayMs">): Promise<DemoGatewayApi> {
  const dir = await mkdtemp(join(workdir, "model-api-"));
  const ca = makeTestCa();
  const caFile = join(dir, "ca.pem");
  const tokenFile = join(dir, "token");
  await writeFile(caFile, ca.ca, { mode: 0o600, flag: "wx" });
  await writeFile(tokenFile, DEMO_GATEWAY_TOKEN, { mode: 0o600, flag: "wx" });
  const api = await startScriptedApi({ port: 0, tls: { key: ca.key, cert: ca.cert }, script: o.script, turnDelayMs: o.turnDelayMs });
  return {
    upstream: api.url!.replace(/^http:/, "https:"),
    caFile,
    ca: ca.ca,
    tokenFile,
    close: async () => {
      await api.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export interface RealCliDemo extends DemoGatewayApi {
  /** The real image's tag. */
  image: string;
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

/** Installs the binary of `version` (default: the pin) when missing, builds its real image (cached), starts the scripted API behind the gateway. */
export async function startRealCliDemo(
  workdir: string,
  runtime: ContainerRuntime,
  manifest: Manifest,
  plan: readonly PlannedAttempt[],
  options: { turnDelayMs?: number; version?: string } = {},
): Promise<RealCliDemo> {
  const binary = await ensureClaudeBinary(options.version !== undefined ? { version: options.version } : {});
  const image = await buildImage(runtime, await claudeCodeImageSpec({ claudeBinary: binary.path, ...(options.version !== undefined ? { version: options.version } : {}) }));
  const api = await startDemoGatewayApi(workdir, { script: demoScripts(manifest, plan), turnDelayMs: options.turnDelayMs });
  return { ...api, image: image.tag };
}
