import { basename, dirname } from "node:path";
import { stopContainer } from "./stop.ts";
import { EngineApiChannel, type EngineApiOptions } from "./engine-api.ts";
import { ContainerRuntimeError, hasEngineStorage, type ContainerRuntime, type ContainerSpec, type Mount } from "./port.ts";
import { reapOrphans, runnerLabels, type ReapOptions, type ReapResult } from "./reaper.ts";
import type { Endpoint, EndpointName, HostFolder, MemoryVolume, PreparedSandbox, Preparer, Sandbox, SandboxExit, SandboxSpec, SandboxStreams, SandboxSummary } from "./sandbox.ts";

/**
 * The Docker provider of the sandbox seam, over the `ContainerRuntime` port (`DockerRuntime` in
 * production, `FakeRuntime` in unit tests): one sandbox is one container on the engine the runner
 * talks to. Endpoints are the runner's unix sockets, each one's folder bound read-only at a fixed
 * path; the workspace's host copy is bound read-only (the adapter does that); the memory volumes
 * are tmpfs mounts; the liveness token is the runner's pid and host (src/sandbox/reaper.ts).
 */

/** Where the folder of each endpoint's socket is bound inside the container. */
export const ENDPOINT_DIRS: Record<EndpointName, string> = {
  "model-api": "/run/study-runner-api",
  "doc-bridge": "/run/study-runner",
  "egress-proxy": "/run/study-runner-egress",
  "session-channel": "/run/study-runner-session",
};

/** The in-container path of an endpoint's socket on Docker. */
export function dockerEndpointAddress(endpoint: Endpoint): string {
  return `${ENDPOINT_DIRS[endpoint.name]}/${basename(endpoint.socket)}`;
}

function mountOf(f: HostFolder): Mount {
  return { source: f.folder, target: f.target, readOnly: f.readOnly };
}

function tmpfsOptions(v: MemoryVolume): string {
  const owner = v.owner ? `,uid=${v.owner.uid},gid=${v.owner.gid}` : "";
  return `rw,nosuid,nodev,size=${v.bytes}${owner}${v.mode ? `,mode=${v.mode}` : ""}`;
}

/**
 * The container of a sandbox spec. Mounts in a fixed order: the worktree, the staged folder, each
 * endpoint's socket folder (read-only: connecting needs no write access, and the inside can neither
 * replace the socket nor leave files beside it), the test mounts.
 */
export function toContainerSpec(spec: SandboxSpec): ContainerSpec {
  const folders = [...(spec.worktree ? [spec.worktree] : []), ...(spec.staged ? [spec.staged] : [])];
  const endpointMounts = spec.endpoints.map((e) => ({ source: dirname(e.socket), target: ENDPOINT_DIRS[e.name], readOnly: true }));
  const { limits, security, network } = spec;
  return {
    image: spec.image,
    ...(spec.entrypoint ? { entrypoint: [...spec.entrypoint] } : {}),
    cmd: [...spec.cmd],
    env: { ...spec.env },
    ...(spec.user !== undefined ? { user: spec.user } : {}),
    ...(spec.workingDir !== undefined ? { workingDir: spec.workingDir } : {}),
    ...(spec.workspace ? { workspace: spec.workspace } : {}),
    mounts: [...folders.map(mountOf), ...endpointMounts, ...(spec.testMounts ?? []).map(mountOf)],
    tmpfs: Object.fromEntries(spec.memoryVolumes.map((v) => [v.target, tmpfsOptions(v)])),
    readOnlyRootfs: security.readOnlyRoot,
    networkMode: network.mode === "container" ? `container:${network.id}` : network.mode,
    // No name to look up: the engine's network sandbox (hosts and resolver files, its prestart hook) is left out (contract R281).
    ...(network.mode === "none" && network.names === false ? { networkDisabled: true } : {}),
    capDrop: security.dropAllCapabilities ? ["ALL"] : [],
    securityOpt: security.noNewPrivileges ? ["no-new-privileges"] : [],
    ...(limits.pidsLimit !== undefined ? { pidsLimit: limits.pidsLimit } : {}),
    ...(limits.memoryBytes !== undefined ? { memoryBytes: limits.memoryBytes } : {}),
    ...(limits.nanoCpus !== undefined ? { nanoCpus: limits.nanoCpus } : {}),
    labels: { ...spec.labels },
    ...(spec.ociRuntime !== undefined ? { runtime: spec.ociRuntime } : {}),
    ...(spec.init !== undefined ? { init: spec.init } : {}),
  };
}

/** One container as a prepared sandbox. */
class PreparedContainer implements PreparedSandbox {
  constructor(
    private readonly runtime: ContainerRuntime,
    readonly id: string,
  ) {}

  /** Attaches before the start, so no output is lost. */
  async run(): Promise<SandboxStreams> {
    const streams = await this.runtime.attach(this.id);
    await this.runtime.start(this.id);
    return streams;
  }

  async wait(): Promise<SandboxExit> {
    const exit = await this.runtime.wait(this.id);
    const state = await this.runtime.inspect(this.id);
    return { exitCode: exit.exitCode, oomKilled: exit.oomKilled || (state?.oomKilled ?? false), ...(state ? { ociRuntime: state.runtime } : {}) };
  }

  stop(graceMs = 0): Promise<void> {
    return stopContainer(this.runtime, this.id, graceMs);
  }

  cleanup(): Promise<void> {
    return this.runtime.remove(this.id);
  }
}

/**
 * How a sandbox gets its content and reaches the runner's sockets: `host-paths`, folders of the
 * runner's host bound in (an engine on this machine), or `engine-api`, content and streams over
 * the engine's API alone (src/sandbox/engine-api.ts, contract R240).
 */
export type SandboxChannel = "host-paths" | "engine-api";

/** The Docker provider. */
export class DockerSandbox implements Sandbox {
  readonly provider = "docker";
  readonly channel: SandboxChannel;
  /**
   * The same provider given a container spec as it is: Docker only, for tests and probes that set
   * what the provider-neutral spec does not name (a HOME bound from the host, an image's own entrypoint).
   */
  readonly containers: Preparer<ContainerSpec>;

  constructor(
    private readonly runtime: ContainerRuntime,
    options: { channel?: SandboxChannel; engineApi?: EngineApiOptions } = {},
  ) {
    this.channel = options.channel ?? "host-paths";
    this.containers = { prepare: async (spec) => new PreparedContainer(runtime, await runtime.create(spec)) };
    if (this.channel === "engine-api" && hasEngineStorage(runtime)) this.engineApi = new EngineApiChannel(runtime, options.engineApi ?? {});
  }

  private readonly engineApi: EngineApiChannel | undefined;

  prepare(spec: SandboxSpec): Promise<PreparedSandbox> {
    if (this.channel === "host-paths") return this.containers.prepare(toContainerSpec(spec));
    if (!this.engineApi) return Promise.reject(new ContainerRuntimeError("this container runtime offers no engine-api channel", "invalid-spec"));
    return this.engineApi.prepare(spec, toContainerSpec(spec));
  }

  settle(): Promise<void> {
    return this.engineApi?.settle() ?? Promise.resolve();
  }

  reach(endpoint: Endpoint): string {
    return dockerEndpointAddress(endpoint);
  }

  ownerLabels(run: string, attempt: string): Record<string, string> {
    return runnerLabels(run, attempt);
  }

  list(labels: Record<string, string>): Promise<SandboxSummary[]> {
    return this.runtime.listByLabel(labels);
  }

  reap(opts?: ReapOptions): Promise<ReapResult> {
    return reapOrphans(this.runtime, opts);
  }
}

const providers = new WeakMap<ContainerRuntime, Map<SandboxChannel, DockerSandbox>>();

/**
 * The Docker provider over `runtime` on `channel` (one per runtime and channel), as the run kinds
 * use it: on the engine-api channel each relay is made ahead, what a sandbox made is removed in
 * the background, and each export's volume is kept for the run, so every run calls `settle()`
 * before it ends (contract R257, R275).
 */
export function dockerSandbox(runtime: ContainerRuntime, channel: SandboxChannel = "host-paths"): DockerSandbox {
  let byChannel = providers.get(runtime);
  if (!byChannel) providers.set(runtime, (byChannel = new Map()));
  let sandbox = byChannel.get(channel);
  if (!sandbox) byChannel.set(channel, (sandbox = new DockerSandbox(runtime, { channel, engineApi: { ahead: true, keepExports: true } })));
  return sandbox;
}
