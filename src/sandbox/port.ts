/**
 * The container-runtime port: what the runner needs from a container engine, in the
 * project's own types. Only `docker.ts` beside this file knows dockerode; the rest is written
 * against `ContainerRuntime` (so a test can hand in `FakeRuntime`): the Docker provider of the
 * sandbox seam (`docker-sandbox.ts`, where attempts and test commands run; see `sandbox.ts`), and
 * the engine's own business (the doctor, image builds and probes, the reaper).
 */

export interface Mount {
  /** Absolute host path (a bind mount; the source must exist), or a volume's name when `volume`. */
  source: string;
  /** `source` names a volume of the engine (the engine-api channel's per-attempt storage), not a host path. */
  volume?: boolean;
  /**
   * A volume only: the engine copies nothing of the image's folder at `target` into the volume
   * when it is empty (Docker's `nocopy`), so a container that mounts it can be created before the
   * volume is filled without giving it the image folder's content or owner.
   */
  noCopy?: boolean;
  /** Absolute path inside the container. */
  target: string;
  readOnly: boolean;
}

/**
 * A read-only tree the container sees at `target` (the attempt's export), handed to the runtime
 * as content rather than as a path on the runner's host: a runtime whose containers run
 * elsewhere (a Kubernetes pod on another node) copies `tar()` in; one on the runner's host may
 * bind-mount `hostPath` read-only instead (the Docker adapter does, see docs/scaling.md).
 */
export interface Workspace {
  /** Absolute path inside the container. */
  target: string;
  /** The tree as an uncompressed tar stream; each call starts a new stream. */
  tar(): NodeJS.ReadableStream;
  /** Where the same tree lies on the runner's host, when it does. */
  hostPath?: string;
  /** The export hash the runner computed of the tree: a runtime that copies the tar in checks what it wrote against it (contract R241). */
  exportHash?: string;
}

/** `none`, `bridge` (only the documented default of a real pilot), or `container:<id>` (a sidecar's namespace). */
export type NetworkMode = "none" | "bridge" | `container:${string}`;

/** What runs, the same for a container and for a sandbox of any provider. */
export interface ProgramSpec {
  /** An image id (`sha256:…`), a digest, or (in tests) a tag. */
  image: string;
  /** Replaces the image's ENTRYPOINT when given; `cmd` are its arguments. */
  entrypoint?: string[];
  cmd: string[];
  /** The complete environment besides the image's ENV: an allowlist built by the caller. */
  env: Record<string, string>;
  /** `uid:gid` or a name from the image's /etc/passwd. */
  user?: string;
  workingDir?: string;
}

export interface ContainerSpec extends ProgramSpec {
  name?: string;
  /** Host folders bound into the container (socket folders, the staged login, test files). */
  mounts: Mount[];
  /** The read-only tree the attempt works on (its export). */
  workspace?: Workspace;
  /** Path inside the container -> tmpfs mount options, e.g. `{ "/tmp": "rw,nosuid,size=64m" }`. */
  tmpfs: Record<string, string>;
  readOnlyRootfs: boolean;
  networkMode: NetworkMode;
  capDrop: string[];
  /** Capabilities given back after `capDrop` (the engine-api relay's CAP_CHOWN, contract R282). */
  capAdd?: string[];
  securityOpt: string[];
  pidsLimit?: number;
  /** Hard memory limit; swap is set to the same value so the limit cannot be spilled to swap. */
  memoryBytes?: number;
  /** CPU limit in billionths of a CPU (Docker's NanoCpus): 1e9 is one CPU. */
  nanoCpus?: number;
  labels: Record<string, string>;
  /** OCI runtime name (e.g. `runsc`); the engine's default when absent. */
  runtime?: string;
  /** Run a minimal init as PID 1 that forwards signals and reaps orphans (e.g. lingering MCP children). */
  init?: boolean;
  /** Keep stdin open for `EngineStorage.attachStdio` (the engine-api channel's relay); closed otherwise (contract R67). */
  openStdin?: boolean;
  /**
   * No network set up by the engine at all (Docker's `NetworkDisabled`), with `networkMode` none:
   * a namespace with loopback alone and no `/etc/hosts` or `/etc/resolv.conf` of the engine's, and
   * no prestart hook (Docker 20.10 runs one per container, about 100 ms of CPU). For the runner's
   * own programs that reach nothing by name (the engine-api relay, contract R280), and for a
   * sandbox whose network says `names: false` (an attempt's CLI, the adjudicator, contract R281).
   */
  networkDisabled?: boolean;
}

export interface EngineInfo {
  serverVersion: string;
  apiVersion: string;
  /** Where the engine was reached (`unix:///var/run/docker.sock`, `tcp://host:2376`, `ssh://host`). */
  endpoint: string;
  /** OCI runtimes the engine offers. */
  runtimes: string[];
  /** The runtime a container gets when its spec names none. */
  defaultRuntime: string;
  /** The engine's operating system and architecture (`linux`, `amd64`), when it says. */
  os?: string;
  arch?: string;
}

export interface ContainerOutput {
  /** Demultiplexed byte streams; both end when the container's output ends. */
  stdout: NodeJS.ReadableStream;
  stderr: NodeJS.ReadableStream;
}

export interface ContainerExit {
  exitCode: number;
  oomKilled: boolean;
}

export interface ContainerState {
  running: boolean;
  /** null while the container has not exited. */
  exitCode: number | null;
  oomKilled: boolean;
  labels: Record<string, string>;
  /** `NAME=value` entries as the engine reports them (image ENV included). */
  env: string[];
  /** The OCI runtime the engine created the container with (its default when the spec named none). */
  runtime: string;
}

export interface ImageInfo {
  id: string;
  labels: Record<string, string>;
}

export interface ContainerSummary {
  id: string;
  labels: Record<string, string>;
  running: boolean;
}

export interface ContainerRuntime {
  ping(): Promise<EngineInfo>;
  /** Builds an image from a tar build context; `labels` are added to those the Dockerfile sets. */
  buildImage(context: NodeJS.ReadableStream | Buffer, opts: { tag: string; labels?: Record<string, string> }): Promise<ImageInfo>;
  /** undefined when no such image exists. */
  inspectImage(ref: string): Promise<ImageInfo | undefined>;
  /** Creates (does not start) a container; returns its id. */
  create(spec: ContainerSpec): Promise<string>;
  /** Attach BEFORE `start`, so no output is lost. */
  attach(id: string): Promise<ContainerOutput>;
  start(id: string): Promise<void>;
  /** Resolves when the container has exited. A non-zero exit or an OOM kill is a result, not an error. */
  wait(id: string): Promise<ContainerExit>;
  /** Sends a signal (default SIGKILL); no error when the container is already stopped or gone. */
  kill(id: string, signal?: string): Promise<void>;
  /** undefined when no such container exists. */
  inspect(id: string): Promise<ContainerState | undefined>;
  /** Removes the container, killing it if needed; no error when it is already gone. */
  remove(id: string): Promise<void>;
  /** Containers (running or not) carrying every given label with the given value. */
  listByLabel(labels: Record<string, string>): Promise<ContainerSummary[]>;
}

/** A volume of the engine, as listed by label. */
export interface VolumeSummary {
  name: string;
  labels: Record<string, string>;
}

/** A container's stdio as one duplex: bytes written go to its stdin; its stdout and stderr arrive apart. */
export interface ContainerStdio extends ContainerOutput {
  stdin: NodeJS.WritableStream;
}

/**
 * What the engine-api channel needs of an engine beyond `ContainerRuntime` (src/sandbox/engine-api.ts):
 * storage of its own and content and streams carried over its API connection, nothing through the
 * runner's filesystem. `DockerRuntime` has it; a runtime without it offers the host-paths channel only.
 */
export interface EngineStorage {
  /** Creates a named volume carrying `labels` (the owner labels, so the reaper finds it). */
  createVolume(name: string, labels: Record<string, string>): Promise<void>;
  /** No error when it is already gone. */
  removeVolume(name: string): Promise<void>;
  listVolumesByLabel(labels: Record<string, string>): Promise<VolumeSummary[]>;
  /** Extracts an uncompressed tar into `path` of a container (created or stopped: never needs it running). */
  putArchive(id: string, path: string, tar: NodeJS.ReadableStream): Promise<void>;
  /** `path` of a container as an uncompressed tar (its entries named under the path's last component). */
  getArchive(id: string, path: string): Promise<NodeJS.ReadableStream>;
  /** Attach stdin, stdout and stderr before `start` (the container must be created with `openStdin`). */
  attachStdio(id: string): Promise<ContainerStdio>;
}

export function hasEngineStorage(runtime: ContainerRuntime): runtime is ContainerRuntime & EngineStorage {
  const r = runtime as Partial<EngineStorage>;
  return typeof r.createVolume === "function" && typeof r.putArchive === "function" && typeof r.attachStdio === "function";
}

/** The runner's own fault talking to the engine; attempt outcomes are never thrown as this. */
export class ContainerRuntimeError extends Error {
  override readonly name = "ContainerRuntimeError";
  constructor(
    message: string,
    readonly code: "not-found" | "conflict" | "invalid-spec" | "build-failed" | "unavailable" | "engine",
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

const ABSOLUTE = /^\//;

/**
 * Checks a spec before it reaches any engine, the same way for the fake and for Docker,
 * so a policy mistake (a host network, a relative bind) fails in unit tests too.
 * Throws `ContainerRuntimeError("invalid-spec")` listing every problem.
 */
export function assertValidSpec(spec: ContainerSpec): void {
  const problems: string[] = [];
  if (!spec.image) problems.push("image is empty");
  const mode: string = spec.networkMode;
  if (!(mode === "none" || mode === "bridge" || /^container:[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(mode))) {
    problems.push(`networkMode ${JSON.stringify(mode)} is not none, bridge or container:<id>`);
  }
  if (spec.networkDisabled === true && mode !== "none") problems.push(`networkDisabled needs networkMode none, not ${JSON.stringify(mode)}`);
  for (const m of spec.mounts) {
    if (m.volume) {
      if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(m.source)) problems.push(`volume name ${JSON.stringify(m.source)} is not a volume name`);
    } else if (!ABSOLUTE.test(m.source)) problems.push(`mount source ${JSON.stringify(m.source)} is not absolute`);
    if (!ABSOLUTE.test(m.target)) problems.push(`mount target ${JSON.stringify(m.target)} is not absolute`);
  }
  if (spec.workspace) {
    if (!ABSOLUTE.test(spec.workspace.target)) problems.push(`workspace target ${JSON.stringify(spec.workspace.target)} is not absolute`);
    if (spec.workspace.hostPath !== undefined && !ABSOLUTE.test(spec.workspace.hostPath)) problems.push(`workspace hostPath ${JSON.stringify(spec.workspace.hostPath)} is not absolute`);
    if (spec.mounts.some((m) => m.target === spec.workspace!.target)) problems.push(`workspace target ${spec.workspace.target} is also a mount target`);
  }
  for (const path of Object.keys(spec.tmpfs)) {
    if (!ABSOLUTE.test(path)) problems.push(`tmpfs path ${JSON.stringify(path)} is not absolute`);
  }
  if (spec.nanoCpus !== undefined && !(Number.isInteger(spec.nanoCpus) && spec.nanoCpus >= 1e7)) {
    problems.push(`nanoCpus ${spec.nanoCpus} is not a whole number of at least 10000000 (0.01 CPU)`);
  }
  for (const name of Object.keys(spec.env)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) problems.push(`env name ${JSON.stringify(name)} is not a variable name`);
  }
  if (problems.length > 0) throw new ContainerRuntimeError(`invalid container spec: ${problems.join("; ")}`, "invalid-spec");
}

/** An empty filter would match every container on the engine, the runner's own or not. */
export function assertLabelFilter(labels: Record<string, string>): void {
  if (Object.keys(labels).length === 0) throw new ContainerRuntimeError("listByLabel needs at least one label", "invalid-spec");
}

/**
 * The network an attempt container joins: none, the engine's bridge, or another container's
 * namespace. `none` with `names: false` says the program looks up no name, not even `localhost`
 * (it reaches the runner's endpoints by 127.0.0.1 and its sockets): a provider may then leave out
 * the name files (hosts, resolver) and whatever sets them up (contract R281).
 */
export type NetworkSetting = { mode: "none"; names?: false } | { mode: "bridge" } | { mode: "container"; id: string };

/**
 * The network of a program that looks up no name (a study attempt's or the adjudicator's CLI, whose
 * every endpoint is 127.0.0.1 or a socket): `none` becomes `none` without names; any other stays as
 * it is. A session's calls and test command keep names: what they run is the repository's own.
 */
export function withoutNames(network: NetworkSetting): NetworkSetting {
  return network.mode === "none" ? { mode: "none", names: false } : network;
}
