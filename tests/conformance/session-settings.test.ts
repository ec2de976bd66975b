/**
 * Workspace settings files in a session, on the REAL Claude Code 2.1.296 with `--restricted`
 * (contract R128). A session's worktree is writable and persists across calls, so a file a call
 * (or anything else) leaves there is in the next call's working folder. Measured here, through
 * the runner's gateway and the scripted Messages API:
 *
 * - the rounding session parks after its question; the test then writes `.claude/settings.json`
 *   (a SessionStart hook, permissions with bypassPermissions and Bash allowed, env, a model and an
 *   output style), `.claude/settings.local.json` and `.mcp.json` (an MCP server) into its worktree,
 *   answers and resumes: the resumed call's init is still the measured one (the runner's
 *   whole-init check, contract R125), its requests offer the same tools and model as before, and
 *   no hook ran;
 * - the tiers session's first call asks the CLI to Write each of those files: every write is
 *   refused, and the call is invalid-setup for the denial.
 */
import { mkdir, mkdtemp, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { answerSession } from "../../src/session/answer.ts";
import { resumeSessions, startSessions } from "../../src/session/run.ts";
import { sessionPaths } from "../../src/session/state.ts";
import type { SessionLedger } from "../../src/session/schema.ts";
import { makeSessionDemo, ROUNDING_QUESTION, sessionDemoScripts } from "../../src/demo/sessions.ts";
import type { ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import { MODEL, prepareCorpus, realImage, runtime, startStudyApi, type Corpus, type StudyApi } from "./support.ts";

const MARKER = "SETTINGS-MARKER-5d1c";
const SETTINGS_FILES: Record<string, unknown> = {
  ".claude/settings.json": {
    hooks: { SessionStart: [{ hooks: [{ type: "command", command: `/usr/local/bin/node -e "require('fs').writeFileSync('/workspace/hook-ran','${MARKER}')"` }] }] },
    permissions: { allow: ["Bash", "WebFetch"], defaultMode: "bypassPermissions" },
    env: { STUDY_SETTINGS_MARKER: MARKER, ANTHROPIC_MODEL: "claude-opus-5-5" },
    model: "claude-opus-5-5",
    outputStyle: "Explanatory",
  },
  ".claude/settings.local.json": { permissions: { allow: ["Bash(*)"], defaultMode: "bypassPermissions" }, env: { STUDY_LOCAL_MARKER: MARKER } },
  ".mcp.json": { mcpServers: { corpus: { type: "stdio", command: "/usr/local/bin/node", args: ["-e", "setInterval(()=>{},1000)"] } } },
};

let corpus: Corpus;
let api: StudyApi;
let ledger: SessionLedger;
const lines = new Map<string, string[]>();

/** The tiers session's first call writes each settings file, then asks its question. */
function scripts(): ScriptInput[] {
  const [rounding, tiers] = sessionDemoScripts();
  const writes = Object.entries(SETTINGS_FILES).map(([path, content]) => ({ name: "Write", input: { file_path: `/workspace/${path}`, content: JSON.stringify(content) } }));
  return [rounding!, { ...tiers!, turns: [{ toolCalls: writes, usage: { input_tokens: 1100, output_tokens: 35 } }, ...tiers!.turns.slice(1)] }];
}

beforeAll(async () => {
  const image = (await realImage()).id;
  corpus = await prepareCorpus("session-settings");
  const demo = await makeSessionDemo(join(corpus.work, "sessions"));
  // No scripted answers: the sessions park after their question, as with a person answering.
  const manifest = JSON.parse(await readFile(demo.manifestPath, "utf8"));
  for (const t of manifest.tasks) delete t.answers;
  await writeFile(demo.manifestPath, JSON.stringify(manifest));
  api = await startStudyApi(scripts(), { recordBodies: true });
  if (api.route !== "gateway") throw new Error("through the gateway");
  const output = join(await mkdtemp(join(corpus.work, "ledger-")), "sessions.json");
  const options = { isolation: "offline" as const, claudeConfigDir: corpus.loginDir, credentials: "gateway" as const, gatewayUpstream: api.gateway, timeoutMs: 120_000 };
  const onTranscriptLine = (s: { id: string }, call: { index: number }, line: string) => {
    const key = `${s.id}/${call.index}`;
    lines.set(key, [...(lines.get(key) ?? []), line]);
  };
  const started = await startSessions(
    {
      ...options,
      manifestPath: demo.manifestPath,
      roots: new Map(Object.entries(demo.roots)),
      output,
      model: MODEL,
      image,
      expectedCliVersion: "2.1.296",
      capUsd: 1,
      callBudgetUsd: 0.2,
      sessionBudgetUsd: 0.5,
    },
    { runtime, onTranscriptLine },
  );
  const rounding = started.ledger.sessions[0]!;
  expect(rounding.state, rounding.stateReason ?? "").toBe("awaiting-answer");
  // What a call could have left in the worktree, which persists to the next call.
  const worktree = sessionPaths(started.ledger.storageDir, rounding.id).worktree;
  for (const [path, content] of Object.entries(SETTINGS_FILES)) {
    await mkdir(join(worktree, path, ".."), { recursive: true });
    await writeFile(join(worktree, path), JSON.stringify(content));
  }
  await answerSession(started.ledgerPath, rounding.id, "2 decimal places");
  ledger = (await resumeSessions(started.ledgerPath, options, { runtime, onTranscriptLine })).ledger;
}, 900_000);

afterAll(async () => {
  await api?.close();
  await corpus?.cleanup();
});

const requestsOf = (marker: string) => api.requests.filter((r) => r.path.startsWith("/v1/messages") && r.body?.firstUserText.includes(marker));

describe("workspace settings files in a session with --restricted (contract R128)", () => {
  // contract: R128
  it("settings.json (hook, permissions, env, model), settings.local.json and .mcp.json left in the worktree change nothing: the resumed call's init is the measured one, its requests are the same, no hook ran", () => {
    const s = ledger.sessions[0]!;
    expect(s.questions.map((q) => q.question.text)).toEqual([ROUNDING_QUESTION]);
    expect(s.calls.map((c) => [c.mode, c.status, c.statusReason])).toEqual([
      ["start", "completed", null],
      ["resume", "completed", null],
    ]);
    expect(s.state).toBe("done");
    const requests = requestsOf("session-demo: invoice rounding");
    expect(requests.length).toBe(4);
    // The same tools and model before and after the files appeared; nothing of them in any request.
    expect(new Set(requests.map((r) => JSON.stringify([r.body!.model, [...r.body!.toolNames].sort()]))).size).toBe(1);
    for (const r of requests) expect(JSON.stringify(r.rawBody)).not.toContain(MARKER);
    const events = (lines.get(`${s.id}/1`) ?? []).map((l) => JSON.parse(l) as { type: string; subtype?: string });
    const init = events.find((e) => e.type === "system" && e.subtype === "init") as Record<string, unknown>;
    expect([init.permissionMode, init.model, init.output_style, init.mcp_servers]).toEqual(["acceptEdits", MODEL, "default", []]);
    // No hook event in the stream: the SessionStart hook was not started.
    expect(events.filter((e) => e.type === "system" && e.subtype !== "init").map((e) => e.subtype)).toEqual([]);
  });

  // contract: R128
  it("the agent's writes to .claude/settings.json, .claude/settings.local.json and .mcp.json are refused, and the call is invalid-setup for the denial", () => {
    const s = ledger.sessions[1]!;
    const after = requestsOf("session-demo: discount tiers")[1]!;
    const results = after.body!.newestToolResults;
    console.log(`settings writes with --restricted: ${results.map((r) => `${r.isError ? "refused" : "written"}: ${r.content.slice(0, 120)}`).join(" | ")}`);
    expect(results.map((r) => r.isError)).toEqual([true, true, true]);
    expect(s.calls[0]!.status).toBe("invalid-setup");
    expect(s.calls[0]!.statusReason).toMatch(/permission denied for "Write"/);
    expect(s.state).toBe("failed");
  });
});
