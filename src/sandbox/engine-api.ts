import { randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { lstat, mkdir } from "node:fs/promises";
import { basename, dirname, join, posix } from "node:path";
import { pipeline } from "node:stream/promises";
import { buffer as readAll } from "node:stream/consumers";
import { setTimeout as sleep } from "node:timers/promises";
import { mark } from "../util/marks.ts";
import { stopContainer } from "./stop.ts";
import tar from "tar-stream";
import { ExportHasher } from "../export/export.ts";
import { ContainerRuntimeError, type ContainerRuntime, type ContainerSpec, type EngineStorage, type Mount } from "./port.ts";
import type { HostFolder, PreparedSandbox, SandboxExit, SandboxSpec, SandboxStreams } from "./sandbox.ts";
import { serveStream, type StreamLimits, type StreamMux } from "./stream-mux.ts";
import { addFolder, packFolder, packStream } from "./tree.ts";
import { replaceFromArchive } from "./worktree-back.ts";

/**
 * The Docker provider's engine-api channel (contract R240): a sandbox on an engine that shares no
 * files with the runner, reached by its API alone. What the inside reads comes in as content, not
 * as host paths: each tree (the export, the staged login folder, the test files) goes into a
 * per-attempt volume through `putArchive` into a helper container that is created and never
 * started, and the export is checked against the hash the runner computed (contract R241). The
 * runner's endpoint sockets are served by a relay container with network none, whose attached
 * stdio carries one channel per connection (src/sandbox/stream-mux.ts, contract R242), in
 * per-attempt volumes the attempt container mounts read-only where it mounts the socket folders on
 * a local engine. What comes back (a session's writable worktree, a writable test folder) leaves
 * through `getArchive`, bounded and read as untrusted (contract R245).
 * Every volume and container carries the spec's owner labels, so the reaper finds what a killed
 * runner left (contract R243).
 */

/** The largest tree copied back out of a sandbox (the fake image's records). */
export const COPY_BACK_LIMIT_BYTES = 64 * 1024 * 1024;
/** How long the relay may take to listen on every endpoint socket. */
const RELAY_READY_MS = 30_000;
/** Where the helper container mounts the volumes it fills. */
const FILL_ROOT = "/study-runner-fill";
/** Where the relay container mounts the endpoint volumes. */
const RELAY_ROOT = "/study-runner-relay";

interface ContentVolume {
  name: string;
  target: string;
  readOnly: boolean;
  fill: (pack: tar.Pack) => Promise<void>;
  /** The export hash the tree written must have. */
  exportHash?: string;
  /** Where the helper mounts it to fill it (a folder of its own under FILL_ROOT when absent). */
  fillAt?: string;
  /**
   * Subfolders of the volume copied back to host folders once the program ended: merged into the
   * folder, or (`replace`) replacing it whole.
   */
  copyBack: Array<{ sub: string; folder: string; replace?: boolean }>;
}

export interface EngineApiOptions {
  /** The relay program when the spec names none (`SandboxSpec.streamRelay`). */
  streamRelay?: string[];
  /** Tests: the relay's frame bounds. */
  streamLimits?: StreamLimits;
  /** Tests: the relay container's command instead of stream-relay.cjs (a relay that misbehaves). */
  relayCommand?: (sockets: Array<{ name: string; path: string }>) => string[];
}

/** The owner of what the program reads and writes: its `uid:gid`, root's when the spec names none. */
function userIds(user: string | undefined): { uid: number; gid: number } {
  const m = /^([0-9]+):([0-9]+)$/.exec(user ?? "");
  return m ? { uid: Number(m[1]), gid: Number(m[2]) } : { uid: 0, gid: 0 };
}

/** The content volumes of a spec, in the order the attempt container mounts them. */
async function contentVolumes(spec: SandboxSpec, volumeName: (kind: string) => string): Promise<ContentVolume[]> {
  if (spec.staged && !spec.staged.readOnly) {
    throw new ContainerRuntimeError(
      "the engine-api channel carries no login copy back out: use --credentials gateway (the placeholder login is read-only), or --sandbox-channel host-paths on an engine that shares the runner's files",
      "invalid-spec",
    );
  }
  const owner = userIds(spec.user);
  const volumes: ContentVolume[] = [];
  const workspace = spec.workspace;
  if (workspace) {
    volumes.push({
      name: volumeName("workspace"),
      target: workspace.target,
      readOnly: true,
      fill: (pack) => copyEntries(pack, workspace.tar()),
      ...(workspace.exportHash !== undefined ? { exportHash: workspace.exportHash } : {}),
      copyBack: [],
    });
  }
  if (spec.worktree) volumes.push(await worktreeVolume(spec, spec.worktree, volumeName("worktree"), owner));
  const staged = spec.staged;
  if (staged) volumes.push({ name: volumeName("staged"), target: staged.target, readOnly: true, fill: (pack) => addFolder(pack, staged.folder, { owner }), copyBack: [] });
  const tests = spec.testMounts ?? [];
  if (tests.length > 0) volumes.push(await testVolume(tests, volumeName("test"), owner));
  return volumes;
}

/**
 * A session's worktree (contract R245): its tree, owned by the program's user, in a volume whose
 * root is that user's too, as the bound folder is on a local engine. An empty volume takes the
 * owner of the image folder it is first mounted on, so the helper mounts it on `spec.userFolder`
 * (the image's HOME, empty and the user's). The tree written is held to the hash of the runner's
 * copy; a writable one replaces that copy once the program ended (src/sandbox/worktree-back.ts).
 */
async function worktreeVolume(spec: SandboxSpec, worktree: HostFolder, name: string, owner: { uid: number; gid: number }): Promise<ContentVolume> {
  if (spec.userFolder === undefined)
    throw new ContainerRuntimeError("the spec has a worktree but no userFolder, the image's empty folder of its user that gives the worktree's volume its owner", "invalid-spec");
  return {
    name,
    target: worktree.target,
    readOnly: worktree.readOnly,
    fillAt: spec.userFolder,
    fill: (pack) => addFolder(pack, worktree.folder, { owner }),
    exportHash: await hashTree(packFolder(worktree.folder, { prefix: "worktree" })),
    copyBack: worktree.readOnly ? [] : [{ sub: "", folder: worktree.folder, replace: true }],
  };
}

/**
 * The test mounts as one volume at their common parent folder: a file as a read-only file of root,
 * a read-only folder as its tree, a writable folder as an empty folder of the sandbox's user whose
 * content is copied back. The volume's root stays root's, so the user can write only there.
 */
async function testVolume(tests: readonly HostFolder[], name: string, owner: { uid: number; gid: number }): Promise<ContentVolume> {
  const parent = tests
    .map((t) => posix.dirname(t.target))
    .reduce((a, b) => {
      while (!(b === a || b.startsWith(a.endsWith("/") ? a : `${a}/`))) a = posix.dirname(a);
      return a;
    });
  const items = await Promise.all(tests.map(async (t) => ({ t, rel: posix.relative(parent, t.target), dir: (await lstat(t.folder)).isDirectory() })));
  return {
    name,
    target: parent,
    readOnly: items.every((i) => i.t.readOnly),
    fill: async (pack) => {
      for (const { t, rel, dir } of items) {
        if (!dir) {
          const data = await readAll(createReadStream(t.folder));
          pack.entry({ name: rel, mode: 0o444, type: "file", size: data.length }, data);
        } else if (t.readOnly) {
          pack.entry({ name: rel, mode: 0o555, type: "directory" });
          await addFolder(pack, t.folder, { prefix: rel });
        } else pack.entry({ name: rel, mode: 0o700, type: "directory", ...owner });
      }
    },
    copyBack: items.filter((i) => i.dir && !i.t.readOnly).map((i) => ({ sub: i.rel, folder: i.t.folder })),
  };
}

/** Copies the entries of a tar stream into `pack` as they are. */
async function copyEntries(pack: tar.Pack, source: NodeJS.ReadableStream): Promise<void> {
  const extract = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    extract.on("entry", (header, stream, next) => {
      readAll(stream).then((data) => pack.entry(header, data, (err) => (err ? reject(err) : next())), reject);
    });
    extract.on("finish", resolve);
    extract.on("error", reject);
  });
  source.pipe(extract as unknown as NodeJS.WritableStream);
  await done;
}

/** The export hash of a tree read back as a tar whose entries lie under one top folder. */
export async function hashTree(archive: NodeJS.ReadableStream): Promise<string> {
  const files: Array<{ path: string; mode: string; data: Buffer }> = [];
  const extract = tar.extract();
  await new Promise<void>((resolve, reject) => {
    extract.on("entry", (header, stream, next) => {
      readAll(stream).then((data) => {
        const path = header.name.split("/").slice(1).join("/");
        if (header.type === "file" && path !== "") files.push({ path, mode: ((header.mode ?? 0) & 0o777).toString(8), data });
        next();
      }, reject);
    });
    extract.on("finish", resolve);
    extract.on("error", reject);
    archive.pipe(extract as unknown as NodeJS.WritableStream);
  });
  files.sort((a, b) => Buffer.compare(Buffer.from(a.path, "utf8"), Buffer.from(b.path, "utf8")));
  const hasher = new ExportHasher();
  for (const f of files) hasher.add(f.path, f.data, f.mode);
  return hasher.digest();
}

/**
 * Extracts the regular files and folders of `archive` (entries under one top folder) into
 * `folder`: never a link or a special file, never a name that leaves the folder, at most
 * COPY_BACK_LIMIT_BYTES in all; what the inside wrote is untrusted.
 */
export async function extractBounded(archive: NodeJS.ReadableStream, folder: string, limitBytes = COPY_BACK_LIMIT_BYTES): Promise<string[]> {
  const problems: string[] = [];
  let total = 0;
  const extract = tar.extract();
  await new Promise<void>((resolve, reject) => {
    extract.on("entry", (header, stream, next) => {
      const rel = header.name.split("/").slice(1).join("/").replace(/\/$/, "");
      const safe = rel !== "" && rel.split("/").every((p) => p !== "" && p !== "." && p !== "..");
      const skip = (why?: string): void => {
        if (why) problems.push(why);
        stream.resume();
        stream.on("end", next);
      };
      if (!safe) return skip(rel === "" ? undefined : `left out ${JSON.stringify(rel.slice(0, 200))}: not a plain relative name`);
      if (header.type === "directory") {
        mkdir(join(folder, rel), { recursive: true, mode: 0o700 }).then(() => skip(), reject);
        return;
      }
      if (header.type !== "file") return skip(`left out ${JSON.stringify(rel.slice(0, 200))}: a ${header.type}, not a regular file`);
      total += header.size ?? 0;
      if (total > limitBytes) return skip(`left out ${JSON.stringify(rel.slice(0, 200))}: past the ${limitBytes}-byte bound`);
      mkdir(dirname(join(folder, rel)), { recursive: true, mode: 0o700 })
        .then(() => pipeline(stream, createWriteStream(join(folder, rel), { flags: "wx", mode: 0o600 })))
        .then(() => next(), reject);
    });
    extract.on("finish", resolve);
    extract.on("error", reject);
    archive.pipe(extract as unknown as NodeJS.WritableStream);
  });
  return problems;
}

/**
 * Prepares one sandbox on the engine-api channel. Every volume is created at once; then the content
 * is copied in and the attempt container created while the relay starts, as neither needs the
 * other's result (the attempt container only mounts the relay's volumes; it starts once the relay
 * listens).
 */
export async function prepareOverEngineApi(runtime: ContainerRuntime & EngineStorage, spec: SandboxSpec, base: ContainerSpec, opts: EngineApiOptions = {}): Promise<PreparedSandbox> {
  const tag = randomBytes(6).toString("hex");
  const volumeName = (kind: string): string => `study-runner-${tag}-${kind}`;
  const made = new Made(runtime);
  try {
    mark("engine-api:begin");
    const content = await contentVolumes(spec, volumeName);
    const sockets = spec.endpoints.map((e, i) => ({ name: e.name, volume: volumeName(`endpoint-${i}`), path: `${RELAY_ROOT}/${i}/${basename(e.socket)}` }));
    const endpointMounts: Mount[] = spec.endpoints.map((e, i) => ({ source: sockets[i]!.volume, volume: true, target: endpointDir(base, e.socket), readOnly: true }));
    const hostEndpointDirs = new Set(spec.endpoints.map((e) => dirname(e.socket)));
    const kept = base.mounts.filter((m) => !hostEndpointDirs.has(m.source) && !content.some((c) => c.target === m.target) && !(spec.testMounts ?? []).some((t) => t.folder === m.source));
    if (kept.length > 0) throw new ContainerRuntimeError(`the engine-api channel carries no host path: ${kept.map((m) => m.target).join(", ")}`, "invalid-spec");
    await settleAll([...content.map((c) => c.name), ...sockets.map((s) => s.volume)].map((name) => made.volume(name, spec.labels)));
    mark("engine-api:volumes-created");
    const { workspace: _bound, ...rest } = base;
    const mounts = [...content.map((c) => ({ source: c.name, volume: true, target: c.target, readOnly: c.readOnly })), ...endpointMounts];
    const [id, relay] = await settleAll<[string, Relay | undefined]>([
      // The attempt container after the fill: an empty volume takes the owner of the folder it is first mounted on (the helper's `fillAt`).
      fillVolumes(runtime, made, spec, content).then(() => made.container({ ...rest, mounts })),
      sockets.length > 0 ? startRelay(runtime, made, spec, sockets, opts) : Promise.resolve(undefined),
    ]);
    mark("engine-api:ready");
    return new PreparedOverApi(runtime, id, made, content, relay);
  } catch (err) {
    await made.remove();
    throw err;
  }
}

/** Waits for every promise, so nothing is still being made when a failure is cleaned up; then throws the first failure. */
async function settleAll<T extends readonly unknown[]>(promises: { [K in keyof T]: Promise<T[K]> }): Promise<T> {
  const results = await Promise.allSettled(promises as readonly Promise<unknown>[]);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed) throw failed.reason;
  return results.map((r) => (r as PromiseFulfilledResult<unknown>).value) as unknown as T;
}

/** Where the attempt container's spec mounts the folder of an endpoint's socket. */
function endpointDir(base: ContainerSpec, socket: string): string {
  const m = base.mounts.find((x) => x.source === dirname(socket));
  if (!m) throw new ContainerRuntimeError(`no mount for the endpoint socket ${socket}`, "invalid-spec");
  return m.target;
}

/** What one sandbox made on the engine: its containers removed at once, then its volumes at once. */
class Made {
  private readonly containers: string[] = [];
  private readonly volumes: string[] = [];
  /** Removals already under way (the fill helper's), which the volumes' removal waits for. */
  private readonly removing: Array<Promise<unknown>> = [];
  constructor(private readonly runtime: ContainerRuntime & EngineStorage) {}

  async volume(name: string, labels: Record<string, string>): Promise<void> {
    await this.runtime.createVolume(name, labels);
    this.volumes.push(name);
  }

  async container(spec: ContainerSpec): Promise<string> {
    const id = await this.runtime.create(spec);
    this.containers.push(id);
    return id;
  }

  /** Starts removing one container without waiting for it. */
  removeSoon(id: string): void {
    const i = this.containers.indexOf(id);
    if (i >= 0) this.containers.splice(i, 1);
    this.removing.push(this.runtime.remove(id).catch(() => undefined));
  }

  async remove(): Promise<void> {
    await Promise.all([...this.removing.splice(0), ...this.containers.splice(0).map((id) => this.runtime.remove(id).catch(() => undefined))]);
    await Promise.all(this.volumes.splice(0).map((name) => this.runtime.removeVolume(name).catch(() => undefined)));
  }
}

/** Where the helper mounts content volume `i`. */
const fillPath = (c: ContentVolume, i: number): string => c.fillAt ?? `${FILL_ROOT}/${i}`;

type Relay = { id: string; mux: StreamMux; stdin: NodeJS.WritableStream };

/**
 * Fills every content volume (already created) through one created, never-started helper
 * container, each volume's archive at once, then checks the export; the helper is removed in the
 * background, before the volumes are.
 */
async function fillVolumes(runtime: ContainerRuntime & EngineStorage, made: Made, spec: SandboxSpec, content: readonly ContentVolume[]): Promise<void> {
  if (content.length === 0) return;
  const helper = await made.container({
    image: spec.image,
    // Never started: the command only has to be one the engine accepts.
    entrypoint: ["/study-runner-never-started"],
    cmd: [],
    env: {},
    mounts: content.map((c, i) => ({ source: c.name, volume: true, target: fillPath(c, i), readOnly: false })),
    tmpfs: {},
    readOnlyRootfs: true,
    networkMode: "none",
    capDrop: ["ALL"],
    securityOpt: ["no-new-privileges"],
    labels: spec.labels,
  });
  await settleAll(
    content.map(async (c, i) => {
      const pack = tar.pack();
      c.fill(pack).then(
        () => pack.finalize(),
        (err: unknown) => pack.destroy(err as Error),
      );
      await runtime.putArchive(helper, fillPath(c, i), packStream(pack));
      if (c.exportHash !== undefined) {
        const written = await hashTree(await runtime.getArchive(helper, fillPath(c, i)));
        if (written !== c.exportHash) throw new ContainerRuntimeError(`the export written into volume ${c.name} has hash ${written}, not the export's ${c.exportHash}`, "engine");
      }
    }),
  );
  made.removeSoon(helper);
  mark("engine-api:filled");
}

/** The relay container, started, its stream served; resolves once it listens on every socket. */
async function startRelay(
  runtime: ContainerRuntime & EngineStorage,
  made: Made,
  spec: SandboxSpec,
  sockets: Array<{ name: string; volume: string; path: string }>,
  opts: EngineApiOptions,
): Promise<Relay> {
  const relay = spec.streamRelay ?? opts.streamRelay;
  if (!relay && !opts.relayCommand) throw new ContainerRuntimeError("the spec names endpoints but no streamRelay, the image's program that serves them over the engine-api channel", "invalid-spec");
  const command = opts.relayCommand?.(sockets) ?? [...relay!, ...sockets.map((s) => `${s.name}=${s.path}`)];
  const id = await made.container({
    image: spec.image,
    entrypoint: command,
    cmd: [],
    env: { PATH: "/usr/local/bin:/usr/bin:/bin" },
    // Root of the container, with no capability: it owns the volumes' roots, makes the sockets
    // there and opens them to the attempt's user.
    user: "0:0",
    mounts: sockets.map((s, i) => ({ source: s.volume, volume: true, target: `${RELAY_ROOT}/${i}`, readOnly: false })),
    tmpfs: {},
    readOnlyRootfs: true,
    networkMode: "none",
    capDrop: ["ALL"],
    securityOpt: ["no-new-privileges"],
    pidsLimit: 32,
    memoryBytes: 256 * 1024 * 1024,
    labels: spec.labels,
    openStdin: true,
    // The engine's default runtime, not the attempt's: under runsc (--host-uds=open) the attached
    // relay's start never returned, and a socket made in a volume inside gVisor is not there for
    // any other container (ENOENT; both measured). Made by runc, the sockets are the engine host's
    // own, which a runsc attempt opens as it opens the runner's on a local engine (contract R246).
  });
  const stdio = await runtime.attachStdio(id);
  stdio.stderr.resume();
  const endpoints = new Map(spec.endpoints.map((e) => [e.name, e.socket] as const));
  const mux = serveStream(stdio.stdout, stdio.stdin, endpoints, opts.streamLimits);
  await runtime.start(id);
  const timer = sleep(RELAY_READY_MS, "timeout" as const);
  const outcome = await Promise.race([mux.ready.then(() => "ready" as const), timer]).catch((err: unknown) => err as Error);
  if (outcome !== "ready") {
    const why = outcome === "timeout" ? `did not listen within ${RELAY_READY_MS} ms` : outcome.message;
    throw new ContainerRuntimeError(`the engine-api relay container ${id}: ${why}`, "engine");
  }
  return { id, mux, stdin: stdio.stdin };
}

/** The attempt container, its relay and volumes, as one prepared sandbox. */
class PreparedOverApi implements PreparedSandbox {
  private exit: Promise<SandboxExit> | undefined;

  constructor(
    private readonly runtime: ContainerRuntime & EngineStorage,
    readonly id: string,
    private readonly made: Made,
    private readonly content: readonly ContentVolume[],
    private readonly relay: Relay | undefined,
  ) {
    // A stream the relay broke ends the program at once: its endpoints are gone.
    relay?.mux.onFault(() => void this.runtime.kill(this.id).catch(() => undefined));
  }

  async run(): Promise<SandboxStreams> {
    const streams = await this.runtime.attach(this.id);
    await this.runtime.start(this.id);
    return streams;
  }

  wait(): Promise<SandboxExit> {
    this.exit ??= this.waitOnce();
    return this.exit;
  }

  private async waitOnce(): Promise<SandboxExit> {
    const exit = await this.runtime.wait(this.id);
    const state = await this.runtime.inspect(this.id);
    const problems: string[] = [];
    for (const c of this.content) {
      for (const back of c.copyBack) {
        const path = back.sub === "" ? c.target : posix.join(c.target, back.sub);
        const archive = await this.runtime.getArchive(this.id, path);
        const left = back.replace ? await replaceFromArchive(archive, back.folder) : await extractBounded(archive, back.folder);
        problems.push(...left.map((p) => `copying ${path} back: ${p}`));
      }
    }
    const fault = this.relay?.mux.fault();
    return {
      exitCode: exit.exitCode,
      oomKilled: exit.oomKilled || (state?.oomKilled ?? false),
      ...(state ? { ociRuntime: state.runtime } : {}),
      ...(fault !== undefined ? { channelFault: `the engine-api stream was refused: ${fault}` } : {}),
      ...(problems.length > 0 ? { copyBackProblems: problems } : {}),
    };
  }

  stop(graceMs = 0): Promise<void> {
    return stopContainer(this.runtime, this.id, graceMs);
  }

  async cleanup(): Promise<void> {
    this.relay?.mux.close();
    this.relay?.stdin.end();
    await this.made.remove();
  }
}
