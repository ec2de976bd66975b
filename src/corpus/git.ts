import { runChild, startChild } from "../process/child.ts";

/**
 * Git reads at a pin. Every call is an argument array (never a shell string) with a
 * fixed environment, so a user's git config cannot change what the runner sees.
 */
const GIT_ENV = {
  GIT_CONFIG_NOSYSTEM: "1",
  GIT_TERMINAL_PROMPT: "0",
  LC_ALL: "C",
};

/** A local git read that takes longer than this is stuck (a lock, a hung filesystem). */
const GIT_TIMEOUT_MS = 5 * 60_000;

export async function git(cwd: string, args: readonly string[], opts: { maxBuffer?: number } = {}): Promise<Buffer> {
  const { stdout } = await runChild("git", ["-c", "core.quotepath=off", ...args], {
    cwd,
    env: { ...process.env, ...GIT_ENV },
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

/** True when the commit exists in the repository. */
export async function hasCommit(cwd: string, pin: string): Promise<boolean> {
  try {
    await git(cwd, ["cat-file", "-e", `${pin}^{commit}`]);
    return true;
  } catch {
    return false;
  }
}

/**
 * Reads many blobs through one `git cat-file --batch` process (never one process per
 * file). Calls `onBlob` in request order with each blob's bytes; only the blob being
 * handed over is held in memory. The process is killed if reading stops early.
 */
export async function readBlobs(cwd: string, oids: readonly string[], onBlob: (index: number, data: Buffer) => void | Promise<void>): Promise<void> {
  if (oids.length === 0) return;
  const child = startChild("git", ["cat-file", "--batch"], { cwd, env: { ...process.env, ...GIT_ENV } });
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
          need = Number(m[3]) + 1;
        }
        if (have < need) break;
        const buf = joined();
        const data = Buffer.from(buf.subarray(0, need - 1));
        keep(buf.subarray(need));
        need = -1;
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
