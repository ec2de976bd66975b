/**
 * The doc-bridge arm must not read what the export keeps out of the agent's working folder: the
 * reference index holds only what the export filter lets through, the preflight proves on the live
 * engine that no answer key is served (doc.get and doc.search), and the bridge relays tools/call
 * only for the allowed tools, whatever the client asks.
 */
import { execFile } from "node:child_process";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { afterEach, describe, expect, it } from "vitest";
import { loadManifest } from "../../src/manifest/load.ts";
import { preflightDocBridge } from "../../src/mcp/preflight.ts";
import { compareMcpRecord, startMcpBridge } from "../../src/mcp/bridge.ts";
import { RELAY_SCRIPT_PATH } from "../support/mcp-relay.ts";
import { ENGINE, INDEX_ROOT, makeRepo, type Repo } from "./mcp-fixtures.ts";

const execFileP = promisify(execFile);
const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

const KEY_LINE = "Expected answer: the settlement window closes at 17:30 CET";
const SDK = (sub: string) => new URL(`../../node_modules/@modelcontextprotocol/sdk/dist/esm/${sub}`, import.meta.url).href;

async function corpus(): Promise<{ repo: Repo; manifest: string }> {
  const repo = await makeRepo(
    [
      { path: "doc-bridge.config.json", content: JSON.stringify({ docs: ["**/*.md"] }) },
      { path: "README.md", content: "# Settlement\n\nSee docs/settlement.md.\n" },
      { path: "docs/settlement.md", content: "# Settlement window\n\nThe window is configurable.\n" },
      { path: "answers.md", content: `# Key\n\n${KEY_LINE}\n` },
      { path: "docs/copy.md", content: `# Key\n\n${KEY_LINE}\n` },
      { path: ".notes/private.md", content: "# Private\n\nhidden settlement notes\n" },
      { path: "node_modules/pkg/README.md", content: "# Dependency\n\nsettlement of a dependency\n" },
    ],
    cleanup,
  );
  const dir = await mkdtemp(join(tmpdir(), "mcp-public-manifest-"));
  cleanup.push(() => rm(dir, { recursive: true, force: true }));
  const manifest = join(dir, "manifest.json");
  await writeFile(
    manifest,
    JSON.stringify({
      version: 1,
      repetitions: 1,
      scenarios: ["repository-only", "doc-bridge"],
      repositories: { corpus: repo.commit },
      tasks: [{ id: "t1", repository: "corpus", category: "c", question: "When does the window close?", sources: ["README.md"], expected: ["17:30"] }],
      answerKeys: { corpus: ["answers.md"] },
    }),
  );
  return { repo, manifest };
}

const index = (dir: string, args: string[] = []) =>
  execFileP(ENGINE[0]!, [...ENGINE.slice(1), "index", ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", STUDY_RUNNER_DOC_INDEX: INDEX_ROOT } });

async function client(dir: string) {
  const c = new Client({ name: "test", version: "1" });
  await c.connect(new StdioClientTransport({ command: ENGINE[0]!, args: ENGINE.slice(1), cwd: dir, env: { PATH: process.env.PATH ?? "", STUDY_RUNNER_DOC_INDEX: INDEX_ROOT } }));
  cleanup.push(() => c.close());
  return c;
}

describe("doc-bridge serves only what the export lets through", () => {
  it("the reference index leaves out dot-folders, node_modules, and with the manifest every answer key and its copies", async () => {
    const { repo, manifest } = await corpus();
    const { stderr } = await index(repo.dir);
    expect(stderr).toContain("indexed 4 documents");
    const c = await client(repo.dir);
    for (const path of [".notes/private.md", "node_modules/pkg/README.md"]) {
      expect((await c.callTool({ name: "doc.get", arguments: { path } })).isError, path).toBe(true);
    }
    const withKeys = await index(repo.dir, ["--manifest", manifest, "--repository", "corpus"]);
    expect(withKeys.stderr).toContain("indexed 2 documents");
    for (const path of ["answers.md", "docs/copy.md"]) expect((await c.callTool({ name: "doc.get", arguments: { path } })).isError, path).toBe(true);
    expect(JSON.stringify(await c.callTool({ name: "doc.search", arguments: { query: KEY_LINE } }))).not.toContain("17:30");
  });

  it("the preflight refuses an engine whose doc.get serves an answer key, naming the fix, and passes once the index leaves it out", async () => {
    const { repo, manifest } = await corpus();
    await index(repo.dir);
    const loaded = await loadManifest(manifest);
    const checkouts = [{ repository: "corpus", dir: repo.dir, pin: repo.commit }];
    const refused = await preflightDocBridge({ command: ENGINE, checkouts, loaded }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(refused?.message).toMatch(
      /doc-bridge preflight refused for checkout corpus .*doc\.get serves 'answers\.md', which every export leaves out .*reference-server\.ts index --manifest \S+manifest\.json --repository corpus/,
    );
    expect(refused?.message).not.toContain("17:30");

    await index(repo.dir, ["--manifest", manifest, "--repository", "corpus"]);
    const ok = await preflightDocBridge({ command: ENGINE, checkouts, loaded });
    expect(ok.checkouts[0]!.forbiddenPathsChecked).toBe(2);
  });

  it("the preflight refuses an engine whose doc.search returns a line of an answer key, though doc.get refuses it", async () => {
    const { repo, manifest } = await corpus();
    const dir = await mkdtemp(join(tmpdir(), "mcp-leaky-"));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    // The engine runs as an unprivileged uid: its own code must be readable to it.
    await chmod(dir, 0o755);
    const engine = join(dir, "leaky.mjs");
    await writeFile(
      engine,
      `import { execFileSync } from "node:child_process";
import { z } from ${JSON.stringify(new URL("../../node_modules/zod/index.js", import.meta.url).href)};
import { McpServer } from ${JSON.stringify(SDK("server/mcp.js"))};
import { StdioServerTransport } from ${JSON.stringify(SDK("server/stdio.js"))};
const pin = execFileSync("git", ["rev-parse", "HEAD"], { encoding: "utf8" }).trim();
const s = new McpServer({ name: "leaky", version: "1" });
const ok = (o) => ({ content: [{ type: "text", text: JSON.stringify(o) }] });
s.registerTool("doc.search", { inputSchema: { query: z.string(), limit: z.number().optional() } }, async () => ok({ pin, matches: [{ path: "notes/digest.md", snippet: ${JSON.stringify(KEY_LINE)} }] }));
s.registerTool("doc.get", { inputSchema: { path: z.string() } }, async ({ path }) => { throw new Error("no such document " + path); });
s.registerTool("handoff.resolve", {}, async () => ok({}));
await s.connect(new StdioServerTransport());
`,
    );
    const refused = await preflightDocBridge({
      command: [process.execPath, engine],
      checkouts: [{ repository: "corpus", dir: repo.dir, pin: repo.commit }],
      loaded: await loadManifest(manifest),
    }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(refused?.message).toMatch(/doc\.search for a line of 'answers\.md' returns it/);
    expect(refused?.message).not.toContain("17:30");
  });

  it("the bridge relays tools/call only for the allowed tools: a denied tool never reaches the server, the client gets an error, the refusal is recorded", async () => {
    const { repo } = await corpus();
    await index(repo.dir);
    const bridge = await startMcpBridge({ command: ENGINE, cwd: repo.dir });
    cleanup.push(() => bridge.stop());
    const c = new Client({ name: "client-ignoring-disallowedTools", version: "1" });
    await c.connect(new StdioClientTransport({ command: process.execPath, args: [RELAY_SCRIPT_PATH, bridge.socketPath], cwd: "/", stderr: "pipe" }));
    // The server lists gate.status; a client that ignores --disallowedTools calls it anyway.
    expect((await c.listTools()).tools.map((t) => t.name)).toContain("gate.status");
    const denied = await c.callTool({ name: "gate.status", arguments: {} }).then(
      () => "answered",
      (e: Error) => e.message,
    );
    expect(denied).toMatch(/tool gate\.status is not allowed in this study/);
    expect((await c.callTool({ name: "doc.search", arguments: { query: "settlement" } })).isError).toBeFalsy();
    await c.close();

    const record = await bridge.stop();
    expect(record.toolCalls.map((t) => t.name)).toEqual(["doc.search"]);
    expect(record.messageLog.some((m) => m.tool === "gate.status")).toBe(false);
    expect(record.refusedToolCalls).toEqual([{ name: "gate.status", id: expect.anything() }]);
    expect(compareMcpRecord(record, ["mcp__doc-bridge__gate_status", "mcp__doc-bridge__doc_search"])).toContain(
      "the bridge refused a call of mcp__doc-bridge__gate_status: only the allowed doc-bridge tools reach the server",
    );
  });
});
