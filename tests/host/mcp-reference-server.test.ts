import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { afterEach, describe, expect, inject, it } from "vitest";
import { chmod } from "node:fs/promises";
import { deflateSync } from "node:zlib";
import { loadReferenceConfig, resolveConfigAtPin } from "../../src/mcp/config.ts";
import { childProcessCounts } from "../../src/process/child.ts";
import { INDEX_DIR_ENV } from "../../src/mcp/index-store.ts";
import { ENGINE, git, INDEX_ROOT, makeRepo, runIndex, type RepoFile } from "./mcp-fixtures.ts";

const CONFIG = JSON.stringify({ docs: ["docs/**/*.md", "README.md"], index: ".doc-bridge/index.json", handoffs: { billing: "team-billing" } });

const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

const repo = (files: readonly RepoFile[]) => makeRepo(files, cleanup);

async function connect(dir: string) {
  const client = new Client({ name: "test", version: "1" });
  const transport = new StdioClientTransport({ command: ENGINE[0]!, args: ENGINE.slice(1), cwd: dir, stderr: "pipe", env: { PATH: process.env.PATH ?? "", [INDEX_DIR_ENV]: INDEX_ROOT } });
  let stderr = "";
  transport.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  cleanup.push(() => client.close());
  await client.connect(transport);
  return { client, stderr: () => stderr };
}

type ToolResult = { isError?: boolean; structuredContent?: Record<string, unknown>; content: Array<{ type: string; text?: string }> };
async function callTool(client: Client, name: string, args: Record<string, unknown>): Promise<ToolResult> {
  return (await client.callTool({ name, arguments: args })) as ToolResult;
}

const BASE: RepoFile[] = [
  { path: ".gitignore", content: ".doc-bridge/\n" },
  { path: "doc-bridge.config.json", content: CONFIG },
  { path: "README.md", content: "# Demo\n\nSee docs for rounding.\n" },
  { path: "docs/rounding.md", content: "# Rounding\n\nAmounts round half to even in roundMinor.\n" },
  { path: "docs/handoffs/h-1.md", content: "# Handoff h-1\n\nAsk the ledger team.\n" },
  { path: "docs/link.md", symlink: "rounding.md" },
  { path: "src/notes.md", content: "# Not a doc\n\nroundMinor internals.\n" },
];

describe("reference doc-bridge server", () => {
  it("indexes the Markdown of HEAD through git, not the work tree, and answers doc.search and doc.get", async () => {
    const r = await repo(BASE);
    // An uncommitted edit must not reach the index: the index is of the commit, not the disk.
    await writeFile(join(r.dir, "docs/rounding.md"), "# Rounding\n\nUNCOMMITTED EDIT\n");
    const { stderr } = await runIndex(r.dir);
    expect(stderr).toContain(`at ${r.commit}`);
    // The index lives in the runner's folder, keyed by repository (root commit) and pin; nothing is written into the checkout.
    const indexPath = /into (\S+)\n/.exec(stderr)![1]!;
    expect(indexPath.startsWith(`${INDEX_ROOT}/`)).toBe(true);
    // And that folder is in the run's folder, which the end of the run removes: this file's worker
    // is stopped with SIGTERM, which runs no exit handler of its own (tests/support/run-folder-setup.ts).
    expect(dirname(INDEX_ROOT)).toBe(inject("runFolder"));
    expect(indexPath).toContain(`/${r.commit}/reference-`);
    expect(existsSync(join(r.dir, ".doc-bridge"))).toBe(false);
    const index = JSON.parse(await readFile(indexPath, "utf8"));
    expect(index.pin).toBe(r.commit);
    expect(index.docs.map((d: { path: string }) => d.path)).toEqual(["README.md", "docs/handoffs/h-1.md", "docs/rounding.md"]);

    const { client } = await connect(r.dir);
    const tools = (await client.listTools()).tools.map((t) => t.name);
    expect(tools).toEqual(["doc.search", "doc.get", "handoff.resolve", "gate.status", "memory.promoteDraft"]);

    const found = await callTool(client, "doc.search", { query: "roundMinor" });
    expect(found.isError).toBeFalsy();
    expect(found.structuredContent).toMatchObject({ pin: r.commit, matches: [{ path: "docs/rounding.md", heading: "Rounding" }] });
    expect((found.structuredContent!.matches as unknown[]).length).toBe(1);
    expect(JSON.parse(found.content[0]!.text!).pin).toBe(r.commit);

    const doc = await callTool(client, "doc.get", { path: "docs/rounding.md" });
    expect(doc.structuredContent?.text).toBe("# Rounding\n\nAmounts round half to even in roundMinor.\n");
    const missing = await callTool(client, "doc.get", { path: "src/notes.md" });
    expect(missing.isError).toBe(true);
    expect(missing.content[0]!.text).toContain("no such document in the index: src/notes.md");

    expect((await callTool(client, "handoff.resolve", { id: "billing" })).structuredContent).toEqual({ id: "billing", source: "config", target: "team-billing" });
    expect((await callTool(client, "handoff.resolve", { id: "h-1" })).structuredContent).toMatchObject({ source: "docs", path: "docs/handoffs/h-1.md" });
    expect((await callTool(client, "handoff.resolve", { id: "nope" })).isError).toBe(true);
    expect((await callTool(client, "handoff.resolve", { id: "../README" })).isError).toBe(true);
  });

  it("refuses doc.search with the stale-index message once HEAD moves, and after re-indexing answers again", async () => {
    const r = await repo(BASE);
    await runIndex(r.dir);
    const built = r.commit;
    const next = await r.commitFiles([{ path: "docs/new.md", content: "# New\n\nfresh words\n" }]);
    const { client } = await connect(r.dir);
    const stale = await callTool(client, "doc.search", { query: "fresh" });
    expect(stale.isError).toBe(true);
    expect(stale.content[0]!.text).toBe(`index is stale: built at ${built}, HEAD is ${next}; run \`reference-server.ts index\``);
    expect((await callTool(client, "doc.get", { path: "docs/rounding.md" })).isError).toBe(true);

    await runIndex(r.dir);
    const fresh = await callTool(client, "doc.search", { query: "fresh" });
    expect(fresh.isError).toBeFalsy();
    expect(fresh.structuredContent).toMatchObject({ pin: next, matches: [{ path: "docs/new.md" }] });
  });

  it("refuses doc.search when there is no index", async () => {
    const r = await repo(BASE);
    const { client } = await connect(r.dir);
    const res = await callTool(client, "doc.search", { query: "rounding" });
    expect(res.isError).toBe(true);
    expect(res.content[0]!.text).toContain("index is missing");
  });

  it("never writes the index through a committed symlink: a config index path through a link is refused, naming it, and nothing lands outside", async () => {
    const outside = await mkdtemp(join(tmpdir(), "mcp-outside-"));
    cleanup.push(() => rm(outside, { recursive: true, force: true }));
    const r = await repo([
      { path: "x", symlink: outside },
      { path: "doc-bridge.config.json", content: JSON.stringify({ docs: ["docs/**/*.md"], index: "x/.bashrc" }) },
      { path: "docs/a.md", content: "# A\n\necho pwned\n" },
    ]);
    const err = await runIndex(r.dir).then(
      () => undefined,
      (e: { stderr: string; code: number }) => e,
    );
    expect(err?.code).toBe(1);
    expect(err?.stderr).toContain("index path 'x/.bashrc' runs through the symlink 'x' committed at the pin; refusing");
    expect(await readdir(outside)).toEqual([]);

    // An escaping path is refused by name too; a config swapped in the work tree is never read.
    const esc = await repo([{ path: "doc-bridge.config.json", content: JSON.stringify({ docs: ["docs/*.md"], index: "../../escape.json" }) }]);
    const escErr = await runIndex(esc.dir).then(
      () => undefined,
      (e: { stderr: string; code: number }) => e,
    );
    expect(escErr?.stderr).toContain("index path '../../escape.json' leaves the checkout; refusing");
    const swapped = await repo([
      { path: "doc-bridge.config.json", content: JSON.stringify({ docs: ["docs/*.md"] }) },
      { path: "docs/a.md", content: "# A\n" },
    ]);
    await writeFile(join(swapped.dir, "doc-bridge.config.json"), JSON.stringify({ docs: ["docs/*.md"], index: "../../escape.json" }));
    const { stderr } = await runIndex(swapped.dir);
    expect(stderr).toContain(`indexed 1 documents at ${swapped.commit} into ${INDEX_ROOT}/`);
  });

  it("reads its config from package.json's docBridge key and says a .ts config is unsupported", async () => {
    const pkg = await repo([
      { path: ".gitignore", content: ".doc-bridge/\n" },
      { path: "package.json", content: JSON.stringify({ name: "x", docBridge: { docs: ["notes/*.md"], index: ".doc-bridge/i.json" } }) },
      { path: "notes/a.md", content: "# A\n\nalpha\n" },
    ]);
    const { stderr } = await runIndex(pkg.dir);
    expect(JSON.parse(await readFile(/into (\S+)\n/.exec(stderr)![1]!, "utf8")).docs).toHaveLength(1);

    const ts = await repo([
      { path: "doc-bridge.config.ts", content: "export default {}\n" },
      { path: "doc-bridge.config.json", content: CONFIG },
    ]);
    const err = await runIndex(ts.dir).then(
      () => undefined,
      (e: { stderr: string; code: number }) => e,
    );
    expect(err?.code).toBe(1);
    expect(err?.stderr).toContain("doc-bridge.config.ts is unsupported by the reference server");
  });
});

describe("config resolution", () => {
  const file = async (files: Record<string, string>) => {
    const r = await repo(Object.entries(files).map(([path, content]) => ({ path, content })));
    const res = await resolveConfigAtPin(r.dir, r.commit);
    return res.ok ? res.file : `refused: ${res.reason}`;
  };

  it("follows the server's candidate order", async () => {
    expect(await file({ "doc-bridge.config.json": "{}", "doc-bridge.config.ts": "" })).toBe("doc-bridge.config.ts");
    expect(await file({ "doc-bridge.config.json": "{}", "doc-bridge.config.mts": "" })).toBe("doc-bridge.config.mts");
    expect(await file({ "doc-bridge.config.json": "{}", "doc-bridge.config.mjs": "" })).toBe("doc-bridge.config.mjs");
    expect(await file({ "doc-bridge.config.json": "{}", "doc-bridge.config.js": "", "doc-bridge.config.mjs": "" })).toBe("doc-bridge.config.js");
    expect(await file({ "doc-bridge.config.yaml": "", "doc-bridge.config.json": "{}" })).toBe("doc-bridge.config.json");
    expect(await file({ "doc-bridge.config.yml": "", "doc-bridge.config.yaml": "" })).toBe("doc-bridge.config.yaml");
    expect(await file({ "doc-bridge.config.yml": "", "package.json": '{"docBridge":{}}' })).toBe("doc-bridge.config.yml");
    expect(await file({ "package.json": '{"docBridge":{}}' })).toBe("package.json");
  });

  it("ignores package.json without a docBridge key and says why nothing was found", async () => {
    expect(await file({ "package.json": '{"name":"x"}' })).toMatch(
      /^refused: no doc-bridge config at the pin [0-9a-f]{12}: none of doc-bridge\.config\.ts, .* and package\.json has no "docBridge" key$/,
    );
    expect(await file({ "package.json": "{oops" })).toContain("package.json is not valid JSON");
    expect(await file({})).toContain("no doc-bridge config");
  });
});

describe("config at the pin", () => {
  it("refuses a config that is a symlink at the pin instead of following it", async () => {
    const r = await repo([
      { path: "real.json", content: JSON.stringify({ docs: ["*.md"] }) },
      { path: "doc-bridge.config.json", symlink: "real.json" },
    ]);
    const res = await resolveConfigAtPin(r.dir, r.commit);
    expect(res.ok).toBe(false);
    expect(res.ok ? "" : res.reason).toMatch(/doc-bridge\.config\.json at the pin [0-9a-f]{12} is not a regular file \(mode 120000\)/);
  });
});

describe("the config's reads", () => {
  const gitStarted = () => childProcessCounts().git ?? 0;

  // contract: R286
  it("reads the config and every folder on its index path through one git process, and still refuses a link deep on that path", async () => {
    const good = await repo([
      { path: "doc-bridge.config.json", content: JSON.stringify({ docs: ["docs/*.md"], index: "cache/deep/er/index.json" }) },
      { path: "cache/deep/er/keep.txt", content: "x\n" },
      { path: "docs/a.md", content: "# A\n" },
    ]);
    let before = gitStarted();
    expect((await loadReferenceConfig(good.dir, good.commit)).config.index).toBe("cache/deep/er/index.json");
    expect(gitStarted() - before).toBe(1);

    const linked = await repo([
      { path: "doc-bridge.config.json", content: JSON.stringify({ docs: ["docs/*.md"], index: "cache/deep/link/index.json" }) },
      { path: "cache/deep/link", symlink: "/tmp" },
      { path: "docs/a.md", content: "# A\n" },
    ]);
    before = gitStarted();
    const err = await loadReferenceConfig(linked.dir, linked.commit).catch((e: Error) => e);
    expect(String(err)).toContain("index path 'cache/deep/link/index.json' runs through the symlink 'cache/deep/link' committed at the pin; refusing");
    expect(gitStarted() - before).toBe(1);
  });

  // contract: R286
  it("refuses a config whose bytes were forged under its blob id instead of loading them", async () => {
    const r = await repo([
      { path: "doc-bridge.config.json", content: JSON.stringify({ docs: ["docs/*.md"] }) },
      { path: "docs/a.md", content: "# A\n" },
    ]);
    const blob = (await git(r.dir, ["rev-parse", `${r.commit}:doc-bridge.config.json`])).trim();
    const forged = Buffer.from(JSON.stringify({ docs: ["src/*.ts"] }).padEnd(Buffer.byteLength(JSON.stringify({ docs: ["docs/*.md"] }))));
    const file = join(r.dir, ".git", "objects", blob.slice(0, 2), blob.slice(2));
    await chmod(file, 0o644);
    await writeFile(file, deflateSync(Buffer.concat([Buffer.from(`blob ${forged.length}\0`), forged])));
    const err = await loadReferenceConfig(r.dir, r.commit).catch((e: Error) => e);
    expect(String(err)).toContain(`the bytes read for blob ${blob} do not hash to its id`);
  });
});
