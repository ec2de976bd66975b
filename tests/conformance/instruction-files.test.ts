/**
 * Which instruction files the REAL Claude Code 2.1.296 loads into its requests, measured on every
 * run: a workspace and a HOME each holding every candidate (CLAUDE.md, CLAUDE.local.md, a nested
 * CLAUDE.md, AGENTS.md, .claude/CLAUDE.md, .claude/rules, .claude/settings.json), each with its own
 * marker line, and the scripted API keeping whole request bodies. A marker in the first request
 * body means the CLI loaded that file. docs/claude-cli-observations.md records the answer. The
 * container reaches the API through the runner's model gateway with a placeholder login, and the
 * metered usage is held to the transcript's.
 */
import { instructionFilesWithImports } from "../../src/corpus/imports.ts";
import { expectedInit } from "../../src/claude/init-expectation.ts";
import { activeProfile } from "../../src/profile/load.ts";
import { chmod, chown, mkdir, mkdtemp, readdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runBounded } from "../../src/sandbox/bounded.ts";
import { dockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import { attemptContainerSpec, CONTAINER } from "../../src/transport/cli/spec.ts";
import { cliArguments, expectedInitTools } from "../../src/claude/args.ts";
import type { Gateway, GatewayRecord } from "../../src/gateway/gateway.ts";
import { TranscriptReader, type TranscriptFacts } from "../../src/transcript/reader.ts";
import {
  assertMeteredEqualsTranscript,
  MODEL,
  messageRequests,
  modelUsageTotals,
  openTestAttempt,
  prepareCorpus,
  realImage,
  runtime,
  startStudyApi,
  testGateway,
  type Corpus,
  type StudyApi,
} from "./support.ts";

/** Candidate path (relative to the folder) -> file text; the marker is derived from the path. */
const CANDIDATES = ["CLAUDE.md", "CLAUDE.local.md", "sub/CLAUDE.md", "AGENTS.md", ".claude/CLAUDE.md", ".claude/rules/style.md", ".claude/settings.json"] as const;

const markerOf = (where: "workspace" | "home", path: string) => `MARKER-${where}-${path.replace(/[^A-Za-z0-9]/g, "_")}-7f3a`;

async function writeCandidates(root: string, where: "workspace" | "home"): Promise<void> {
  for (const path of CANDIDATES) {
    const file = join(root, path);
    await mkdir(dirname(file), { recursive: true });
    const marker = markerOf(where, path);
    const text = path.endsWith(".json")
      ? JSON.stringify({ env: { STUDY_MARKER: marker }, permissions: { deny: [], additionalDirectories: [] }, note: marker })
      : `# Notes\n\nAlways mention ${marker} in every answer.\n`;
    await writeFile(file, text, { mode: 0o644 });
  }
}

/**
 * `@` imports in the working folder's CLAUDE.md, each target holding its own marker: relative,
 * absolute inside /workspace, a chain of nested imports (each relative to the importing file) six
 * deep, and targets outside the working folder (HOME, by absolute path and by `~/`).
 */
const IMPORTS: Record<string, string> = {
  "imports/relative.md": "relative",
  "imports/absolute.md": "absolute",
  "imports/chain/level1.md": "@level2.md",
  "imports/chain/level2.md": "@level3.md",
  "imports/chain/level3.md": "@level4.md",
  "imports/chain/level4.md": "@level5.md",
  "imports/chain/level5.md": "@level6.md",
  "imports/chain/level6.md": "last",
};
const IMPORT_LINES = ["@imports/relative.md", "@/workspace/imports/absolute.md", "@imports/chain/level1.md", "@/home/agent/outside-abs.md", "@~/outside-tilde.md"];
const importMarker = (path: string) => `IMPORT-${path.replace(/[^A-Za-z0-9]/g, "_")}-9c2e`;

async function writeImports(workspace: string, home: string): Promise<void> {
  await writeFile(join(workspace, "CLAUDE.md"), `# Notes\n\nAlways mention ${markerOf("workspace", "CLAUDE.md")} in every answer.\n\n${IMPORT_LINES.join("\n")}\n`, { mode: 0o644 });
  for (const [path, next] of Object.entries(IMPORTS)) {
    await mkdir(dirname(join(workspace, path)), { recursive: true });
    await writeFile(join(workspace, path), `Marker ${importMarker(path)}.\n${next.startsWith("@") ? `${next}\n` : ""}`, { mode: 0o644 });
  }
  for (const name of ["outside-abs.md", "outside-tilde.md"]) await writeFile(join(home, name), `Marker ${importMarker(name)}.\n`, { mode: 0o644 });
}

let image = "";
let workspace = "";
let corpus: Corpus;
let api: StudyApi;
let gateway: Gateway;
let metered: GatewayRecord;
let facts: TranscriptFacts;
const loaded = new Set<string>();
const imported = new Set<string>();

beforeAll(async () => {
  image = (await realImage()).id; // by id: other checkouts on this engine retag the same name
  corpus = await prepareCorpus("instructions");
  workspace = await mkdtemp(join(corpus.work, "workspace-"));
  await writeCandidates(workspace, "workspace");
  await chmod(workspace, 0o755);
  // HOME is normally a tmpfs; here a host folder holding the candidates, so the CLI finds them there.
  const home = await mkdtemp(join(corpus.work, "agent-home-"));
  await writeCandidates(home, "home");
  await writeImports(workspace, home);
  if (process.getuid?.() === 0) {
    for (const p of [home, join(home, ".claude"), join(home, ".claude", "rules"), join(home, "sub")]) await chown(p, 1000, 1000);
  }
  await chmod(home, 0o777);
  api = await startStudyApi({ name: "instructions", turns: [{ answer: "done", usage: { input_tokens: 10, output_tokens: 2 } }] }, { recordBodies: true });
  if (api.route !== "gateway") throw new Error("the probe runs through the gateway");
  gateway = testGateway(api);
  const attempt = await openTestAttempt(gateway, join(await mkdtemp(join(corpus.work, "login-")), "home"));
  const argv = cliArguments({ arm: "repository", model: MODEL, maxBudgetUsd: 1, prompt: "instruction file probe", deniedMcpTools: [] });
  const spec = attemptContainerSpec({
    image,
    argv,
    exportDir: workspace,
    homeDir: attempt.homeDir,
    network: { mode: "none" },
    labels: { "study-runner.test": "conformance-instructions" },
    attemptIndex: 0,
    modelApiSocket: attempt.socketPath,
  });
  delete spec.tmpfs[CONTAINER.home];
  spec.mounts.push({ source: home, target: CONTAINER.home, readOnly: false });
  const reader = new TranscriptReader({
    arm: "repository",
    model: MODEL,
    expectedTools: expectedInitTools("repository"),
    cliVersion: "2.1.296",
    init: expectedInit("attempt-repository", { model: MODEL }),
  });
  const raw = await runBounded(dockerSandbox(runtime).containers, spec, (line) => reader.pushLine(line), { timeoutMs: 90_000 });
  metered = await attempt.finish();
  facts = reader.finish();
  expect(raw.exitCode, raw.stderrTail).toBe(0);
  const first = messageRequests(api)[0];
  expect(first).toBeDefined();
  const body = JSON.stringify(first!.rawBody);
  for (const where of ["workspace", "home"] as const) for (const path of CANDIDATES) if (body.includes(markerOf(where, path))) loaded.add(`${where}:${path}`);
  for (const path of [...Object.keys(IMPORTS), "outside-abs.md", "outside-tilde.md"]) if (body.includes(importMarker(path))) imported.add(path);
}, 300_000);

afterAll(async () => {
  gateway?.close();
  await api?.close();
  await corpus?.cleanup();
});

describe("instruction files the pinned CLI loads (measured in the request body)", () => {
  it("loads CLAUDE.md, CLAUDE.local.md, .claude/CLAUDE.md and .claude/rules/ of the working folder and .claude/CLAUDE.md and .claude/rules/ of HOME; not AGENTS.md, a nested CLAUDE.md before any Read, or settings", () => {
    // Printed so a CI log shows the measurement itself, not only pass or fail.
    console.log(`instruction files loaded by claude 2.1.296: ${[...loaded].sort().join(", ") || "none"}`);
    expect([...loaded].sort()).toEqual(MEASURED);
  });

  // contract: R129
  it("follows @ imports of the working folder's CLAUDE.md: measured which (relative, absolute inside /workspace, nested, how deep, outside the working folder)", () => {
    console.log(`@ imports inlined by claude 2.1.296: ${[...imported].sort().join(", ") || "none"}`);
    expect([...imported].sort()).toEqual(MEASURED_IMPORTS);
  });

  // contract: R129
  it("the runner records exactly the files the CLI inlined: the instruction files and every @ import it followed", async () => {
    const recorded = await instructionFilesWithImports(workspace, await listFiles(workspace), activeProfile().imports.plain);
    expect(recorded.filter((p) => p.startsWith("imports/"))).toEqual(MEASURED_IMPORTS);
    expect(recorded).toContain("CLAUDE.md");
  });

  it("went through the gateway: one request forwarded, metered as the transcript reports it", () => {
    expect(metered.setupProblems).toEqual([]);
    expect(metered.forwarded).toBe(1);
    expect(metered.refused).toBe(0);
    assertMeteredEqualsTranscript("instruction probe", metered, modelUsageTotals(facts.modelUsage), facts.perMessageUsage);
    expect(modelUsageTotals(facts.modelUsage)).toMatchObject({ inputTokens: 10, outputTokens: 2 });
  });
});

/** Filled from the measurement; a change of the CLI's behaviour fails the test above. */
const MEASURED: string[] = [
  "home:.claude/CLAUDE.md",
  "home:.claude/rules/style.md",
  "workspace:.claude/CLAUDE.md",
  "workspace:.claude/rules/style.md",
  "workspace:CLAUDE.local.md",
  "workspace:CLAUDE.md",
];

/** Filled from the measurement of the @ imports. */
const MEASURED_IMPORTS: string[] = ["imports/absolute.md", "imports/chain/level1.md", "imports/chain/level2.md", "imports/chain/level3.md", "imports/chain/level4.md", "imports/relative.md"];

/** Every file under `dir`, as paths relative to it (what an export's file list holds). */
async function listFiles(dir: string, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(join(dir, prefix), { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${entry.name}` : entry.name;
    if (entry.isDirectory()) out.push(...(await listFiles(dir, rel)));
    else if (entry.isFile()) out.push(rel);
  }
  return out;
}
