/**
 * A reference doc-bridge server: the smallest engine that speaks the doc-bridge tool surface
 * over MCP stdio, so the runner and its tests have a real server without the real engine.
 *
 *   node --import tsx src/mcp/reference-server.ts          serve MCP on stdio (cwd = checkout)
 *   node --import tsx src/mcp/reference-server.ts index    build the index at HEAD and exit
 *
 * It reads its config and Markdown from the commit at HEAD through git (never the work tree),
 * stores the index in the runner's index folder outside the checkout (src/mcp/index-store.ts)
 * keyed by repository, pin and engine revision, and refuses to answer from an index whose pin
 * is not HEAD, like the real engine's `ak-docs index` freshness rule.
 */
import { createHash } from "node:crypto";
import { readFileSync, realpathSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";
import { gitHead, lsTree, ObjectReader, readBlobs } from "../corpus/git.ts";
import { loadPublicFilter, type PublicPathOptions } from "../corpus/filter.ts";
import { exportSourceFor } from "../export/options.ts";
import { loadManifest } from "../manifest/load.ts";
import { defaultIndexRoot, indexedPins, indexLocation, readIndexFile, repositoryKey, RepositoryKeys, writeIndexFile } from "./index-store.ts";
import { loadReferenceConfig, type ReferenceConfig } from "./config.ts";

const SELF = fileURLToPath(import.meta.url);

/** Identifies this engine build: the hash of this file, so a changed server is a new revision. */
export const REFERENCE_ENGINE_REVISION = `reference-${createHash("sha256").update(readFileSync(SELF)).digest("hex").slice(0, 12)}`;

const INDEX_FORMAT = "reference-doc-bridge-index/1";
/** Markdown larger than this is not indexed: the reference index stays small. */
const MAX_DOC_BYTES = 200_000;

const IndexSchema = z.object({
  format: z.literal(INDEX_FORMAT),
  pin: z.string(),
  engineRevision: z.string(),
  docs: z.array(z.object({ path: z.string(), text: z.string() })),
});
type DocIndex = z.infer<typeof IndexSchema>;

/** `*` and `?` stay inside one path segment, `**` spans segments (`docs/**\/*.md` matches `docs/a.md`). */
export function globToRegExp(glob: string): RegExp {
  let re = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === "*" && glob[i + 1] === "*") {
      if (glob[i + 2] === "/") {
        re += "(?:.*/)?";
        i += 2;
      } else {
        re += ".*";
        i += 1;
      }
    } else if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}

export interface BuildIndexOptions {
  /** The runner-owned index folder (default: defaultIndexRoot()). */
  indexRoot?: string;
  /** What the export of this repository leaves out (answer keys, the manifest): the index leaves out the same. */
  exclude?: PublicPathOptions;
}

export async function buildIndex(checkout: string, opts: BuildIndexOptions = {}): Promise<{ indexPath: string; index: DocIndex }> {
  const pin = await gitHead(checkout);
  const { config } = await loadReferenceConfig(checkout, pin);
  const patterns = config.docs.map(globToRegExp);
  const tree = await lsTree(checkout, pin);
  // The export's own filter: a document the agent may not read in its working folder (an answer
  // key, a dot-folder, node_modules) must not reach it through doc.get or doc.search either.
  const filter = await loadPublicFilter(checkout, tree, opts.exclude);
  const entries = tree.filter((e) => filter.reason(e) === undefined && (e.size ?? Infinity) <= MAX_DOC_BYTES && patterns.some((p) => p.test(e.path)));
  const docs: DocIndex["docs"] = [];
  await readBlobs(
    checkout,
    entries.map((e) => e.oid),
    (i, data) => {
      docs.push({ path: entries[i]!.path, text: data.toString("utf8") });
    },
  );
  docs.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  const index: DocIndex = { format: INDEX_FORMAT, pin, engineRevision: REFERENCE_ENGINE_REVISION, docs };
  const loc = indexLocation(opts.indexRoot ?? defaultIndexRoot(), await repositoryKey(checkout, pin), pin, REFERENCE_ENGINE_REVISION);
  await writeIndexFile(loc, JSON.stringify(index) + "\n");
  return { indexPath: loc.file, index };
}

/**
 * The index when it was built at HEAD; otherwise an Error whose message says what to run. HEAD is
 * read on every call; the repository key of a pin, once per server (`keys`).
 */
async function freshIndex(checkout: string, indexRoot: string, keys: RepositoryKeys): Promise<DocIndex> {
  const head = await gitHead(checkout);
  const loc = indexLocation(indexRoot, await keys.of(checkout, head), head, REFERENCE_ENGINE_REVISION);
  const text = await readIndexFile(loc.file);
  if (text === undefined) {
    const pins = await indexedPins(loc);
    if (pins.includes(head)) throw new Error(`the index at ${head} was built by another engine revision, not ${REFERENCE_ENGINE_REVISION}; run \`reference-server.ts index\``);
    if (pins.length) throw new Error(`index is stale: built at ${pins.join(", ")}, HEAD is ${head}; run \`reference-server.ts index\``);
    throw new Error(`index is missing at ${loc.file}; HEAD is ${head}; run \`reference-server.ts index\``);
  }
  let index: DocIndex;
  try {
    index = IndexSchema.parse(JSON.parse(text));
  } catch {
    throw new Error(`index at ${loc.file} is unreadable; HEAD is ${head}; run \`reference-server.ts index\``);
  }
  if (index.pin !== head) throw new Error(`index is stale: built at ${index.pin}, HEAD is ${head}; run \`reference-server.ts index\``);
  return index;
}

interface Section {
  path: string;
  heading: string;
  text: string;
}

function sections(doc: DocIndex["docs"][number]): Section[] {
  const out: Section[] = [];
  let current: Section = { path: doc.path, heading: "", text: "" };
  for (const line of doc.text.split("\n")) {
    const m = /^#{1,6}\s+(.*)$/.exec(line);
    if (m) {
      if (current.heading || current.text.trim()) out.push(current);
      current = { path: doc.path, heading: m[1]!.trim(), text: "" };
    } else current.text += line + "\n";
  }
  if (current.heading || current.text.trim()) out.push(current);
  return out;
}

function countOf(haystack: string, needle: string): number {
  let n = 0;
  for (let i = haystack.indexOf(needle); i >= 0; i = haystack.indexOf(needle, i + needle.length)) n++;
  return n;
}

export function search(index: DocIndex, query: string, limit: number) {
  const terms = [...new Set(query.toLowerCase().match(/[\p{L}\p{N}_]{2,}/gu) ?? [])];
  const scored = index.docs.flatMap(sections).map((s) => {
    const heading = s.heading.toLowerCase();
    const body = s.text.toLowerCase();
    const score = terms.reduce((sum, t) => sum + 2 * countOf(heading, t) + countOf(body, t), 0);
    return { s, score };
  });
  return scored
    .filter((x) => x.score > 0)
    .sort((a, b) => b.score - a.score)
    .slice(0, limit)
    .map(({ s, score }) => {
      const flat = s.text.replace(/\s+/g, " ").trim();
      const lower = flat.toLowerCase();
      const hits = terms.map((t) => lower.indexOf(t)).filter((i) => i >= 0);
      const at = hits.length ? Math.max(0, Math.min(...hits) - 60) : 0;
      return { path: s.path, heading: s.heading, snippet: flat.slice(at, at + 200), score };
    });
}

function result(structured: Record<string, unknown>) {
  return { content: [{ type: "text" as const, text: JSON.stringify(structured) }], structuredContent: structured };
}

export function createReferenceServer(checkout: string, config: ReferenceConfig, indexRoot: string = defaultIndexRoot()): McpServer {
  const server = new McpServer({ name: "doc-bridge-reference", version: `0.1.0+${REFERENCE_ENGINE_REVISION}` });
  const keys = new RepositoryKeys();

  server.registerTool(
    "doc.search",
    {
      description: "Search the project's documentation index (built at HEAD).",
      inputSchema: { query: z.string().min(1).max(500), limit: z.number().int().min(1).max(20).optional() },
    },
    async ({ query, limit }) => {
      const index = await freshIndex(checkout, indexRoot, keys);
      const matches = search(index, query, limit ?? 5);
      return result({ pin: index.pin, engineRevision: index.engineRevision, matches });
    },
  );

  server.registerTool("doc.get", { description: "Return one indexed document's text.", inputSchema: { path: z.string().min(1).max(1000) } }, async ({ path }) => {
    const index = await freshIndex(checkout, indexRoot, keys);
    const doc = index.docs.find((d) => d.path === path);
    if (!doc) throw new Error(`no such document in the index: ${path}`);
    return result({ pin: index.pin, path: doc.path, text: doc.text });
  });

  server.registerTool(
    "handoff.resolve",
    {
      description: "Resolve a handoff id to its target (config `handoffs`, else docs/handoffs/<id>.md).",
      inputSchema: { id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/) },
    },
    async ({ id }) => {
      const target = config.handoffs?.[id];
      if (target !== undefined) return result({ id, source: "config", target });
      const index = await freshIndex(checkout, indexRoot, keys);
      const doc = index.docs.find((d) => d.path === `docs/handoffs/${id}.md`);
      if (!doc) throw new Error(`unknown handoff: ${id}`);
      return result({ pin: index.pin, id, source: "docs", path: doc.path, text: doc.text });
    },
  );

  // Tools the study must deny (contract R16: every listed tool but the three above goes into
  // --disallowedTools). They exist here so that the deny-list derivation has something to do.
  server.registerTool("gate.status", { description: "Report the release gate status." }, async () => result({ gate: "open", engine: "reference" }));
  server.registerTool("memory.promoteDraft", { description: "Promote a memory draft.", inputSchema: { draftId: z.string().max(200).optional() } }, async () =>
    result({ promoted: false, reason: "the reference server keeps no memory" }),
  );
  for (const name of config.extraTools ?? []) {
    server.registerTool(name, { description: `Extra tool ${name} (reference server test option).` }, async () => result({ tool: name }));
  }
  return server;
}

/**
 * `index --manifest PATH --repository NAME`: leave out what that repository's export leaves out
 * (its answer keys and the manifest), built by the export's own function. Without them only the
 * path rules apply, and the runner's preflight refuses an index that serves an answer key.
 */
async function excludeFromArgs(args: readonly string[], cwd: string): Promise<PublicPathOptions | undefined> {
  const value = (flag: string) => {
    const i = args.indexOf(flag);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const manifest = value("--manifest");
  const repository = value("--repository");
  const known = new Set(["--manifest", "--repository"]);
  const unknown = args.filter((a, i) => a.startsWith("--") && !known.has(a) && !known.has(args[i - 1] ?? ""));
  if (unknown.length) throw new Error(`unknown option ${unknown[0]}; usage: reference-server.ts index [--manifest PATH --repository NAME]`);
  if (manifest === undefined && repository === undefined) return undefined;
  if (!manifest || !repository) throw new Error("index: give --manifest PATH and --repository NAME together");
  const loaded = await loadManifest(manifest);
  if (!(repository in loaded.manifest.repositories)) throw new Error(`index: --repository '${repository}' is not pinned in ${manifest}`);
  return exportSourceFor(loaded, repository, cwd);
}

/** Entry point; returns the exit code for `index`, or 0 once the stdio server is serving. */
export async function main(argv: readonly string[] = process.argv.slice(2), cwd: string = process.cwd()): Promise<number> {
  const command = argv[0] ?? "serve";
  try {
    if (command === "index") {
      const { indexPath, index } = await buildIndex(cwd, { exclude: await excludeFromArgs(argv.slice(1), cwd) });
      process.stderr.write(`indexed ${index.docs.length} documents at ${index.pin} into ${indexPath}\n`);
      return 0;
    }
    if (command !== "serve") {
      process.stderr.write(`usage: reference-server.ts [serve|index [--manifest PATH --repository NAME]]\n`);
      return 2;
    }
    // HEAD, the config and the trees on its index path: one `git cat-file --batch` for the start (contract R286).
    const objects = new ObjectReader(cwd);
    let config: ReferenceConfig;
    try {
      const head = await objects.read("HEAD");
      if (head?.type !== "commit") throw new Error(`HEAD of ${cwd} is not a commit`);
      config = (await loadReferenceConfig(cwd, head.oid, objects)).config;
    } finally {
      objects.close();
    }
    await createReferenceServer(cwd, config).connect(new StdioServerTransport());
    return 0;
  } catch (err) {
    process.stderr.write(`doc-bridge reference server: ${(err as Error).message}\n`);
    return 1;
  }
}

function isEntryPoint(): boolean {
  try {
    return !!process.argv[1] && pathToFileURL(realpathSync(process.argv[1])).href === pathToFileURL(realpathSync(SELF)).href;
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  const code = await main();
  if (code !== 0) process.exit(code);
}
