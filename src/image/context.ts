import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { posix } from "node:path";
import { pipeline } from "node:stream/promises";
import { buffer as readAll } from "node:stream/consumers";
import tar from "tar-stream";

/**
 * An image as data: what goes where, owned by whom, run how. A spec becomes a
 * `FROM scratch` build context (a tar) with no registry, no RUN step and no host state
 * beyond the listed files, so the same inputs always give the same bytes.
 */
export interface ImageFile {
  /** Absolute path inside the image. */
  path: string;
  mode: number;
  /** A host file (read at pack time) or literal content. */
  source: { hostPath: string } | { content: string | Buffer };
}

export interface ImageDir {
  /** Absolute path inside the image. */
  path: string;
  mode: number;
  /** Owned by the image's `user` instead of root; must stay empty in the spec. */
  userOwned?: boolean;
}

export interface ImageSpec {
  /** `name:tag` the build is tagged with. */
  tag: string;
  files: ImageFile[];
  dirs: ImageDir[];
  /** `uid:gid` the container runs as and `userOwned` dirs are chowned to. */
  user: string;
  env: Record<string, string>;
  entrypoint: string[];
  workdir?: string;
  /** Written into the Dockerfile, so they are part of the context digest. */
  labels: Record<string, string>;
}

/** Fixed tar metadata: the digest must not depend on who packed the context or when. */
const OWNER = { uid: 0, gid: 0, uname: "root", gname: "root" } as const;
const EPOCH = new Date(0);

function assertImagePath(path: string, what: string): void {
  if (!path.startsWith("/") || posix.normalize(path) !== path || path === "/" || path.endsWith("/")) {
    throw new Error(`${what} path ${JSON.stringify(path)} must be absolute and normalised`);
  }
}

function quote(value: string, what: string): string {
  if (/[\n\r]/.test(value)) throw new Error(`${what} ${JSON.stringify(value)} must be one line`);
  return JSON.stringify(value);
}

/** The Dockerfile for a spec; keys are sorted so the text depends only on the spec's content. */
export function renderDockerfile(spec: ImageSpec): string {
  const lines = ["FROM scratch", "COPY rootfs/ /"];
  for (const dir of [...spec.dirs].filter((d) => d.userOwned).sort((a, b) => cmp(a.path, b.path))) {
    // COPY ignores tar ownership (everything lands as 0:0); --chown is the only way to give
    // a directory to the agent user without a RUN step, which a scratch image cannot run.
    lines.push(`COPY --chown=${spec.user} owned${dir.path}/ ${dir.path}/`);
  }
  // One ENV and one LABEL instruction: each instruction is an image layer of its own.
  const env = Object.entries(spec.env).sort(([a], [b]) => cmp(a, b));
  for (const [key] of env) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw new Error(`ENV name ${JSON.stringify(key)} is not a variable name`);
  }
  if (env.length > 0) lines.push(`ENV ${env.map(([k, v]) => `${k}=${quote(v, "ENV value")}`).join(" ")}`);
  const labels = Object.entries(spec.labels).sort(([a], [b]) => cmp(a, b));
  if (labels.length > 0) lines.push(`LABEL ${labels.map(([k, v]) => `${quote(k, "LABEL key")}=${quote(v, "LABEL value")}`).join(" ")}`);
  if (spec.workdir !== undefined) lines.push(`WORKDIR ${spec.workdir}`);
  lines.push(`USER ${spec.user}`);
  lines.push(`ENTRYPOINT ${JSON.stringify(spec.entrypoint)}`);
  return `${lines.join("\n")}\n`;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

type Entry = { name: string; type: "directory"; mode: number } | { name: string; type: "file"; mode: number; source: ImageFile["source"] };

/** Every tar entry of the context, parents included, sorted by name, duplicates rejected. */
function contextEntries(spec: ImageSpec): Entry[] {
  const entries = new Map<string, Entry>();
  const add = (entry: Entry): void => {
    if (entries.has(entry.name)) throw new Error(`the image spec lists ${entry.name} twice`);
    entries.set(entry.name, entry);
  };
  const parents = (prefix: string, path: string): void => {
    for (let dir = posix.dirname(path); dir !== "/"; dir = posix.dirname(dir)) {
      const name = `${prefix}${dir}/`;
      if (!entries.has(name)) entries.set(name, { name, type: "directory", mode: 0o755 });
    }
  };
  add({ name: "Dockerfile", type: "file", mode: 0o644, source: { content: renderDockerfile(spec) } });
  add({ name: "rootfs/", type: "directory", mode: 0o755 });
  for (const f of spec.files) {
    assertImagePath(f.path, "file");
    add({ name: `rootfs${f.path}`, type: "file", mode: f.mode, source: f.source });
  }
  for (const d of spec.dirs) {
    assertImagePath(d.path, "directory");
    if (d.userOwned) {
      if (spec.files.some((f) => f.path.startsWith(`${d.path}/`))) throw new Error(`user-owned directory ${d.path} must be empty`);
      add({ name: `owned${d.path}/`, type: "directory", mode: d.mode });
    } else {
      add({ name: `rootfs${d.path}/`, type: "directory", mode: d.mode });
    }
  }
  // Parents are added last so an explicitly listed directory keeps its own mode.
  for (const f of spec.files) parents("rootfs", f.path);
  for (const d of spec.dirs) {
    parents("rootfs", d.path);
    if (d.userOwned) {
      parents("owned", d.path);
      if (!entries.has("owned/")) entries.set("owned/", { name: "owned/", type: "directory", mode: 0o755 });
    }
  }
  return [...entries.values()].sort((a, b) => cmp(a.name, b.name));
}

/**
 * Host files (node, about 100 MB; a Claude Code binary, about 250 MB) are read in 1 MiB chunks, not
 * the stream's default 64 KiB: the fake image's context digest took 256-358 ms of CPU against
 * 148-260 ms (docs/performance.md, "Hashes read in larger chunks").
 */
const HOST_FILE_CHUNK_BYTES = 1 << 20;

/**
 * Writes the context's tar into `pack`, each host file streamed from disk with its size taken
 * first (tar-stream fails an entry whose bytes do not match its size, so a file that changed
 * meanwhile fails rather than giving a tar that is not the one described).
 */
async function writeContext(spec: ImageSpec, pack: tar.Pack): Promise<void> {
  for (const e of contextEntries(spec)) {
    const header = { name: e.name, mode: e.mode, mtime: EPOCH, ...OWNER };
    if (e.type === "directory") {
      pack.entry({ ...header, type: "directory" });
    } else if ("content" in e.source) {
      pack.entry({ ...header, type: "file" }, Buffer.from(e.source.content));
    } else {
      const { size } = await stat(e.source.hostPath);
      await pipeline(createReadStream(e.source.hostPath, { highWaterMark: HOST_FILE_CHUNK_BYTES }), pack.entry({ ...header, type: "file", size }));
    }
  }
  pack.finalize();
}

/**
 * The build context as one tar in memory. Holding it whole (a few hundred MB with the real
 * binary) lets the digest and the build use the very same bytes: a file changing between
 * hashing and sending cannot give an image a digest label it does not match.
 */
export async function packContext(spec: ImageSpec): Promise<Buffer> {
  const pack = tar.pack();
  const collected = readAll(pack);
  await writeContext(spec, pack);
  return collected;
}

/**
 * `sha256:<hex>` of a packed context, or of the context a spec packs to. A spec is hashed as its
 * tar streams by, never held: a runner that held the context (100-300 MB) kept that much memory
 * mapped, and every child process it started afterwards cost it up to 30 ms of blocked event
 * loop to fork (docs/performance.md).
 */
export async function contextDigest(context: ImageSpec | Buffer): Promise<string> {
  const hash = createHash("sha256");
  if (Buffer.isBuffer(context)) hash.update(context);
  else {
    const pack = tar.pack();
    await Promise.all([pipeline(pack, hash), writeContext(context, pack)]);
  }
  return `sha256:${hash.digest("hex")}`;
}

/** `sha256` hex of a host file, streamed in chunks of `HOST_FILE_CHUNK_BYTES`. */
export async function fileSha256(path: string): Promise<string> {
  const hash = createHash("sha256");
  await pipeline(createReadStream(path, { highWaterMark: HOST_FILE_CHUNK_BYTES }), hash);
  return hash.digest("hex");
}
