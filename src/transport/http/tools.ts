import { z } from "zod";
import { readBlobs } from "../../corpus/git.ts";
import { hashExport, planExport, type ExportedFile, type ExportSource, type RunExports } from "../../export/export.ts";

/**
 * The Messages API transport's repository tools (contract R58): list, read and literal search over
 * the pinned git blobs that pass the export's public-path filter. No checkout file is opened
 * and no shell runs; the file set is exactly the one the CLI transport's export would hold
 * (same `planExport`, same `exportHash`).
 */

/** A tool as the Messages API takes it. */
export interface ToolDefinition {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
}

export interface ToolResult {
  /** Text for the model's `tool_result`. */
  content: string;
  isError: boolean;
}

/** Tools the agent loop offers and calls; `close` releases whatever they hold. */
export interface ToolSet {
  definitions: ToolDefinition[];
  call(name: string, input: Record<string, unknown>, signal: AbortSignal): Promise<ToolResult>;
  close(): Promise<void>;
}

export const REPOSITORY_LIMITS = {
  /** list_files shows at most this many paths. */
  listPaths: 200,
  /** read_file returns at most this many lines from its start line. */
  readLines: 100,
  /** search_files stops at this many matches ... */
  searchMatches: 30,
  /** ... and looks at no more than the first this-many eligible files (in path order). */
  searchFiles: 500,
} as const;

/** A matched line longer than this is cut in search results (the file itself is readable with read_file). */
const MATCH_LINE_CHARS = 300;
/** Blobs kept in memory per attempt; beyond this they are read again when needed. */
const CACHE_BYTES = 32 * 1024 * 1024;

export const REPOSITORY_TOOL_NAMES = { list: "list_files", read: "read_file", search: "search_files" } as const;

const DIRECTORY_PROPERTY = {
  type: "string",
  description: "A folder path relative to the repository root, such as src or docs/api; default: the whole repository.",
};

export const REPOSITORY_TOOL_DEFINITIONS: ToolDefinition[] = [
  {
    name: REPOSITORY_TOOL_NAMES.list,
    description: `List the repository's file paths (sorted), optionally only those under one folder. Shows at most ${REPOSITORY_LIMITS.listPaths} paths and says how many more there are.`,
    input_schema: { type: "object", properties: { directory: DIRECTORY_PROPERTY }, additionalProperties: false },
  },
  {
    name: REPOSITORY_TOOL_NAMES.read,
    description: `Read a file of the repository with line numbers: at most ${REPOSITORY_LIMITS.readLines} lines from start_line (default 1).`,
    input_schema: {
      type: "object",
      properties: {
        path: { type: "string", description: "The file path relative to the repository root, as list_files shows it." },
        start_line: { type: "integer", minimum: 1, description: "The first line to return (1-based); default 1." },
      },
      required: ["path"],
      additionalProperties: false,
    },
  },
  {
    name: REPOSITORY_TOOL_NAMES.search,
    description:
      `Search the repository's files for a literal, case-sensitive text (not a regular expression). Returns at most ${REPOSITORY_LIMITS.searchMatches} matching lines as path:line: text, ` +
      `looks at the first ${REPOSITORY_LIMITS.searchFiles} files in path order, and says when a limit was reached.`,
    input_schema: {
      type: "object",
      properties: { query: { type: "string", description: "The exact text to find." }, directory: DIRECTORY_PROPERTY },
      required: ["query"],
      additionalProperties: false,
    },
  },
];

const ListInput = z.strictObject({ directory: z.string().max(1000).optional() });
const ReadInput = z.strictObject({ path: z.string().min(1).max(1000), start_line: z.int().min(1).optional() });
const SearchInput = z.strictObject({ query: z.string().min(1).max(1000), directory: z.string().max(1000).optional() });

class ToolInputError extends Error {}
/** Thrown from a blob callback to stop reading early; never leaves this module. */
const STOP = new Error("stop reading");

function parseInput<T>(schema: z.ZodType<T>, input: unknown, tool: string): T {
  const parsed = schema.safeParse(input);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "input"}: ${i.message}`).join("; ");
    throw new ToolInputError(`invalid input for ${tool}: ${issues}`);
  }
  return parsed.data;
}

/** A folder argument as a path prefix ("" for the whole repository). */
function folder(value: string | undefined): string {
  let d = (value ?? "").trim();
  while (d.startsWith("./")) d = d.slice(2);
  d = d.replace(/\/+$/, "");
  if (d === "." || d === "") return "";
  if (d.startsWith("/")) throw new ToolInputError("paths are relative to the repository root; leave out the leading /");
  if (d.split("/").some((p) => p === ".." || p === "." || p === "")) throw new ToolInputError(`'${d}' is not a folder path inside the repository`);
  return d;
}

function filePath(value: string): string {
  let p = value.trim();
  while (p.startsWith("./")) p = p.slice(2);
  return p;
}

const under = (path: string, dir: string) => dir === "" || path.startsWith(`${dir}/`);
const scopeName = (dir: string) => (dir === "" ? "the repository" : `${dir}/`);

function lines(data: Buffer): string[] {
  const text = data.toString("utf8");
  const all = text.split("\n").map((l) => (l.endsWith("\r") ? l.slice(0, -1) : l));
  if (all.length > 0 && all[all.length - 1] === "") all.pop();
  return all;
}

export interface RepositoryTools extends ToolSet {
  /** The public files, in the export's order. */
  files: readonly ExportedFile[];
  /** The CLI transport's export hash of the same file set. */
  exportHash: string;
}

/**
 * Lists the pinned tree once and filters it exactly like the export (once per run, given the
 * run's plans). Blobs are read on demand through `git cat-file --batch` (one process per tool
 * call) and kept for the attempt.
 */
export async function openRepositoryTools(o: ExportSource, plans?: RunExports): Promise<RepositoryTools> {
  // The source goes through whole: a field copied by hand here is a filter rule the http arm misses.
  const plan = await (plans ? plans.plan(o) : planExport(o));
  // The CLI attempt's exportHash is over the bytes it writes: the same bytes, read once here.
  const exportHash = await hashExport(o.repoDir, plan.files);
  const files = [...plan.files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  const blobs = new PinnedBlobs(o.repoDir, files);
  return {
    files,
    exportHash,
    definitions: REPOSITORY_TOOL_DEFINITIONS,
    async call(name, input, signal) {
      try {
        if (name === REPOSITORY_TOOL_NAMES.list) return { content: list(files, input), isError: false };
        if (name === REPOSITORY_TOOL_NAMES.read) return { content: await read(blobs, input, signal), isError: false };
        if (name === REPOSITORY_TOOL_NAMES.search) return { content: await search(blobs, input, signal), isError: false };
        return { content: `no tool named ${name}`, isError: true };
      } catch (err) {
        if (err instanceof ToolInputError) return { content: err.message, isError: true };
        throw err;
      }
    },
    async close() {
      blobs.clear();
    },
  };
}

/** The attempt's public files (in path order) and their blobs, kept in memory up to CACHE_BYTES. */
class PinnedBlobs {
  readonly byPath: ReadonlyMap<string, ExportedFile>;
  private readonly cache = new Map<string, Buffer>();
  private cached = 0;

  constructor(
    private readonly repoDir: string,
    readonly files: readonly ExportedFile[],
  ) {
    this.byPath = new Map(files.map((f) => [f.path, f]));
  }

  /**
   * Visits `wanted` in order, from the cache or from one `git cat-file --batch` process, until
   * `visit` returns false; then the git process is killed instead of reading on.
   */
  async eachBlob(wanted: readonly ExportedFile[], signal: AbortSignal, visit: (i: number, data: Buffer) => boolean): Promise<void> {
    const { cache } = this;
    const missing = wanted.flatMap((f, i) => (cache.has(f.oid) ? [] : [i]));
    let next = 0;
    let stopped = false;
    const visitCachedBefore = (limit: number) => {
      for (; !stopped && next < limit; next++) if (!visit(next, cache.get(wanted[next]!.oid)!)) stopped = true;
    };
    try {
      await readBlobs(
        this.repoDir,
        missing.map((i) => wanted[i]!.oid),
        (k, data) => {
          if (signal.aborted) throw new Error("the tool call was stopped");
          const i = missing[k]!;
          visitCachedBefore(i);
          if (stopped) throw STOP;
          this.keep(wanted[i]!.oid, data);
          next = i + 1;
          if (!visit(i, data)) stopped = true;
          if (stopped) throw STOP;
        },
      );
    } catch (err) {
      if (err !== STOP) throw err;
    }
    visitCachedBefore(wanted.length);
  }

  /** Keeps a blob read from git while the cache has room. */
  private keep(oid: string, data: Buffer): void {
    if (!this.cache.has(oid) && this.cached + data.length <= CACHE_BYTES) {
      this.cache.set(oid, data);
      this.cached += data.length;
    }
  }

  clear(): void {
    this.cache.clear();
  }
}

/** list_files: the paths under a folder, at most REPOSITORY_LIMITS.listPaths of them, and how many more. */
function list(files: readonly ExportedFile[], input: unknown): string {
  const { directory } = parseInput(ListInput, input, REPOSITORY_TOOL_NAMES.list);
  const dir = folder(directory);
  const inScope = files.filter((f) => under(f.path, dir));
  if (inScope.length === 0) return `no files under ${scopeName(dir)}`;
  const shown = inScope.slice(0, REPOSITORY_LIMITS.listPaths).map((f) => f.path);
  const more = inScope.length - shown.length;
  const head =
    `${inScope.length} files under ${scopeName(dir)}` + (more > 0 ? `; the first ${shown.length} are shown (limit ${REPOSITORY_LIMITS.listPaths}), ${more} more: narrow with directory` : "");
  return [head, ...shown].join("\n");
}

/** read_file: a text file's lines with numbers, at most REPOSITORY_LIMITS.readLines from start_line. */
async function read(blobs: PinnedBlobs, input: unknown, signal: AbortSignal): Promise<string> {
  const args = parseInput(ReadInput, input, REPOSITORY_TOOL_NAMES.read);
  const path = filePath(args.path);
  const file = blobs.byPath.get(path);
  if (!file) {
    // The same answer for a missing and a filtered-out path: nothing tells the agent an excluded file exists.
    const dir = path.replace(/\/+$/, "");
    if (dir !== "" && blobs.files.some((f) => f.path.startsWith(`${dir}/`))) throw new ToolInputError(`${dir} is a folder; list it with ${REPOSITORY_TOOL_NAMES.list}`);
    throw new ToolInputError(`no such file: ${path}`);
  }
  let data: Buffer = Buffer.alloc(0);
  await blobs.eachBlob([file], signal, (_, blob) => ((data = blob), false));
  if (data.length !== file.size) throw new Error(`blob ${file.oid} of ${path} has ${data.length} bytes, the tree says ${file.size}`);
  if (data.includes(0)) throw new ToolInputError(`${path} is a binary file`);
  const all = lines(data);
  const start = args.start_line ?? 1;
  if (all.length === 0) return `${path} is empty`;
  if (start > all.length) throw new ToolInputError(`start_line ${start} is past the end of ${path} (${all.length} lines)`);
  const end = Math.min(all.length, start + REPOSITORY_LIMITS.readLines - 1);
  const body = all.slice(start - 1, end).map((l, i) => `${String(start + i).padStart(6)}\t${l}`);
  const tail = end < all.length ? [`(lines ${end + 1}-${all.length} follow; call ${REPOSITORY_TOOL_NAMES.read} with start_line ${end + 1})`] : [];
  return [`${path}: lines ${start}-${end} of ${all.length}`, ...body, ...tail].join("\n");
}

/** search_files: the lines holding a literal text in the first REPOSITORY_LIMITS.searchFiles files under a folder, up to REPOSITORY_LIMITS.searchMatches, with notes on the limits reached. */
async function search(blobs: PinnedBlobs, input: unknown, signal: AbortSignal): Promise<string> {
  const { query, directory } = parseInput(SearchInput, input, REPOSITORY_TOOL_NAMES.search);
  const dir = folder(directory);
  const eligible = blobs.files.filter((f) => under(f.path, dir));
  const searched = eligible.slice(0, REPOSITORY_LIMITS.searchFiles);
  const matches: string[] = [];
  let stoppedAt: string | undefined;
  await blobs.eachBlob(searched, signal, (i, blob) => {
    if (blob.includes(0)) return true;
    const path = searched[i]!.path;
    for (const [n, line] of lines(blob).entries()) {
      if (!line.includes(query)) continue;
      if (matches.length === REPOSITORY_LIMITS.searchMatches) {
        stoppedAt = path;
        return false;
      }
      const shown = line.length > MATCH_LINE_CHARS ? `${line.slice(0, MATCH_LINE_CHARS)}…` : line;
      matches.push(`${path}:${n + 1}: ${shown}`);
    }
    return true;
  });
  const notes: string[] = [];
  notes.push(`${matches.length} matching lines in ${scopeName(dir)}; searched ${searched.length} of ${eligible.length} files`);
  if (stoppedAt !== undefined) notes.push(`stopped at the limit of ${REPOSITORY_LIMITS.searchMatches} matches (in ${stoppedAt}); narrow the query or the directory`);
  if (searched.length < eligible.length)
    notes.push(
      `the limit of ${REPOSITORY_LIMITS.searchFiles} files was reached: ${eligible.length - searched.length} files after ${searched[searched.length - 1]!.path} were not searched; narrow with directory`,
    );
  return [...notes, ...matches].join("\n");
}
