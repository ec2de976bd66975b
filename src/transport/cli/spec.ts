import { join } from "node:path";
import type { ContainerSpec, NetworkSetting } from "../../sandbox/port.ts";
import type { Endpoint, HostFolder, SandboxSpec } from "../../sandbox/sandbox.ts";
import { dockerEndpointAddress, ENDPOINT_DIRS, toContainerSpec } from "../../sandbox/docker-sandbox.ts";
import { treeFromFolder } from "../../sandbox/tree.ts";
import { IMAGE_LAYOUT } from "../../image/specs.ts";
import { SOCKET_NAME as MCP_SOCKET_NAME } from "../../mcp/bridge.ts";

/** Where things live inside the attempt container (the image's layout, see src/image). */
export const CONTAINER = {
  workspace: "/workspace",
  home: "/home/agent",
  user: "1000:1000",
  mcpDir: ENDPOINT_DIRS["doc-bridge"],
  /**
   * The host folder with the staged login (`homeDir`), mounted read-write with the login copy
   * (read-only with the gateway's placeholder, see `loginReadOnly`): with-relay.cjs copies
   * the login from it into the tmpfs HOME before the CLI starts and copies a refreshed login back
   * (a bounded regular file only). The agent's reads of it are denied (src/claude/args.ts).
   */
  loginDir: "/run/study-runner-login",
  /**
   * A session call's staged folder (the login, its prompt and the session files it resumes from):
   * under HOME, so that a session call can write nothing outside its worktree and HOME
   * (contract R116), whichever credentials it runs with.
   */
  sessionLoginDir: "/home/agent/.study-runner/login",
  /**
   * The folder of a session call's channel socket (src/transport/cli/session-channel.ts), mounted
   * read-only: with-relay.cjs sends the CLI's session files through that socket when the CLI
   * exits, over a connection it opened before the CLI started (contract R141).
   */
  sessionChannelDir: ENDPOINT_DIRS["session-channel"],
  /** A session call's TMPDIR: under HOME, since a session container has no writable /tmp. */
  sessionTmpDir: "/home/agent/.tmp",
  /** The folder of the model API's unix socket (`modelApiSocket`), mounted read-only. */
  modelApiDir: ENDPOINT_DIRS["model-api"],
  /** The folder of the strict profile's egress proxy socket (`egressProxySocket`), mounted read-only. */
  egressDir: ENDPOINT_DIRS["egress-proxy"],
  withRelay: `${IMAGE_LAYOUT.helpers}/with-relay.cjs`,
  streamRelay: `${IMAGE_LAYOUT.helpers}/stream-relay.cjs`,
  fakeBehaviour: "/fake/behaviour.json",
  fakeRecords: "/fake/records",
} as const;

/**
 * The in-container port of the model API relay (docker/helpers/with-relay.cjs). Fixed: the
 * container has its own network namespace with nothing else listening on loopback.
 */
export const MODEL_API_RELAY_PORT = 8080;
/** The in-container port of the egress proxy relay (isolation "strict"); HTTPS_PROXY names it. */
export const EGRESS_RELAY_PORT = 3128;

/** One CPU per attempt unless `--cpus` says otherwise. */
export const DEFAULT_ATTEMPT_CPUS = 1;
/**
 * The size of the tmpfs HOME: the CLI writes its config, backups and telemetry there (a few
 * hundred KiB in a measured attempt). A tmpfs is charged to the container's memory limit, so
 * filling it can neither fill the host's disk nor pass that limit.
 */
export const DEFAULT_HOME_BYTES = 64 * 1024 * 1024;

function homeBytesOf(bytes: number | undefined): number {
  const value = bytes ?? DEFAULT_HOME_BYTES;
  if (!Number.isInteger(value) || value < 1024 * 1024) throw new Error(`the HOME size bound must be a whole number of bytes of at least 1 MiB, got ${value}`);
  return value;
}

/** `--cpus` into Docker's NanoCpus: a positive number of CPUs, at least 0.01. */
export function nanoCpusOf(cpus: number): number {
  if (!Number.isFinite(cpus) || cpus < 0.01) throw new Error(`the CPU limit must be a number of CPUs of at least 0.01, got ${cpus}`);
  return Math.round(cpus * 1e9);
}

export interface AttemptContainerInput {
  image: string;
  /** Arguments after the image's `claude` entrypoint. */
  argv: readonly string[];
  exportDir: string;
  /** The export hash the runner computed of `exportDir` (checked by a provider that copies the tree in). */
  exportHash?: string;
  /**
   * Fresh per-attempt folder on the host holding the copy of the CLI login (stageLogin's
   * `homeDir`). It is not the container's HOME: that is a tmpfs of `homeBytes`; this folder is
   * mounted at CONTAINER.loginDir (CONTAINER.sessionLoginDir for a session), the login is copied in before the CLI starts and a refresh
   * copied back out.
   */
  homeDir: string;
  /** Size bound of the tmpfs HOME (DEFAULT_HOME_BYTES otherwise). */
  homeBytes?: number;
  /** CPUs the container may use (DEFAULT_ATTEMPT_CPUS otherwise). */
  cpus?: number;
  /** Host folder holding the doc-bridge socket (MCP arm only). */
  mcpSocketDir?: string;
  network: NetworkSetting;
  labels: Record<string, string>;
  attemptIndex: number;
  /** No unit of the run starts after this one: the sandbox makes nothing ahead (contract R257). */
  last?: boolean;
  /**
   * Host path of a unix socket where a Messages API listens (the scripted API of the
   * conformance tests and the demo). Its folder is bind-mounted read-only, the entrypoint
   * becomes with-relay.cjs, which relays 127.0.0.1:MODEL_API_RELAY_PORT in the container to the
   * socket, and ANTHROPIC_BASE_URL names that port. Only with network "none": the route stays on
   * loopback and unix sockets. The folder should hold nothing but the socket (the agent can read it).
   */
  modelApiSocket?: string;
  /**
   * Isolation "strict" (contract R71): host path of the unix socket of the runner's egress proxy
   * (src/isolation/proxy.ts). Its folder is bind-mounted read-only, with-relay.cjs relays
   * 127.0.0.1:EGRESS_RELAY_PORT to it, and HTTPS_PROXY and HTTP_PROXY name that port. Only with
   * network "none": the proxy is the container's one way out.
   */
  egressProxySocket?: string;
  /** Extra variables the runner itself decided on; never the host's, never ANTHROPIC_BASE_URL (see modelApiSocket) or a proxy variable. */
  extraEnv?: Record<string, string>;
  /**
   * A session task: the working folder is the session's own writable worktree (not the read-only
   * export), the CLI's stdin is `stdinFile` and its session files are staged from `projectsDir`
   * (in-container paths under CONTAINER.sessionLoginDir, where the staged folder is mounted for a
   * session; see with-relay.cjs) and leave through `channelSocket`, the host path of the session
   * channel's socket, whose folder is mounted read-only at CONTAINER.sessionChannelDir (contract
   * R141). Everything a session call can write is its worktree and HOME (contract R116): the
   * staged folder is under HOME, and there is no tmpfs /tmp (TMPDIR is CONTAINER.sessionTmpDir).
   */
  session?: { stdinFile?: string; projectsDir: string; channelSocket: string };
  /**
   * The staged login folder is mounted read-only: with the model gateway it holds a placeholder
   * that is never refreshed, so nothing needs to be written back through it.
   */
  loginReadOnly?: boolean;
  /** A session's worktree: the working folder is bound read-write (the next call needs the edits). */
  writableWorkspace?: boolean;
  /** Test-only: behaviour file and records folder of the fake claude image. */
  fake?: { behaviourFile?: string; recordsDir?: string };
  runtime?: string;
  memoryBytes?: number;
  pidsLimit?: number;
}

/** Variables that may never reach the container, whatever asked for them. */
const FORBIDDEN_ENV = /^(ANTHROPIC_API_KEY|ANTHROPIC_AUTH_TOKEN|CLAUDE_CODE_OAUTH_TOKEN|AWS_|GOOGLE_|AZURE_)/;

/**
 * The environment from an allowlist, never copied from the host. Where the CLI sends its login
 * token and its other traffic is the runner's decision alone (`modelApiSocket`, `egressProxySocket`):
 * neither a base URL nor a proxy variable may come in through `extraEnv`, and both need network "none".
 */
function attemptEnv(input: AttemptContainerInput): Record<string, string> {
  const env: Record<string, string> = {
    HOME: CONTAINER.home,
    USER: "agent",
    PATH: "/usr/local/bin:/usr/bin:/bin",
    LANG: "C.UTF-8",
    TERM: "dumb",
    TMPDIR: "/tmp",
    DISABLE_AUTOUPDATER: "1",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    STUDY_RUNNER_ATTEMPT: String(input.attemptIndex),
    ...input.extraEnv,
  };
  // A session call writes nothing outside its worktree and HOME (contract R116): no /tmp either.
  if (input.session) env.TMPDIR = CONTAINER.sessionTmpDir;
  for (const name of Object.keys(env)) {
    if (FORBIDDEN_ENV.test(name)) throw new Error(`refusing to pass ${name} into an attempt container`);
  }
  if (input.extraEnv && Object.hasOwn(input.extraEnv, "ANTHROPIC_BASE_URL")) throw new Error("refusing ANTHROPIC_BASE_URL in extraEnv; use modelApiSocket");
  // Likewise the route out: a proxy variable from elsewhere could bypass the strict profile's proxy.
  const proxyVariable = Object.keys(input.extraEnv ?? {}).find((k) => /^(https?|all|no)_proxy$/i.test(k));
  if (proxyVariable) throw new Error(`refusing ${proxyVariable} in extraEnv; use egressProxySocket`);
  if (input.modelApiSocket !== undefined) {
    if (input.network.mode !== "none") throw new Error(`a model API on a unix socket needs network "none", not "${input.network.mode}"`);
    env.ANTHROPIC_BASE_URL = `http://127.0.0.1:${MODEL_API_RELAY_PORT}`;
  }
  if (input.egressProxySocket !== undefined) {
    if (input.network.mode !== "none") throw new Error(`the egress proxy needs network "none", not "${input.network.mode}"`);
    const proxy = `http://127.0.0.1:${EGRESS_RELAY_PORT}`;
    env.HTTPS_PROXY = proxy;
    env.HTTP_PROXY = proxy;
    // A model API behind the relay (and anything else on loopback) is reached directly.
    env.NO_PROXY = "127.0.0.1,localhost";
  }
  return env;
}

/** The runner's services this attempt may reach, each named by what it is. */
function attemptEndpoints(input: AttemptContainerInput): { sessionChannel?: Endpoint; docBridge?: Endpoint; modelApi?: Endpoint; egressProxy?: Endpoint } {
  return {
    ...(input.session !== undefined ? { sessionChannel: { name: "session-channel", socket: input.session.channelSocket } } : {}),
    ...(input.mcpSocketDir ? { docBridge: { name: "doc-bridge", socket: join(input.mcpSocketDir, MCP_SOCKET_NAME) } } : {}),
    ...(input.modelApiSocket !== undefined ? { modelApi: { name: "model-api", socket: input.modelApiSocket } } : {}),
    ...(input.egressProxySocket !== undefined ? { egressProxy: { name: "egress-proxy", socket: input.egressProxySocket } } : {}),
  };
}

/**
 * with-relay.cjs's arguments: it stages the login from the staged folder, starts the relays to the
 * endpoints (at the addresses the sandbox reaches them at) before the CLI, and exits with the CLI's
 * code (docs/claude-cli-observations.md).
 */
function relayArgs(input: AttemptContainerInput, loginTarget: string, endpoints: ReturnType<typeof attemptEndpoints>, reach: (e: Endpoint) => string): string[] {
  return [
    "--login",
    loginTarget,
    ...(endpoints.modelApi ? ["--api", reach(endpoints.modelApi)] : []),
    ...(endpoints.egressProxy ? ["--proxy", reach(endpoints.egressProxy)] : []),
    ...(input.session?.stdinFile !== undefined ? ["--stdin", input.session.stdinFile] : []),
    ...(input.session !== undefined ? ["--projects", input.session.projectsDir] : []),
    ...(endpoints.sessionChannel ? ["--session-out", reach(endpoints.sessionChannel)] : []),
  ];
}

/**
 * The hardened sandbox of one attempt. The environment is built from an allowlist, never copied
 * from the host. HOME is a size-bounded in-memory volume, so whatever the CLI writes there cannot
 * fill the host's disk; the login reaches it, and a refreshed single-use token leaves it, only
 * through with-relay.cjs and the staged login folder (the volume is gone once the sandbox stops,
 * so the refresh is copied out as it happens and again when the CLI exits). `reach` is the
 * sandbox's (`Sandbox.reach`): where the inside finds each endpoint.
 */
export function attemptSandboxSpec(input: AttemptContainerInput, reach: (endpoint: Endpoint) => string): SandboxSpec {
  const loginTarget = input.session ? CONTAINER.sessionLoginDir : CONTAINER.loginDir;
  const endpoints = attemptEndpoints(input);
  // The export is handed over as a tree (content), not as a host path: see docs/scaling.md. A
  // session's worktree is different: the agent edits it and the next call must find the edits, so
  // it is a writable folder of the host.
  const testMounts: HostFolder[] = [
    ...(input.fake?.behaviourFile ? [{ folder: input.fake.behaviourFile, target: CONTAINER.fakeBehaviour, readOnly: true }] : []),
    ...(input.fake?.recordsDir ? [{ folder: input.fake.recordsDir, target: CONTAINER.fakeRecords, readOnly: false }] : []),
  ];
  return {
    image: input.image,
    entrypoint: [IMAGE_LAYOUT.node, CONTAINER.withRelay, ...relayArgs(input, loginTarget, endpoints, reach), "--", IMAGE_LAYOUT.claude],
    cmd: [...input.argv],
    env: attemptEnv(input),
    user: CONTAINER.user,
    workingDir: CONTAINER.workspace,
    ...(input.writableWorkspace
      ? { worktree: { folder: input.exportDir, target: CONTAINER.workspace, readOnly: false }, userFolder: IMAGE_LAYOUT.home }
      : { workspace: treeFromFolder(CONTAINER.workspace, input.exportDir, input.exportHash) }),
    staged: { folder: input.homeDir, target: loginTarget, readOnly: input.loginReadOnly === true },
    // In this order: the session channel, the doc-bridge, the model API, the egress proxy.
    endpoints: [endpoints.sessionChannel, endpoints.docBridge, endpoints.modelApi, endpoints.egressProxy].filter((e): e is Endpoint => e !== undefined),
    ...(testMounts.length > 0 ? { testMounts } : {}),
    memoryVolumes: [
      ...(input.session ? [] : [{ target: "/tmp", bytes: 256 * 1024 ** 2, mode: "1777" }]),
      { target: CONTAINER.home, bytes: homeBytesOf(input.homeBytes), owner: { uid: IMAGE_LAYOUT.uid, gid: IMAGE_LAYOUT.gid }, mode: "0700" },
    ],
    limits: { pidsLimit: input.pidsLimit ?? 256, memoryBytes: input.memoryBytes ?? 2 * 1024 ** 3, nanoCpus: nanoCpusOf(input.cpus ?? DEFAULT_ATTEMPT_CPUS) },
    security: { readOnlyRoot: true, dropAllCapabilities: true, noNewPrivileges: true },
    network: input.network,
    labels: input.labels,
    ...(input.runtime ? { ociRuntime: input.runtime } : {}),
    streamRelay: [IMAGE_LAYOUT.node, CONTAINER.streamRelay],
    ...(input.last ? { last: true } : {}),
  };
}

/** The attempt's container on the Docker provider (unit tests of the policy, conformance runs). */
export function attemptContainerSpec(input: AttemptContainerInput): ContainerSpec {
  return toContainerSpec(attemptSandboxSpec(input, dockerEndpointAddress));
}
