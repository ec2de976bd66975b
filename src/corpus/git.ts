import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { ChildProcessWithoutNullStreams } from "node:child_process";
import { runChild, startChild } from "../process/child.ts";

/**
 * Git reads at a pin. Every call is an argument array (never a shell string) with the
 * environment `gitEnv` builds, so nothing but the commit's own objects decides what the
 * runner sees (contract R117).
 */

/**
 * What every git command of the runner sees instead of the caller's git variables: no
 * replace objects (`refs/replace/*` would swap any blob, tree or commit for another), no
 * grafts (`info/grafts` rewrites parents), no system, user or XDG config (an alias, a
 * `core.attributesFile`, a filter driver, `safe.directory`), no system attributes. Every
 * inherited `GIT_*` variable is dropped first: `GIT_DIR`, `GIT_OBJECT_DIRECTORY`,
 * `GIT_ALTERNATE_OBJECT_DIRECTORIES`, `GIT_CONFIG_COUNT`, `GIT_REPLACE_REF_BASE` and the like
 * would each point git at other objects or other settings. Alternates of the checkout itself are
 * refused by `checkPin`, and every blob read is checked against its id (`readBlobs`).
 */
export function gitEnv(base: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(base)) if (v !== undefined && !k.startsWith("GIT_")) env[k] = v;
  // `safe.directory` only says which owner's repositories git agrees to open (the doc-bridge
  // engine's sandbox sets it for its clone, contract R117 leaves it): it is carried over from the
  // caller's GIT_CONFIG_* entries, and nothing else of them.
  const safe: string[] = [];
  for (let i = 0; i < Number(base.GIT_CONFIG_COUNT ?? 0) && i < 64; i++) {
    const value = base[`GIT_CONFIG_VALUE_${i}`];
    if (base[`GIT_CONFIG_KEY_${i}`]?.toLowerCase() === "safe.directory" && value !== undefined) safe.push(value);
  }
  if (safe.length) {
    env.GIT_CONFIG_COUNT = String(safe.length);
    safe.forEach((value, i) => {
      env[`GIT_CONFIG_KEY_${i}`] = "safe.directory";
      env[`GIT_CONFIG_VALUE_${i}`] = value;
    });
  }
  return Object.assign(env, {
    GIT_NO_REPLACE_OBJECTS: "1",
    GIT_GRAFT_FILE: "/dev/null",
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_ATTR_NOSYSTEM: "1",
    GIT_TERMINAL_PROMPT: "0",
    LC_ALL: "C",
  });
}

/**
 * Written into `info/attributes` of a clone the runner checks out (the doc-bridge engine's view):
 * that file takes precedence over every `.gitattributes` in the tree, so no end-of-line
 * conversion, `ident` expansion, filter or working-tree encoding changes a file's bytes.
 */
export const NO_ATTRIBUTES = "* -text -eol -ident -filter -working-tree-encoding -export-subst\n";

/** A local git read that takes longer than this is stuck (a lock, a hung filesystem). */
const GIT_TIMEOUT_MS = 5 * 60_000;

export async function git(cwd: string, args: readonly string[], opts: { maxBuffer?: number } = {}): Promise<Buffer> {
  const { stdout } = await runChild("git", ["-c", "core.quotepath=off", ...args], {
    cwd,
    env: gitEnv(),
    timeoutMs: GIT_TIMEOUT_MS,
    maxOutputBytes: opts.maxBuffer ?? 256 * 1024 * 1024,
  });
  return stdout;
}

export async function gitHead(cwd: string): Promise<string> {
  return (await git(cwd, ["rev-parse", "--verify", "HEAD"])).toString("utf8").trim();
}

/** The top of the work tree that holds `cwd`, or undefined when it is not in one. */
export async function gitTopLevel(cwd: string): Promise<string | undefined> {
  try {
    return (await git(cwd, ["rev-parse", "--show-toplevel"])).toString("utf8").trim();
  } catch {
    return undefined;
  }
}

/** Porcelain status lines (tracked changes and untracked files that are not ignored). */
export async function gitStatus(cwd: string): Promise<string[]> {
  const out = (await git(cwd, ["status", "--porcelain=v1", "-z", "--untracked-files=all"])).toString("utf8");
  return out.split("\0").filter(Boolean);
}

export interface TreeEntry {
  /** Octal mode as git prints it: 100644, 100755, 120000 (symlink), 160000 (submodule), … */
  mode: string;
  type: "blob" | "tree" | "commit";
  oid: string;
  /** Blob size in bytes; undefined for submodules. */
  size: number | undefined;
  /** Path as raw bytes decoded as UTF-8 (git paths are bytes; see `rawPath`). */
  path: string;
  rawPath: Buffer;
}

/** `git ls-tree -r -z --long <pin>`: every entry of the commit's tree, recursively (or only the top level). */
export async function lsTree(cwd: string, pin: string, opts: { recursive?: boolean } = {}): Promise<TreeEntry[]> {
  const out = await git(cwd, ["ls-tree", ...(opts.recursive === false ? [] : ["-r"]), "-z", "--long", "--full-tree", pin]);
  const entries: TreeEntry[] = [];
  let start = 0;
  while (start < out.length) {
    const end = out.indexOf(0, start);
    const record = out.subarray(start, end === -1 ? out.length : end);
    start = end === -1 ? out.length : end + 1;
    if (record.length === 0) continue;
    const tab = record.indexOf(0x09);
    const meta = record.subarray(0, tab).toString("latin1").trim().split(/\s+/);
    const rawPath = Buffer.from(record.subarray(tab + 1));
    const [mode, type, oid, size] = meta as [string, TreeEntry["type"], string, string];
    entries.push({ mode, type, oid, size: size === "-" ? undefined : Number(size), path: rawPath.toString("utf8"), rawPath });
  }
  return entries;
}

/** A full lowercase hex object id: 40 digits (SHA-1 repositories). */
export const PIN_RE = /^[0-9a-f]{40}$/;

/**
 * The one pin rule (contract R124): a 40-hex id that names a commit object in the checkout, read
 * from the checkout's own object store. Returns what is wrong with it (a sentence naming the fix),
 * or undefined when it is a pin. An annotated tag is refused even though git would peel it: the
 * pin is what the ledger records, and it must name the commit whose tree is exported.
 */
export async function checkPin(cwd: string, pin: string): Promise<string | undefined> {
  if (!PIN_RE.test(pin)) return `pin '${pin}' must be a full 40-character lowercase hex commit id (get it with \`git rev-parse HEAD\` in the checkout)`;
  const alternates = await alternatesFile(cwd);
  if (alternates !== undefined) {
    return `the checkout borrows objects from other repositories through ${alternates}; the export reads the checkout's own objects only: run \`git repack -a -d\` there and remove that file`;
  }
  let type: string;
  try {
    type = (await git(cwd, ["cat-file", "-t", pin])).toString("utf8").trim();
  } catch {
    return `commit ${pin} is not in the repository at ${cwd}; fetch it first`;
  }
  if (type === "commit") return undefined;
  if (type === "tag") {
    const peeled = await git(cwd, ["rev-parse", "--verify", "--quiet", `${pin}^{commit}`]).then(
      (b) => b.toString("utf8").trim(),
      () => undefined,
    );
    return `pin ${pin} is an annotated tag, not a commit; pin the commit it points to${peeled ? ` (${peeled})` : ""}`;
  }
  return `pin ${pin} names a ${type} object, not a commit; pin a commit id (\`git rev-parse HEAD\` in the checkout)`;
}

/** The checkout's `objects/info/alternates` when it lists another object store, else undefined. */
async function alternatesFile(cwd: string): Promise<string | undefined> {
  let common: string;
  try {
    common = (await git(cwd, ["rev-parse", "--path-format=absolute", "--git-common-dir"])).toString("utf8").trim();
  } catch {
    return undefined; // not a repository: the commit lookup says so
  }
  const file = join(common, "objects", "info", "alternates");
  const text = await readFile(file, "utf8").catch(() => "");
  return text.split("\n").some((l) => l.trim() !== "" && !l.startsWith("#")) ? file : undefined;
}

/** Git's id of `data` as a blob, in the object format whose ids have `oid`'s length. */
export function blobId(data: Buffer, oid: string): string {
  return objectId("blob", data, oid);
}

/** Git's id of an object of `type` holding `data`, in the object format whose ids have `oid`'s length. */
function objectId(type: string, data: Buffer, oid: string): string {
  return createHash(oid.length === 64 ? "sha256" : "sha1")
    .update(`${type} ${data.length}\0`)
    .update(data)
    .digest("hex");
}

export interface GitObject {
  oid: string;
  type: "blob" | "tree" | "commit" | "tag";
  data: Buffer;
}

/**
 * One `git cat-file --batch` process asked one object at a time, for a caller whose next question
 * depends on the last answer (a tree, then an entry of it): what would otherwise be one git
 * process per question. Every object's bytes are checked to hash to its id, whatever its type.
 * `close` ends the process; a reader that is not closed is ended with this process's stdin.
 */
export class ObjectReader {
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly waiting: { resolve: (o: GitObject | undefined) => void; reject: (e: Error) => void }[] = [];
  private chunks: Buffer[] = [];
  private have = 0;
  private failed: Error | undefined;
  private stderr = "";

  constructor(cwd: string) {
    this.child = startChild("git", ["cat-file", "--batch"], { cwd, env: gitEnv() });
    this.child.stdin.on("error", () => {});
    this.child.stderr.on("data", (d: Buffer) => (this.stderr = (this.stderr + d.toString("utf8")).slice(-2000)));
    this.child.stdout.on("data", (d: Buffer) => {
      this.chunks.push(d);
      this.have += d.length;
      this.answer();
    });
    this.child.on("error", (err) => this.fail(err));
    this.child.on("close", (code) => this.fail(new Error(`git cat-file --batch exited ${code}: ${this.stderr.trim()}`)));
  }

  /** The object `name` (an id, `HEAD`, `<pin>^{tree}`) names, or undefined when it names none. */
  read(name: string): Promise<GitObject | undefined> {
    if (/[\n\r\0]/.test(name)) return Promise.reject(new Error(`git cat-file: refusing the object name ${JSON.stringify(name)}`));
    if (this.failed) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.child.stdin.write(`${name}\n`);
    });
  }

  close(): void {
    this.child.stdin.end();
    if (this.waiting.length === 0) return;
    this.child.kill();
  }

  private fail(err: Error): void {
    this.failed ??= err;
    for (const w of this.waiting.splice(0)) w.reject(this.failed);
  }

  /** Hands out every whole answer the output holds, in request order. */
  private answer(): void {
    for (;;) {
      const buf = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.have);
      this.chunks = [buf];
      const nl = buf.indexOf(0x0a);
      if (nl < 0 || this.waiting.length === 0) return;
      const header = buf.subarray(0, nl).toString("latin1");
      const m = /^([0-9a-f]{40}|[0-9a-f]{64}) (blob|tree|commit|tag) (\d+)$/.exec(header);
      if (!m) {
        if (!/ (missing|ambiguous)$/.test(header)) return this.fail(new Error(`git cat-file: unexpected answer ${JSON.stringify(header)}`));
        this.take(nl + 1);
        this.waiting.shift()!.resolve(undefined);
        continue;
      }
      const size = Number(m[3]);
      if (buf.length < nl + 1 + size + 1) return;
      const data = Buffer.from(buf.subarray(nl + 1, nl + 1 + size));
      this.take(nl + 1 + size + 1);
      const waiter = this.waiting.shift()!;
      const oid = m[1]!;
      if (objectId(m[2]!, data, oid) !== oid)
        waiter.reject(new Error(`git cat-file: the bytes read for ${m[2]} ${oid} do not hash to its id; the repository's object store is corrupt or was tampered with`));
      else waiter.resolve({ oid, type: m[2] as GitObject["type"], data });
    }
  }

  private take(bytes: number): void {
    const rest = this.chunks[0]!.subarray(bytes);
    this.chunks = rest.length ? [rest] : [];
    this.have = rest.length;
  }
}

/**
 * The entries of a tree object's bytes, as `lsTree` gives them without `-r` (no sizes: a tree
 * names its entries' ids, not their sizes). `oid` is the tree's own id (its length says the format).
 */
export function treeEntries(data: Buffer, oid: string): TreeEntry[] {
  const idBytes = oid.length / 2;
  const entries: TreeEntry[] = [];
  let at = 0;
  while (at < data.length) {
    const space = data.indexOf(0x20, at);
    const nul = data.indexOf(0, space + 1);
    if (space < 0 || nul < 0 || nul + 1 + idBytes > data.length) throw new Error(`git tree ${oid}: malformed entry at byte ${at}`);
    const rawMode = data.subarray(at, space).toString("latin1");
    const mode = rawMode.padStart(6, "0");
    const rawPath = Buffer.from(data.subarray(space + 1, nul));
    const type: TreeEntry["type"] = mode === "040000" ? "tree" : mode === "160000" ? "commit" : "blob";
    entries.push({ mode, type, oid: data.subarray(nul + 1, nul + 1 + idBytes).toString("hex"), size: undefined, path: rawPath.toString("utf8"), rawPath });
    at = nul + 1 + idBytes;
  }
  return entries;
}

/**
 * Reads many blobs through one `git cat-file --batch` process (never one process per
 * file). Calls `onBlob` in request order with each blob's bytes, each checked to hash to the
 * id asked for; only the blob being handed over is held in memory. The process is killed if reading stops early.
 */
export async function readBlobs(cwd: string, oids: readonly string[], onBlob: (index: number, data: Buffer) => void | Promise<void>): Promise<void> {
  if (oids.length === 0) return;
  const child = startChild("git", ["cat-file", "--batch"], { cwd, env: gitEnv() });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => resolve(code));
  });
  // A rejection seen only after an early throw below must not become an unhandled one.
  exited.catch(() => {});
  child.stdin.on("error", () => {});
  child.stdin.end(oids.join("\n") + "\n");

  // Unconsumed output kept as a list of chunks and joined once per blob: concatenating on
  // every chunk would copy a large blob over and over (quadratic in its size).
  let chunks: Buffer[] = [];
  let have = 0;
  const joined = (): Buffer => {
    const all = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, have);
    chunks = [all];
    return all;
  };
  const keep = (rest: Buffer): void => {
    chunks = rest.length ? [rest] : [];
    have = rest.length;
  };
  let index = 0;
  let need = -1; // bytes of the current blob's body (+1 for its trailing LF), -1 while reading a header
  try {
    for await (const chunk of child.stdout as AsyncIterable<Buffer>) {
      chunks.push(chunk);
      have += chunk.length;
      for (;;) {
        if (need < 0) {
          if (have === 0) break;
          const buf = joined();
          const nl = buf.indexOf(0x0a);
          if (nl < 0) break;
          const header = buf.subarray(0, nl).toString("latin1");
          keep(buf.subarray(nl + 1));
          const m = /^([0-9a-f]+) (\S+) (\d+)$/.exec(header);
          if (!m) throw new Error(`git cat-file: object ${oids[index]} is not readable (${header})`);
          if (m[2] !== "blob") throw new Error(`git cat-file: object ${oids[index]} is a ${m[2]}, not a blob`);
          need = Number(m[3]) + 1;
        }
        if (have < need) break;
        const buf = joined();
        const data = Buffer.from(buf.subarray(0, need - 1));
        keep(buf.subarray(need));
        need = -1;
        // The bytes must be the object the tree names, whichever store git found them in.
        const oid = oids[index]!;
        if (blobId(data, oid) !== oid) throw new Error(`git cat-file: the bytes read for blob ${oid} do not hash to its id; the repository's object store is corrupt or was tampered with`);
        await onBlob(index++, data);
      }
    }
  } catch (err) {
    if (child.exitCode === null && child.signalCode === null) child.kill();
    throw err;
  }
  const code = await exited;
  if (code !== 0 || index !== oids.length) {
    throw new Error(`git cat-file --batch exited ${code} after ${index} of ${oids.length} blobs: ${stderr.trim()}`);
  }
}
