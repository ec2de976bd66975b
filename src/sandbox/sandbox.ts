import type { NetworkSetting, ProgramSpec, Workspace } from "./port.ts";
import type { ReapOptions, ReapResult } from "./reaper.ts";

/**
 * The sandbox seam: where one run of a program (an attempt's CLI, a session's test command) takes
 * place, in the runner's own terms and shaped by what a provider other than the local Docker engine
 * needs (docs/scaling.md maps every operation to Docker as it is and to Kubernetes): the image by
 * id or digest, the workspace as content, the HOME as a bounded in-memory volume, the runner's
 * services named as endpoints rather than as host socket paths, limits, security settings, the OCI
 * runtime and the labels that name the owner. `docker-sandbox.ts` is the Docker provider, written
 * over the engine-shaped `ContainerRuntime` port; nothing above this file needs to know which one runs.
 */

/** The runner's services a sandbox may reach, by what they are. */
export type EndpointName = "model-api" | "doc-bridge" | "egress-proxy" | "session-channel";

/**
 * One service of the runner the sandbox may reach. Today every endpoint is a unix socket the runner
 * serves on its own host; the provider decides how the inside reaches it (`Sandbox.reach`): on
 * Docker, the socket's folder bound read-only into the container; past one machine, a TCP address
 * behind a per-attempt token and a NetworkPolicy.
 */
export interface Endpoint {
  name: EndpointName;
  /** Where the runner serves it: a unix socket on the runner's host. */
  socket: string;
}

/** A size-bounded in-memory volume (a tmpfs on Docker, an `emptyDir` with `medium: Memory` on Kubernetes), counted against the memory limit. */
export interface MemoryVolume {
  target: string;
  bytes: number;
  /** Owner of the volume's root; root's when absent. */
  owner?: { uid: number; gid: number };
  /** Octal permission string of the volume's root (e.g. `0700`, `1777`). */
  mode?: string;
}

/** A folder of the runner's host the sandbox sees by path (not as content). */
export interface HostFolder {
  target: string;
  folder: string;
  readOnly: boolean;
}

export interface SandboxSpec extends ProgramSpec {
  /** The read-only tree the run works on (an attempt's export), as content. */
  workspace?: Workspace;
  /** A folder worked in by path (a session's worktree, kept between calls; read-only for its test command). */
  worktree?: HostFolder;
  /**
   * An empty folder of the image that `user` owns (its HOME): a provider that copies `worktree` in
   * gives the copy's root that folder's owner, as the runner gives its own copy (contract R245).
   */
  userFolder?: string;
  /** A folder the runner staged for this run (the login copy or the gateway's placeholder, a session call's prompt and files). */
  staged?: HostFolder;
  /** The HOME and the scratch space, each a bounded in-memory volume. */
  memoryVolumes: MemoryVolume[];
  /** The runner's services the run may reach; nothing else is reachable unless `network` says so. */
  endpoints: Endpoint[];
  /** Test-only host paths (the fake claude image's behaviour file and records folder). */
  testMounts?: HostFolder[];
  limits: {
    /** Hard memory limit; no swap beyond it. */
    memoryBytes?: number;
    /** Billionths of a CPU: 1e9 is one CPU. */
    nanoCpus?: number;
    pidsLimit?: number;
  };
  security: {
    readOnlyRoot: boolean;
    dropAllCapabilities: boolean;
    noNewPrivileges: boolean;
  };
  network: NetworkSetting;
  /** OCI runtime name (e.g. `runsc`; a RuntimeClass on Kubernetes); the provider's default when absent. */
  ociRuntime?: string;
  /** Ownership and attempt labels, the liveness token among them (see `Sandbox.ownerLabels`). */
  labels: Record<string, string>;
  /** A minimal init as PID 1 that forwards signals and reaps orphans. */
  init?: boolean;
  /**
   * The image's program that serves `endpoints` inside when the provider carries them as streams
   * (the Docker provider's engine-api channel: docker/helpers/stream-relay.cjs); it is told the
   * `<name>=<socket>` pairs by its first frame, as it may start before they are known. Unused when
   * the provider binds the socket folders.
   */
  streamRelay?: string[];
  /**
   * No sandbox of the run is prepared after this one: a provider that makes the next sandbox's
   * parts ahead while this one runs makes none for it (contract R257).
   */
  last?: boolean;
}

/**
 * The provider could not set a sandbox up for a reason of its own, not the runner's (the engine-api
 * relay did not listen in time, contract R258): `runBounded` returns it as the run's setup fault,
 * and the attempt is recorded invalid-setup and charged instead of stopping the run as a fault of
 * the runner. Everything the provider made for it has been removed.
 */
export class SandboxSetupError extends Error {
  override readonly name = "SandboxSetupError";
}

/** The run's output: stdout and stderr kept apart, both ending when the output ends. */
export interface SandboxStreams {
  stdout: NodeJS.ReadableStream;
  stderr: NodeJS.ReadableStream;
}

export interface SandboxExit {
  exitCode: number;
  oomKilled: boolean;
  /** The OCI runtime the run had, as the provider reports it. */
  ociRuntime?: string;
  /** The engine-api channel's stream broke its format or bounds: the run is invalid-setup (contract R242). */
  channelFault?: string;
  /** What a copy of a writable folder back to the runner left out. */
  copyBackProblems?: string[];
}

export interface SandboxSummary {
  id: string;
  labels: Record<string, string>;
  running: boolean;
}

/** One prepared sandbox: made, not yet running. Every operation is safe to repeat. */
export interface PreparedSandbox {
  readonly id: string;
  /** Starts the program and hands over its streams; nothing it writes is lost. */
  run(): Promise<SandboxStreams>;
  /** Resolves once the program has ended; a non-zero exit or an OOM kill is a result, not an error. */
  wait(): Promise<SandboxExit>;
  /**
   * Stops the program: a SIGTERM, then after `graceMs` (0: at once) a SIGKILL. No error when it has
   * already ended or is gone.
   */
  stop(graceMs?: number): Promise<void>;
  /** Removes everything `prepare` made, stopping the program if needed; no error when already gone. */
  cleanup(): Promise<void>;
}

/** Something that prepares sandboxes from a spec of type `S` (a `Sandbox` from a `SandboxSpec`). */
export interface Preparer<S> {
  prepare(spec: S): Promise<PreparedSandbox>;
}

export interface Sandbox extends Preparer<SandboxSpec> {
  /** The provider's name (`docker`). */
  readonly provider: string;
  /** Makes the sandbox (the image must exist); nothing runs yet. The runner's own faults throw. */
  prepare(spec: SandboxSpec): Promise<PreparedSandbox>;
  /** The address at which the inside of a sandbox reaches `endpoint` (what the relay in the image connects to). */
  reach(endpoint: Endpoint): string;
  /** The labels naming this runner process as the owner of a run's sandbox, its liveness token included (a pid on Docker, a Lease on Kubernetes). */
  ownerLabels(run: string, attempt: string): Record<string, string>;
  /** Sandboxes (running or not) carrying every given label; at least one label. */
  list(labels: Record<string, string>): Promise<SandboxSummary[]>;
  /** Removes the sandboxes whose owner's liveness token is dead; keeps what it cannot prove orphaned. */
  reap(opts?: ReapOptions): Promise<ReapResult>;
  /**
   * Waits until everything the provider made is removed: what it made ahead for sandboxes not
   * prepared, and what `cleanup` left to remove in the background. A run calls it before it ends.
   */
  settle(): Promise<void>;
}
