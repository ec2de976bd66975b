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
import { LABELS } from "./reaper.ts";
import { SandboxSetupError, type HostFolder, type PreparedSandbox, type SandboxExit, type SandboxSpec, type SandboxStreams } from "./sandbox.ts";
import { encodeFrame, FRAME, serveStream, type StreamLimits, type StreamMux } from "./stream-mux.ts";
import { checkStreamBounds, readStagedTree, sendStaged, type StreamEntry } from "./staged-stream.ts";
import { addFolder, packFolder, packStream } from "./tree.ts";
import { replaceFromArchive } from "./worktree-back.ts";
import { OncePerKey } from "../util/once-per-key.ts";

/**
 * The Docker provider's engine-api channel (contract R240): a sandbox on an engine that shares no
 * files with the runner, reached by its API alone. What the inside reads comes in as content, not
 * as host paths: each tree (the staged login folder, the test files, a session's worktree) goes
 * into a per-attempt volume through `putArchive` into the attempt's relay container, which mounts
 * it where the attempt does not see it, the staged folder of a relay that is started as frames on
 * its stream instead (src/sandbox/staged-stream.ts, contract R282); the export goes into a volume of its own, kept for the run
 * when the provider says so and then filled once per export hash and mounted read-only by every
 * attempt of that export (contract R275), and is checked against the hash the runner computed
 * (contract R241). The relay (network none) serves the runner's endpoint sockets, its
 * attached stdio carrying one channel per connection (src/sandbox/stream-mux.ts, contract R242),
 * in per-attempt volumes the attempt container mounts read-only where it mounts the socket folders
 * on a local engine; it may be made before its attempt is known (contract R257). What comes back (a session's writable worktree, a writable test folder) leaves
 * through `getArchive`, bounded and read as untrusted (contract R245).
 * Every volume and container carries the spec's owner labels (a relay made ahead its run's), so
 * the reaper finds what a killed runner left (contract R243).
 */

/** The largest tree copied back out of a sandbox (the fake image's records). */
export const COPY_BACK_LIMIT_BYTES = 64 * 1024 * 1024;
/** How long the relay may take, once its sandbox is prepared, to be started and listen on every endpoint socket (contract R258). */
export const RELAY_READY_MS = 30_000;
/** Where the relay container mounts the content volumes it is filled through. */
const FILL_ROOT = "/study-runner-fill";
/** Where the relay container mounts the endpoint volumes. */
const RELAY_ROOT = "/study-runner-relay";
/** The endpoints one relay serves at most: a volume each (the seam names four endpoints). */
const RELAY_ENDPOINTS = 4;
/** The attempt label of a relay made ahead, before the attempt it serves is known. */
export const AHEAD_ATTEMPT = "ahead";
/** The attempt label of an export's volume kept for the run: it serves every attempt of that export (contract R275). */
export const EXPORT_ATTEMPT = "export";
/** The command of a container that is only a way into its volumes and is never started. */
const NEVER_STARTED = ["/study-runner-never-started"];

/** The content volumes a relay carries, each filled where the relay mounts it. */
type Slot = "workspace" | "worktree" | "staged" | "test";

interface ContentVolume {
  slot: Slot;
  /** The volume is the export's, kept for the run and filled once, not one of the relay's (contract R275). */
  kept?: boolean;
  target: string;
  readOnly: boolean;
  fill: (pack: tar.Pack) => Promise<void>;
  /** The tree as entries under `root` for a started relay to write from its stream instead (contract R282). */
  entries?: (root: string) => Promise<StreamEntry[]>;
  /** The export hash the tree written must have. */
  exportHash?: string;
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
  /** Tests: the relay container's command instead of stream-relay.cjs (a relay that misbehaves); never made ahead. */
  relayCommand?: (sockets: Array<{ name: string; path: string }>) => string[];
  /** Tests: how the relay container's start is called (a start that never returns). */
  startRelay?: (start: () => Promise<void>) => Promise<void>;
  /** Tests: the bound on the relay's start and listening (RELAY_READY_MS). */
  relayReadyMs?: number;
  /**
   * Make each sandbox's relay ahead, while the sandbox before runs, and remove what a sandbox made
   * in the background once its result is in; the caller waits with `settle()` before it ends.
   */
  ahead?: boolean;
  /**
   * Keep the volume of each export (a workspace with an export hash) for the run: filled and
   * checked once, mounted read-only by every sandbox of that export, removed by `settle()`, which
   * the caller calls before it ends (contract R275).
   */
  keepExports?: boolean;
}

/** The owner of what the program reads and writes: its `uid:gid`, root's when the spec names none. */
function userIds(user: string | undefined): { uid: number; gid: number } {
  const m = /^([0-9]+):([0-9]+)$/.exec(user ?? "");
  return m ? { uid: Number(m[1]), gid: Number(m[2]) } : { uid: 0, gid: 0 };
}

/** The content volumes of a spec, in the order the attempt container mounts them; the export's is `kept` when `keepExports`. */
async function contentVolumes(spec: SandboxSpec, keepExports: boolean): Promise<ContentVolume[]> {
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
      slot: "workspace",
      ...(keepExports && workspace.exportHash !== undefined ? { kept: true } : {}),
      target: workspace.target,
      readOnly: true,
      fill: (pack) => copyEntries(pack, workspace.tar()),
      ...(workspace.exportHash !== undefined ? { exportHash: workspace.exportHash } : {}),
      copyBack: [],
    });
  }
  if (spec.worktree) volumes.push(await worktreeVolume(spec, spec.worktree, owner));
  const staged = spec.staged;
  if (staged)
    volumes.push({
      slot: "staged",
      target: staged.target,
      readOnly: true,
      fill: (pack) => addFolder(pack, staged.folder, { owner }),
      entries: (root) => readStagedTree(staged.folder, root, owner),
      copyBack: [],
    });
  const tests = spec.testMounts ?? [];
  if (tests.length > 0) volumes.push(await testVolume(tests, owner));
  return volumes;
}

/**
 * A session's worktree (contract R245): its tree, owned by the program's user, in a volume whose
 * root is that user's too, as the bound folder is on a local engine. An empty volume takes the
 * owner of the image folder it is first mounted on, so the relay mounts it on `spec.userFolder`
 * (the image's HOME, empty and the user's). The tree written is held to the hash of the runner's
 * copy; a writable one replaces that copy once the program ended (src/sandbox/worktree-back.ts).
 */
async function worktreeVolume(spec: SandboxSpec, worktree: HostFolder, owner: { uid: number; gid: number }): Promise<ContentVolume> {
  if (spec.userFolder === undefined)
    throw new ContainerRuntimeError("the spec has a worktree but no userFolder, the image's empty folder of its user that gives the worktree's volume its owner", "invalid-spec");
  return {
    slot: "worktree",
    target: worktree.target,
    readOnly: worktree.readOnly,
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
async function testVolume(tests: readonly HostFolder[], owner: { uid: number; gid: number }): Promise<ContentVolume> {
  const parent = tests
    .map((t) => posix.dirname(t.target))
    .reduce((a, b) => {
      while (!(b === a || b.startsWith(a.endsWith("/") ? a : `${a}/`))) a = posix.dirname(a);
      return a;
    });
  const items = await Promise.all(tests.map(async (t) => ({ t, rel: posix.relative(parent, t.target), dir: (await lstat(t.folder)).isDirectory() })));
  return {
    slot: "test",
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
    // The same tree, when each mount is a name of the common folder (the relay makes no folder on the way).
    ...(items.every((i) => !i.rel.includes("/"))
      ? {
          entries: async (root: string) => {
            const entries: StreamEntry[] = [];
            const rootOwned = { uid: 0, gid: 0 };
            for (const { t, rel, dir } of items) {
              const common = { root, path: rel };
              if (!dir) entries.push({ ...common, type: "file", mode: 0o444, ...rootOwned, size: (await lstat(t.folder)).size, source: t.folder });
              else if (t.readOnly) entries.push({ ...common, type: "directory", mode: 0o555, ...rootOwned, size: 0 }, ...(await readStagedTree(t.folder, root, rootOwned, { prefix: rel })));
              else entries.push({ ...common, type: "directory", mode: 0o700, ...owner, size: 0 });
            }
            return entries;
          },
        }
      : {}),
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

/** The relay program, its volumes and labels: what a relay made ahead must match to serve a spec. */
interface RelayKind {
  image: string;
  command: string[];
  /** The content volumes, one per slot. */
  slots: Slot[];
  /** The endpoint volumes. */
  endpoints: number;
  /** Where the worktree's volume is first mounted (`SandboxSpec.userFolder`). */
  userFolder: string | undefined;
  labels: Record<string, string>;
}

/**
 * A relay container, created and being started, with its volumes: one per content slot (mounted
 * where it is filled) and one per endpoint. It is made before its attempt's endpoints are known
 * (ahead, contract R257) and told them by its `listen` frame; it serves one attempt only and is
 * removed with it.
 */
interface RelayContainer {
  id: string;
  made: Made;
  volumes: Partial<Record<Slot, string>>;
  endpointVolumes: string[];
  stdio: { stdin: NodeJS.WritableStream; stdout: NodeJS.ReadableStream };
  /** The engine's start of the relay; rejects when the engine refused it. */
  started: Promise<void>;
  /** Its stream ended or its start failed before it was taken: it cannot serve. */
  broken: boolean;
}

/** Makes a relay: its volumes at once, then the container, attached, then its start begun. */
async function makeRelay(runtime: ContainerRuntime & EngineStorage, kind: RelayKind, opts: EngineApiOptions): Promise<RelayContainer> {
  const tag = randomBytes(6).toString("hex");
  const made = new Made(runtime);
  try {
    const slots = kind.slots;
    const volumes = Object.fromEntries(slots.map((slot) => [slot, `study-runner-${tag}-${slot}`])) as Partial<Record<Slot, string>>;
    const endpointVolumes = Array.from({ length: kind.endpoints }, (_, i) => `study-runner-${tag}-endpoint-${i}`);
    await settleAll([...Object.values(volumes), ...endpointVolumes].map((name) => made.volume(name, kind.labels)));
    const id = await made.container({
      image: kind.image,
      entrypoint: kind.command,
      cmd: [],
      env: { PATH: "/usr/local/bin:/usr/bin:/bin" },
      // Root of the container, with no capability (but CHOWN for a staged folder it writes): it
      // owns the volumes' roots, makes the sockets there and opens them to the attempt's user.
      user: "0:0",
      mounts: [
        ...slots.map((slot) => ({ source: volumes[slot]!, volume: true, target: fillPath(slot, kind.userFolder), readOnly: false })),
        ...endpointVolumes.map((source, i) => ({ source, volume: true, target: `${RELAY_ROOT}/${i}`, readOnly: false })),
      ],
      tmpfs: {},
      readOnlyRootfs: true,
      networkMode: "none",
      // It reaches nothing by name or address: no network set up at all (contract R280).
      networkDisabled: true,
      capDrop: ["ALL"],
      // Only to give the files it writes from its stream their owner (contract R282).
      ...(kind.endpoints > 0 && slots.some((s) => s === "staged" || s === "test") ? { capAdd: ["CHOWN"] } : {}),
      securityOpt: ["no-new-privileges"],
      pidsLimit: 32,
      memoryBytes: 256 * 1024 * 1024,
      labels: kind.labels,
      openStdin: true,
      // The engine's default runtime, not the attempt's: under runsc (--host-uds=open) the attached
      // relay's start never returned, and a socket made in a volume inside gVisor is not there for
      // any other container (ENOENT; both measured). Made by runc, the sockets are the engine host's
      // own, which a runsc attempt opens as it opens the runner's on a local engine (contract R246).
    });
    const stdio = await runtime.attachStdio(id);
    stdio.stderr.resume();
    // A write to a relay that went away is no error of the runner's: its stream's end is what counts.
    stdio.stdin.on("error", () => undefined);
    const start = (): Promise<void> => runtime.start(id);
    // With no endpoint to serve it is only the volumes' way in, and is never started.
    const started = kind.endpoints === 0 ? Promise.resolve() : opts.startRelay ? opts.startRelay(start) : start();
    const relay: RelayContainer = { id, made, volumes, endpointVolumes, stdio, started, broken: false };
    const broken = (): void => void (relay.broken = true);
    relay.started.catch(broken);
    stdio.stdout.once("end", broken);
    stdio.stdout.once("close", broken);
    return relay;
  } catch (err) {
    await made.remove();
    throw err;
  }
}

/** Ends a relay's stream and removes it with its volumes. */
function removeRelay(relay: RelayContainer): Promise<void> {
  relay.stdio.stdin.end();
  return relay.made.remove();
}

/**
 * The engine-api channel of one provider: prepares its sandboxes (contract R240). With `ahead`,
 * the relay of the next sandbox is made while the one before runs, and what a sandbox made is
 * removed in the background once its result is in; `settle` waits for both (contract R257). With
 * `keepExports`, each export's volume is filled once and kept until `settle` (contract R275).
 */
export class EngineApiChannel {
  /** Relays made ahead, one per kind, not yet taken. */
  private readonly spares = new Map<string, Promise<RelayContainer | undefined>>();
  /** Removals under way in the background. */
  private readonly removing = new Set<Promise<void>>();
  /** The exports' volumes kept for the run, by export hash and owner labels (contract R275). */
  private readonly exports = new OncePerKey<string>();

  constructor(
    private readonly runtime: ContainerRuntime & EngineStorage,
    private readonly opts: EngineApiOptions,
  ) {}

  /**
   * Prepares one sandbox. The export's volume is filled (or found kept) while the relay is taken
   * (made ahead) or made; then the content is copied into the relay's volumes, the attempt
   * container created once the export's volume is there, and the relay told the endpoints and
   * started listening, all at once, as none needs another's result (the attempt container only
   * mounts the volumes, with `noCopy`; it starts once the relay listens).
   */
  async prepare(spec: SandboxSpec, base: ContainerSpec): Promise<PreparedSandbox> {
    mark("engine-api:begin");
    const content = await contentVolumes(spec, this.opts.keepExports === true);
    const relayProgram = spec.streamRelay ?? this.opts.streamRelay;
    if (spec.endpoints.length > 0 && !relayProgram && !this.opts.relayCommand)
      throw new ContainerRuntimeError("the spec names endpoints but no streamRelay, the image's program that serves them over the engine-api channel", "invalid-spec");
    if (spec.endpoints.length > RELAY_ENDPOINTS) throw new ContainerRuntimeError(`the engine-api relay serves at most ${RELAY_ENDPOINTS} endpoints, not ${spec.endpoints.length}`, "invalid-spec");
    const sockets = spec.endpoints.map((e, i) => ({ name: e.name, path: `${RELAY_ROOT}/${i}/${basename(e.socket)}` }));
    const hostEndpointDirs = new Set(spec.endpoints.map((e) => dirname(e.socket)));
    const kept = base.mounts.filter((m) => !hostEndpointDirs.has(m.source) && !content.some((c) => c.target === m.target) && !(spec.testMounts ?? []).some((t) => t.folder === m.source));
    if (kept.length > 0) throw new ContainerRuntimeError(`the engine-api channel carries no host path: ${kept.map((m) => m.target).join(", ")}`, "invalid-spec");
    const { workspace: _bound, ...rest } = base;
    // The export's volume kept for the run, begun at once: only the first sandbox of an export fills it (contract R275).
    const exported = content.find((c) => c.kept);
    const exportVolume = exported ? this.exportVolume(spec, exported) : Promise.resolve(undefined);
    // Awaited below; a sandbox refused before that leaves the fill to the run.
    exportVolume.catch(() => undefined);
    const exportMounts = (volume: string | undefined): Mount[] => (exported && volume !== undefined ? [{ source: volume, volume: true, target: exported.target, readOnly: true }] : []);
    const carried = content.filter((c) => !c.kept);
    // The staged folder and the test files go to a relay that is started on its stream, not by
    // putArchive (contract R282); read and bounded before anything is made (contract R283).
    const streamed = sockets.length > 0 ? carried.filter((c) => c.entries !== undefined) : [];
    const entries = (await Promise.all(streamed.map((c) => c.entries!(fillPath(c.slot, spec.userFolder))))).flat();
    checkStreamBounds(entries);
    if (carried.length === 0 && sockets.length === 0) {
      const made = new Made(this.runtime);
      const mounts = exportMounts(await exportVolume);
      return new PreparedOverApi(this.runtime, await made.container({ ...rest, mounts }), made, content, undefined, this.after());
    }

    // A relay made ahead serves whichever attempt comes next: it carries the run's labels, not an attempt's.
    const kind: RelayKind = {
      image: spec.image,
      // Never started when it serves no endpoint: the command only has to be one the engine accepts.
      command: sockets.length > 0 ? (relayProgram ?? []) : NEVER_STARTED,
      slots: carried.map((c) => c.slot),
      endpoints: sockets.length,
      userFolder: spec.userFolder,
      labels: { ...spec.labels, [LABELS.attempt]: AHEAD_ATTEMPT },
    };
    const key = JSON.stringify([kind.image, kind.command, kind.slots, kind.endpoints, kind.userFolder ?? null, Object.entries(kind.labels).sort()]);
    const ahead = this.opts.ahead === true && this.opts.relayCommand === undefined;
    const relay =
      (ahead ? await this.takeSpare(key) : undefined) ??
      (await makeRelay(this.runtime, { ...kind, labels: spec.labels, command: (sockets.length > 0 && this.opts.relayCommand?.(sockets)) || kind.command }, this.opts));
    mark("engine-api:relay");
    const made = relay.made;
    try {
      const endpointMounts: Mount[] = spec.endpoints.map((e, i) => ({ source: relay.endpointVolumes[i]!, volume: true, target: endpointDir(base, e.socket), readOnly: true }));
      const carriedMounts = carried.map((c) => ({ source: relay.volumes[c.slot]!, volume: true, target: c.target, readOnly: c.readOnly }));
      const [id, , mux] = await settleAll<[string, void, StreamMux | undefined]>([
        // The attempt container beside the fill: it mounts the relay's volumes with `noCopy`, so its
        // create neither waits for their content nor gives an empty one the image folder's owner
        // (the worktree's is the one the relay's create gave it, contract R245).
        exportVolume
          .then((volume) => made.container({ ...rest, mounts: [...exportMounts(volume), ...carriedMounts, ...endpointMounts].map((m) => ({ ...m, noCopy: true })) }))
          .finally(() => mark("engine-api:created")),
        fillVolumes(
          this.runtime,
          relay,
          spec.userFolder,
          carried.filter((c) => !streamed.includes(c)),
        ),
        sockets.length > 0 ? this.listen(relay, spec, sockets, entries) : Promise.resolve(undefined),
      ]);
      mark("engine-api:ready");
      const refill = ahead && spec.last !== true ? () => this.makeSpare(key, kind) : undefined;
      return new PreparedOverApi(this.runtime, id, made, content, { mux, stdin: relay.stdio.stdin }, this.after(refill));
    } catch (err) {
      relay.stdio.stdin.end();
      await made.remove();
      throw err;
    }
  }

  /** Removes the relays made ahead and waits for every removal under way; then removes the exports' volumes kept for the run. */
  async settle(): Promise<void> {
    const spares = [...this.spares.values()];
    this.spares.clear();
    await Promise.all(spares.map(async (s) => ((await s) ? removeRelay((await s)!) : undefined)));
    const exports = this.exports.drain();
    const volumes = await Promise.all(exports.map((v) => v.catch(() => undefined)));
    while (this.removing.size > 0) await Promise.all([...this.removing]);
    // Once every container that mounted them is gone.
    await Promise.all(volumes.map((name) => (name === undefined ? undefined : this.runtime.removeVolume(name).catch(() => undefined))));
  }

  /**
   * The volume of the spec's export kept for the run (contract R275): one per export hash and owner,
   * filled and checked by the first sandbox that needs it, which the others wait for. A fill that
   * failed is not kept: the sandboxes that waited for it fail with it, and the next one fills again.
   */
  private exportVolume(spec: SandboxSpec, c: ContentVolume): Promise<string> {
    const labels = { ...spec.labels, [LABELS.attempt]: EXPORT_ATTEMPT };
    const key = JSON.stringify([c.exportHash, Object.entries(labels).sort()]);
    return this.exports.get(key, () => this.fillExport(spec.image, c, labels));
  }

  /**
   * Fills a new export volume through a helper container that is never started, checks the tree
   * written against the export hash (contract R241), and keeps the volume; the helper is removed in
   * the background, as nothing mounts the volume writable again. A volume that failed is removed.
   */
  private async fillExport(image: string, c: ContentVolume, labels: Record<string, string>): Promise<string> {
    const helper = await makeRelay(this.runtime, { image, command: NEVER_STARTED, slots: [c.slot], endpoints: 0, userFolder: undefined, labels }, this.opts);
    try {
      await fillVolumes(this.runtime, helper, undefined, [c], "engine-api:export-filled");
    } catch (err) {
      await removeRelay(helper);
      throw err;
    }
    const volume = helper.volumes[c.slot]!;
    helper.made.keep(volume);
    this.background(removeRelay(helper));
    return volume;
  }

  /** Tracks a removal under way in the background; `settle` waits for it. */
  private background(removal: Promise<void>): void {
    const tracked = removal.finally(() => this.removing.delete(tracked));
    this.removing.add(tracked);
  }

  /** What a prepared sandbox does once its program started, and how it is removed. */
  private after(refill?: () => void): SandboxAfter {
    return {
      started: refill ?? (() => {}),
      remove: (removal) => {
        if (this.opts.ahead !== true) return removal;
        // In the background: the result is in; `settle` waits for it before the run ends.
        this.background(removal);
        return Promise.resolve();
      },
    };
  }

  /** The relay made ahead for `key`, when there is one that can still serve. */
  private async takeSpare(key: string): Promise<RelayContainer | undefined> {
    const spare = this.spares.get(key);
    this.spares.delete(key);
    const relay = await spare;
    if (relay?.broken) {
      this.after().remove(removeRelay(relay));
      return undefined;
    }
    return relay;
  }

  /** Begins making the next relay of `kind`, unless one is already made or being made. */
  private makeSpare(key: string, kind: RelayKind): void {
    if (this.spares.has(key)) return;
    // A relay that cannot be made ahead is made again when it is needed, where its fault is the attempt's.
    this.spares.set(
      key,
      makeRelay(this.runtime, kind, this.opts).catch(() => undefined),
    );
  }

  /**
   * Sends the relay the content it writes (the staged folder, test files; contract R282), then tells it the
   * endpoints, and waits until it listens on every socket: its start and its `ready` frame within
   * the bound (contract R258). A relay that does not listen in time, whose stream breaks its format
   * first, or whose digest of the content it wrote is not the one sent (contract R282), fails
   * the sandbox's setup (`SandboxSetupError`); a start the engine refused is the engine's error as
   * it came.
   */
  private async listen(relay: RelayContainer, spec: SandboxSpec, sockets: Array<{ name: string; path: string }>, entries: readonly StreamEntry[]): Promise<StreamMux> {
    const mux = serveStream(relay.stdio.stdout, relay.stdio.stdin, new Map(spec.endpoints.map((e) => [e.name, e.socket] as const)), this.opts.streamLimits);
    const stdin = relay.stdio.stdin;
    const sent = (entries.length > 0 ? sendStaged(stdin, entries) : Promise.resolve(undefined)).then((digest) => {
      stdin.write(encodeFrame(0, FRAME.listen, Buffer.from(sockets.map((s) => `${s.name}=${s.path}\n`).join(""), "utf8")));
      return digest;
    });
    const readyMs = this.opts.relayReadyMs ?? RELAY_READY_MS;
    const bound = new AbortController();
    try {
      const outcome = await Promise.race([
        Promise.all([sent, mux.ready]).then(
          () => "ready" as const,
          (err: unknown) => err as Error,
        ),
        relay.started.then(() => new Promise<never>(() => {})),
        sleep(readyMs, "timeout" as const, { signal: bound.signal }),
      ]);
      if (outcome === "ready") {
        const expected = await sent;
        if (expected !== undefined && mux.staged() !== expected) {
          mux.close();
          const wrote = mux.staged();
          throw new SandboxSetupError(
            wrote === undefined
              ? `the engine-api relay container ${relay.id}: it listened without a digest of the content it was sent to write (a relay of an image built by an older runner does not write it: build the image again)`
              : `the engine-api relay container ${relay.id}: the content it wrote from its stream has digest ${wrote}, not the ${expected} of what the runner sent`,
          );
        }
        mark("engine-api:listening");
        return mux;
      }
      const why = outcome === "timeout" ? `did not listen within ${readyMs} ms` : outcome.message;
      if (outcome === "timeout" || mux.fault() !== undefined) throw new SandboxSetupError(`the engine-api relay container ${relay.id}: ${why}`);
      throw new ContainerRuntimeError(`the engine-api relay container ${relay.id}: ${why}`, "engine");
    } finally {
      bound.abort();
    }
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

  /** Leaves the volume out of what `remove` removes: it outlives this sandbox. */
  keep(volume: string): void {
    const i = this.volumes.indexOf(volume);
    if (i >= 0) this.volumes.splice(i, 1);
  }

  async remove(): Promise<void> {
    await Promise.all(this.containers.splice(0).map((id) => this.runtime.remove(id).catch(() => undefined)));
    await Promise.all(this.volumes.splice(0).map((name) => this.runtime.removeVolume(name).catch(() => undefined)));
  }
}

/** Where the relay mounts a content slot's volume to fill it. */
const fillPath = (slot: Slot, userFolder: string | undefined): string => (slot === "worktree" ? userFolder! : `${FILL_ROOT}/${slot}`);

/** The relay a prepared sandbox keeps: its stream's server (when it serves endpoints) and its stdin. */
type Relay = { mux: StreamMux | undefined; stdin: NodeJS.WritableStream };

/** What the channel does around a prepared sandbox: once its program started, and its removal. */
interface SandboxAfter {
  started(): void;
  remove(removal: Promise<void>): Promise<void>;
}

/**
 * Fills the content volumes through the relay (or helper) container, which mounts them writable
 * where the attempt container does not see them: each volume's archive at once, then the export
 * checked.
 */
async function fillVolumes(
  runtime: ContainerRuntime & EngineStorage,
  relay: RelayContainer,
  userFolder: string | undefined,
  content: readonly ContentVolume[],
  done = "engine-api:filled",
): Promise<void> {
  if (content.length === 0) return;
  await settleAll(
    content.map(async (c) => {
      const at = fillPath(c.slot, userFolder);
      const pack = tar.pack();
      c.fill(pack).then(
        () => pack.finalize(),
        (err: unknown) => pack.destroy(err as Error),
      );
      await runtime.putArchive(relay.id, at, packStream(pack));
      if (c.exportHash !== undefined) {
        const written = await hashTree(await runtime.getArchive(relay.id, at));
        if (written !== c.exportHash) throw new ContainerRuntimeError(`the export written into volume ${relay.volumes[c.slot]} has hash ${written}, not the export's ${c.exportHash}`, "engine");
      }
    }),
  );
  mark(done);
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
    private readonly after: SandboxAfter,
  ) {
    // A stream the relay broke ends the program at once: its endpoints are gone.
    relay?.mux?.onFault(() => void this.runtime.kill(this.id).catch(() => undefined));
  }

  async run(): Promise<SandboxStreams> {
    const streams = await this.runtime.attach(this.id);
    await this.runtime.start(this.id);
    this.after.started();
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
    const fault = this.relay?.mux?.fault();
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

  cleanup(): Promise<void> {
    this.relay?.mux?.close();
    this.relay?.stdin.end();
    return this.after.remove(this.made.remove());
  }
}
