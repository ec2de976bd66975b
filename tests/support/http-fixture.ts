/**
 * Shared setup of the http-*.test.ts files: the demo corpus at its pins with doc-bridge indexes
 * (real git, the reference server), the scripted Messages API on loopback, and in-process runs
 * of `runHttpStudy` with a private ledger in a fresh folder.
 */
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { buildIndex } from "../../src/mcp/reference-server.ts";
import { loadManifest, type LoadedManifest } from "../../src/manifest/load.ts";
import { planStudy, type Mode } from "../../src/plan/plan.ts";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { readLedger } from "../../src/ledger/store.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import type { ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import { runHttpStudy, type HttpStudyConfig, type HttpStudyDeps } from "../../src/study/http.ts";

export const MODEL = "claude-haiku-5-5";
/** A key-shaped test value; it must never show up in anything the runner writes or prints. */
export const TEST_KEY = "test-key-TESTKEY-not-a-real-credential-7f3a9c";
/** Upper prices in USD per million tokens. */
export const PRICES = { inputUsdPerMtok: 1, outputUsdPerMtok: 5 };
export const DOC_SEARCH = "mcp__doc-bridge__doc_search";

export interface Corpus {
  work: string;
  roots: Map<string, string>;
  loaded: LoadedManifest;
  cleanup(): Promise<void>;
}

export async function prepareCorpus(name: string): Promise<Corpus> {
  const work = await mkdtemp(join(tmpdir(), `sr-http-${name}-`));
  const corpus = await makeDemoCorpus(join(work, "corpus"));
  for (const { dir } of Object.values(corpus)) await buildIndex(dir);
  return {
    work,
    roots: new Map(Object.entries(corpus).map(([n, { dir }]) => [n, dir])),
    loaded: await loadManifest(DEMO_MANIFEST),
    cleanup: () => rm(work, { recursive: true, force: true }),
  };
}

/** The demo pilot's question (the first task): the same first message in both arms. */
export const usage = (input = 1200, output = 80) => ({ input_tokens: input, output_tokens: output });

/** A repository-arm script and a doc-bridge-arm script (selected by the doc_search tool being offered). */
export function pilotScripts(): ScriptInput[] {
  return [
    {
      name: "repository",
      turns: [
        { toolCalls: [{ name: "search_files", input: { query: "roundMinor" } }], usage: usage(1500, 40) },
        {
          toolCalls: [
            { name: "read_file", input: { path: "src/money.js" } },
            { name: "list_files", input: { directory: "docs" } },
          ],
          usage: usage(1900, 60),
        },
        { answer: "Half to even, in roundMinor (src/money.js).", usage: usage(2600, 30) },
      ],
    },
    {
      name: "doc-bridge",
      tool: DOC_SEARCH,
      turns: [
        { toolCalls: [{ name: DOC_SEARCH, input: { query: "rounding" } }], usage: usage(1700, 40) },
        { toolCalls: [{ name: "mcp__doc-bridge__doc_get", input: { path: "docs/rounding.md" } }], usage: usage(2100, 40) },
        { answer: "Banker's rounding via roundMinor, see docs/rounding.md.", usage: usage(2500, 35) },
      ],
    },
  ];
}

export interface HttpRun {
  code: number;
  stdout: string;
  stderr: string;
  output: string;
  dir: string;
  ledger: Ledger;
  api: ScriptedApi;
}

export interface RunOptions {
  mode?: Mode;
  capUsd?: number;
  deadlineMs?: number;
  now?: () => number;
  signal?: AbortSignal;
  apiBaseUrl?: string;
  docBridgeCommand?: string[];
  prices?: HttpStudyConfig["prices"];
  /** Called once the API listens and the ledger path is known, before the run starts. */
  onStart?: (ctx: { api: ScriptedApi; output: string }) => void;
}

/** Starts the scripted API with `scripts`, runs the study in process, reads the ledger back. */
export async function runHttp(c: Corpus, scripts: ScriptInput | ScriptInput[], o: RunOptions = {}): Promise<HttpRun> {
  const api = await startScriptedApi({ port: 0, script: scripts, recordBodies: true });
  const dir = await mkdtemp(join(c.work, "run-"));
  const output = join(dir, "ledger.json");
  const mode = o.mode ?? "pilot";
  let stdout = "";
  let stderr = "";
  const err = new Writable({
    write(chunk, _enc, cb) {
      stderr += chunk.toString();
      cb();
    },
  });
  const deps: HttpStudyDeps = { stdout: (t) => (stdout += t), stderr: err, signal: o.signal, now: o.now };
  o.onStart?.({ api, output });
  try {
    const code = await runHttpStudy(
      {
        loaded: c.loaded,
        mode,
        plan: planStudy(c.loaded.manifest, mode),
        fullPlanSize: planStudy(c.loaded.manifest, "full").length,
        roots: c.roots,
        model: MODEL,
        capUsd: o.capUsd ?? 1,
        output,
        apiKey: TEST_KEY,
        apiBaseUrl: o.apiBaseUrl ?? api.url,
        prices: o.prices ?? PRICES,
        docBridgeCommand: o.docBridgeCommand ?? referenceEngineCommand(),
        deadlineMs: o.deadlineMs,
      },
      deps,
    );
    return { code, stdout, stderr, output, dir, ledger: await readLedger(output), api };
  } finally {
    await api.close();
  }
}

/** Every file under `dir`, as text, for "appears nowhere" checks. */
export async function filesText(dir: string): Promise<string> {
  const out: string[] = [];
  for (const name of await readdir(dir, { recursive: true })) {
    const full = join(dir, name);
    if ((await stat(full)).isFile()) out.push(await readFile(full, "utf8"));
  }
  return out.join("\n");
}

/** The JSON bodies the runner sent, in order. */
export const bodies = (api: ScriptedApi) => api.requests.filter((r) => r.path === "/v1/messages").map((r) => r.rawBody as Record<string, any>);
