import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { RefusalError, errorMessage } from "../util/errors.ts";
import { RUNNER_EXT } from "../util/paths.ts";
import { REFERENCE_SERVER } from "./bundle-hash.ts";
import { ensureReferenceBundle, PACKAGED_ENGINE } from "./reference-bundle.ts";
import { loadPublicFilter, type PublicPathOptions } from "../corpus/filter.ts";
import { lsTree, readBlobs } from "../corpus/git.ts";
import { exportSourceFor } from "../export/options.ts";
import type { LoadedManifest } from "../manifest/load.ts";
import { resolveConfigAtPin } from "./config.ts";
import { ALLOWED_DOC_BRIDGE_TOOLS, cliToolName } from "../terms/tool-names.ts";
import { engineTransport } from "./engine-client.ts";
import { enginePrivileges, prepareEngineSandbox, type EnginePrivileges, type EngineSandbox } from "./engine-sandbox.ts";

export { resolveConfigAtPin, type ConfigResolution } from "./config.ts";

/**
 * The bundled reference engine as a command: from the installed package, this Node and the
 * bundle its build made of the compiled reference server (PACKAGED_ENGINE); from a clone, this
 * Node and the server bundled from today's sources into one file (src/mcp/reference-bundle.ts,
 * made here when the sources changed), so that no engine pays tsx's start or loads a compiled
 * tree module by module.
 */
export function referenceEngineCommand(): string[] {
  if (RUNNER_EXT !== ".ts") return [process.execPath, PACKAGED_ENGINE];
  return [process.execPath, ensureReferenceBundle()];
}

/**
 * The reference engine's index command as a person runs it in a checkout: the same server, but
 * named by a path that stays valid (the bundle's folder changes with every source change). From
 * a clone, the source through tsx's loader resolved from this file (a bare `--import tsx` would be
 * resolved from the checkout, which has no tsx); from the package, the compiled server.
 */
export function referenceIndexCommand(): string[] {
  if (RUNNER_EXT !== ".ts") return [process.execPath, REFERENCE_SERVER, "index"];
  const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
  return [process.execPath, "--import", tsxLoader, REFERENCE_SERVER, "index"];
}

export interface ProbeOptions {
  /** Executable and arguments of the doc-bridge engine (never a shell string). */
  command: readonly string[];
  /** The checkout; the engine runs with it as cwd, as the real server expects. */
  cwd: string;
  /** The commit the index must have been built at. */
  pin: string;
  timeoutMs?: number;
  /** What the engine must not serve: the repository's answer keys (see forbiddenContent). */
  forbidden?: Forbidden;
}

/** Answer-key paths `doc.get` must refuse, and one distinctive line per key file that `doc.search` must not return. */
export interface Forbidden {
  paths: string[];
  lines: Array<{ path: string; line: string }>;
}

/** Bounds on the proof, so a corpus with thousands of key files cannot stall the preflight. */
const MAX_FORBIDDEN_PATHS = 50;
const MAX_FORBIDDEN_LINES = 20;
/** A leaked line is recognised by its start: the reference snippet begins at most 60 characters before the first hit. */
const LEAK_PREFIX_CHARS = 40;

const flat = (s: string) => s.replace(/\s+/g, " ").trim().toLowerCase();

/** The longest line of a key file, the one least likely to occur in a legitimate document. */
function distinctiveLine(text: string): string | undefined {
  const lines = text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l.length >= 4)
    .sort((a, b) => b.length - a.length);
  return lines[0]?.slice(0, 500);
}

/**
 * What the doc-bridge engine must not serve at the pin: every path the export leaves out as an
 * answer key or as the manifest (by name or by content), and a distinctive line of each key
 * file, so that a copy under another name or inside another document is caught by search.
 */
export async function forbiddenContent(dir: string, pin: string, exclude: PublicPathOptions): Promise<Forbidden> {
  const entries = await lsTree(dir, pin);
  const filter = await loadPublicFilter(dir, entries, exclude);
  const keyed = entries.filter((e) => {
    const reason = filter.reason(e);
    return reason === "answer-key" || reason === "manifest";
  });
  const paths = keyed.map((e) => e.path).slice(0, MAX_FORBIDDEN_PATHS);
  const seen = new Set<string>();
  const files = keyed.filter((e) => e.type === "blob" && (e.mode === "100644" || e.mode === "100755") && !seen.has(e.oid) && seen.add(e.oid)).slice(0, MAX_FORBIDDEN_LINES);
  const lines: Forbidden["lines"] = [];
  await readBlobs(
    dir,
    files.map((f) => f.oid),
    (i, data) => {
      const line = distinctiveLine(data.toString("utf8"));
      if (line !== undefined) lines.push({ path: files[i]!.path, line });
    },
  );
  return { paths, lines };
}

/** Every string in a tool result (structured content and text blocks, JSON inside text decoded too). */
function strings(value: unknown, out: string[] = []): string[] {
  if (typeof value === "string") {
    out.push(value);
    if (/^\s*[[{]/.test(value)) {
      try {
        strings(JSON.parse(value), out);
      } catch {
        // plain text that happens to start with a bracket
      }
    }
  } else if (Array.isArray(value)) for (const v of value) strings(v, out);
  else if (value && typeof value === "object") for (const v of Object.values(value)) strings(v, out);
  return out;
}

/**
 * Proves on the live engine that it serves none of `forbidden`: `doc.get` of each path fails and
 * `doc.search` for each distinctive line returns neither the line nor a key's path. Messages name
 * the key's path only, never its content.
 */
async function proveForbidden(client: Client, forbidden: Forbidden, timeoutMs: number, bounded: <T>(p: Promise<T>) => Promise<T>): Promise<void> {
  for (const path of forbidden.paths) {
    const res: Record<string, unknown> = await bounded(client.callTool({ name: "doc.get", arguments: { path } }, undefined, { timeout: timeoutMs }));
    if (!res.isError) throw new Error(`doc.get serves '${path}', which every export leaves out (an answer key or the manifest)`);
  }
  const keyPaths = new Set(forbidden.paths);
  for (const { path, line } of forbidden.lines) {
    const res: Record<string, unknown> = await bounded(client.callTool({ name: "doc.search", arguments: { query: line, limit: 20 } }, undefined, { timeout: timeoutMs }));
    if (res.isError) continue;
    const found = strings([res.structuredContent, res.content]);
    const needle = flat(line).slice(0, LEAK_PREFIX_CHARS);
    if (found.some((s) => keyPaths.has(s)) || found.some((s) => flat(s).includes(needle))) {
      throw new Error(`doc.search for a line of '${path}' returns it, though every export leaves that file out (an answer key or the manifest)`);
    }
  }
}

export interface ServerInfo {
  name: string;
  version: string;
}

export interface ProbeResult {
  /** Tool names in the server's `tools/list`, in its order. */
  tools: string[];
  serverInfo: ServerInfo | undefined;
  /** `engineRevision` from the doc.search result, when the engine reports one. */
  engineRevision: string | undefined;
  /** Who the engine ran as. */
  privileges: EnginePrivileges;
}

const PROBE_QUERY = "documentation";
const STDERR_TAIL = 800;

/** Reads a field from a tool result: `structuredContent`, else the first text block as JSON. */
function resultField(res: Record<string, unknown>, key: string): unknown {
  const sc = res.structuredContent;
  if (sc && typeof sc === "object" && key in sc) return (sc as Record<string, unknown>)[key];
  const first = Array.isArray(res.content) ? (res.content[0] as { type?: string; text?: unknown } | undefined) : undefined;
  if (first?.type === "text" && typeof first.text === "string") {
    try {
      const parsed: unknown = JSON.parse(first.text);
      if (parsed && typeof parsed === "object") return (parsed as Record<string, unknown>)[key];
    } catch {
      return undefined;
    }
  }
  return undefined;
}

function resultText(res: Record<string, unknown>): string {
  const blocks = Array.isArray(res.content) ? (res.content as { type?: string; text?: unknown }[]) : [];
  return blocks
    .map((b) => (b.type === "text" && typeof b.text === "string" ? b.text : ""))
    .join(" ")
    .slice(0, 500);
}

/** The engine command ended before it answered MCP's initialize: it did not start (its exit and stderr say why). */
export class EngineDidNotStartError extends RefusalError {}

/** The first stderr line that names an error (Node prints its loader's frame first), else the first line. */
function firstErrorLine(stderr: string): string {
  const lines = stderr
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  return (lines.find((l) => /error/i.test(l)) ?? lines[0] ?? "").slice(0, 300);
}

/**
 * Starts the engine in the checkout over MCP stdio, lists its tools and calls doc.search once.
 * Refuses (RefusalError naming the checkout) when the engine does not start, doc.search errors,
 * or the index is not fresh at `pin` (contract R15).
 */
export async function probeServer(opts: ProbeOptions): Promise<ProbeResult> {
  const timeoutMs = opts.timeoutMs ?? 20_000;
  if (!opts.command[0]) throw new RefusalError(`doc-bridge probe in ${opts.cwd}: the engine command is empty`);
  let sandbox: EngineSandbox;
  try {
    sandbox = await prepareEngineSandbox({ command: opts.command, checkout: opts.cwd, pin: opts.pin });
  } catch (err) {
    throw new RefusalError(`doc-bridge probe in ${opts.cwd}: cannot prepare the engine's sandbox: ${errorMessage(err)}`);
  }
  const { transport, stderrTail } = engineTransport(sandbox, STDERR_TAIL);
  const client = new Client({ name: "study-runner-preflight", version: "1.0.0" });
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
  });
  const bounded = <T>(p: Promise<T>) => Promise.race([p, deadline]);

  let initialized = false;
  try {
    await bounded(client.connect(transport, { timeout: timeoutMs }));
    initialized = true;
    const tools: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await bounded(client.listTools(cursor ? { cursor } : undefined, { timeout: timeoutMs }));
      tools.push(...page.tools.map((t) => t.name));
      cursor = page.nextCursor;
    } while (cursor);
    if (!tools.includes("doc.search")) throw new Error(`the server does not list doc.search (tools: ${tools.join(", ") || "none"})`);

    const res: Record<string, unknown> = await bounded(client.callTool({ name: "doc.search", arguments: { query: PROBE_QUERY, limit: 1 } }, undefined, { timeout: timeoutMs }));
    if (res.isError) throw new Error(`doc.search returned an error: ${resultText(res)}`);
    const indexPin = resultField(res, "pin");
    if (typeof indexPin !== "string") throw new Error("doc.search does not report the pin its index was built at, so freshness cannot be checked");
    if (indexPin !== opts.pin) throw new Error(`the index is not fresh at the pin: built at ${indexPin}, the pin is ${opts.pin}`);
    if (opts.forbidden) await proveForbidden(client, opts.forbidden, timeoutMs, bounded);
    const revision = resultField(res, "engineRevision");
    const info = client.getServerVersion();
    return {
      tools,
      serverInfo: info ? { name: info.name, version: info.version } : undefined,
      engineRevision: typeof revision === "string" ? revision : undefined,
      privileges: sandbox.privileges,
    };
  } catch (err) {
    // An engine that ended before it answered MCP's initialize never started: its exit and its own
    // first words say why (a wrong path, a missing module), not the index.
    const exit = transport.exit;
    if (!initialized && exit) {
      const ended = exit.code !== null ? `exited ${exit.code}` : `was ended by ${exit.signal}`;
      const line = firstErrorLine(stderrTail());
      throw new EngineDidNotStartError(
        `doc-bridge probe in ${opts.cwd}: the engine command ${ended} before it answered MCP's initialize${line ? `; its stderr: ${line}` : ", writing nothing to stderr"}`,
      );
    }
    const tail = stderrTail().trim().replace(/\s+/g, " ");
    throw new RefusalError(`doc-bridge probe in ${opts.cwd}: ${errorMessage(err)}${tail ? ` (server stderr: ${tail})` : ""}`);
  } finally {
    clearTimeout(timer);
    // close() ends stdin, then SIGTERM, then SIGKILL: the engine never outlives the probe.
    await client.close().catch(() => {});
    await sandbox.remove().catch(() => {});
  }
}

export interface CheckoutToProbe {
  repository: string;
  dir: string;
  pin: string;
}

export interface DocBridgePreflight {
  /** The server's tool names (sorted), the same for every checkout. */
  tools: string[];
  /** Server names of the allowed tools (doc.search, doc.get, handoff.resolve). */
  allowedTools: string[];
  /** Server names of every other listed tool. */
  deniedTools: string[];
  /** The same two lists as Claude Code names them, for --allowedTools and --disallowedTools. */
  allowedCliTools: string[];
  deniedCliTools: string[];
  /** Who the engine runs as (the same for every checkout). */
  privileges: EnginePrivileges;
  checkouts: Array<
    CheckoutToProbe & {
      configFile: string;
      serverInfo: ServerInfo | undefined;
      engineRevision: string | undefined /** Answer-key and manifest paths proven unserved (doc.get and doc.search). */;
      forbiddenPathsChecked: number;
    }
  >;
}

function sorted(names: Iterable<string>): string[] {
  return [...names].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * The doc-bridge preflight (contract R14 to R17): for every checkout the config resolves in the
 * server's order and the engine answers doc.search from an index fresh at the pin; all
 * checkouts list the same tools; the deny list is every listed tool but the allowed three.
 */
export async function preflightDocBridge(opts: {
  command: readonly string[];
  checkouts: readonly CheckoutToProbe[];
  timeoutMs?: number;
  /** The manifest: with it, the engine must also prove it serves none of each checkout's answer keys. */
  loaded?: Pick<LoadedManifest, "path" | "manifest" | "bytes">;
}): Promise<DocBridgePreflight> {
  if (opts.checkouts.length === 0) throw new RefusalError("doc-bridge preflight: no checkout to probe");
  const results: DocBridgePreflight["checkouts"] = [];
  const toolSets: Array<{ checkout: CheckoutToProbe; tools: string[] }> = [];
  for (const checkout of opts.checkouts) {
    const name = `checkout ${checkout.repository} (${checkout.dir})`;
    const config = await resolveConfigAtPin(checkout.dir, checkout.pin);
    if (!config.ok) throw new RefusalError(`doc-bridge preflight refused for ${name}: ${config.reason}`);
    let probe: ProbeResult;
    const forbidden = opts.loaded ? await forbiddenContent(checkout.dir, checkout.pin, await exportSourceFor(opts.loaded, checkout.repository, checkout.dir)) : undefined;
    try {
      probe = await probeServer({ command: opts.command, cwd: checkout.dir, pin: checkout.pin, timeoutMs: opts.timeoutMs, forbidden });
    } catch (err) {
      const fix =
        opts.loaded && /every export leaves/.test(errorMessage(err))
          ? `; rebuild its index so it leaves out what the export leaves out (the reference engine: \`reference-server.ts index --manifest ${opts.loaded.path} --repository ${checkout.repository}\` in the checkout)`
          : "";
      const Refusal = err instanceof EngineDidNotStartError ? EngineDidNotStartError : RefusalError;
      throw new Refusal(`doc-bridge preflight refused for ${name}: ${errorMessage(err)}${fix}`);
    }
    const dupes = probe.tools.filter((t, i) => probe.tools.indexOf(t) !== i);
    if (dupes.length) throw new RefusalError(`doc-bridge preflight refused for ${name}: tools/list repeats ${sorted(new Set(dupes)).join(", ")}`);
    // Two server names that Claude Code maps to one name (a.b and a_b) would make the init tool set ambiguous.
    const byCli = new Map<string, string>();
    for (const t of probe.tools) {
      const other = byCli.get(cliToolName(t));
      if (other) throw new RefusalError(`doc-bridge preflight refused for ${name}: tools ${other} and ${t} both become ${cliToolName(t)}`);
      byCli.set(cliToolName(t), t);
    }
    const missing = ALLOWED_DOC_BRIDGE_TOOLS.filter((t) => !probe.tools.includes(t));
    if (missing.length) throw new RefusalError(`doc-bridge preflight refused for ${name}: the server does not list ${missing.join(", ")}`);
    toolSets.push({ checkout, tools: probe.tools });
    results.push({ ...checkout, configFile: config.file, serverInfo: probe.serverInfo, engineRevision: probe.engineRevision, forbiddenPathsChecked: forbidden?.paths.length ?? 0 });
  }

  const first = toolSets[0]!;
  for (const other of toolSets.slice(1)) {
    const onlyFirst = first.tools.filter((t) => !other.tools.includes(t));
    const onlyOther = other.tools.filter((t) => !first.tools.includes(t));
    if (onlyFirst.length || onlyOther.length) {
      const a = first.checkout;
      const b = other.checkout;
      throw new RefusalError(
        `doc-bridge preflight refused: checkouts ${a.repository} (${a.dir}) and ${b.repository} (${b.dir}) list different tools; ` +
          `only in ${a.repository}: ${sorted(onlyFirst).join(", ") || "none"}; only in ${b.repository}: ${sorted(onlyOther).join(", ") || "none"}`,
      );
    }
  }

  const tools = sorted(first.tools);
  const allowedTools = [...ALLOWED_DOC_BRIDGE_TOOLS] as string[];
  const deniedTools = tools.filter((t) => !allowedTools.includes(t));
  return {
    tools,
    allowedTools,
    deniedTools,
    allowedCliTools: allowedTools.map(cliToolName),
    deniedCliTools: deniedTools.map(cliToolName),
    privileges: enginePrivileges(),
    checkouts: results,
  };
}
