import type { ContainerSpec, Mount } from "../runtime/port.ts";

/** Where things live inside the attempt container (the image's layout, see src/image). */
export const CONTAINER = {
  workspace: "/workspace",
  home: "/home/agent",
  user: "1000:1000",
  mcpDir: "/run/study-runner",
  fakeBehaviour: "/fake/behaviour.json",
  fakeRecords: "/fake/records",
} as const;

export type NetworkSetting = { mode: "none" } | { mode: "bridge" } | { mode: "container"; id: string };

export interface AttemptContainerInput {
  image: string;
  /** Arguments after the image's `claude` entrypoint. */
  argv: readonly string[];
  exportDir: string;
  /** Fresh per-attempt HOME on the host holding the copy of the CLI login. */
  homeDir: string;
  /** Host folder holding the doc-bridge socket (MCP arm only). */
  mcpSocketDir?: string;
  network: NetworkSetting;
  labels: Record<string, string>;
  attemptIndex: number;
  /** Extra variables the runner itself decided on (e.g. ANTHROPIC_BASE_URL for a scripted API); never the host's. */
  extraEnv?: Record<string, string>;
  /** Test-only: behaviour file and records folder of the fake claude image. */
  fake?: { behaviourFile?: string; recordsDir?: string };
  runtime?: string;
  memoryBytes?: number;
  pidsLimit?: number;
}

/** Variables that may never reach the container, whatever asked for them. */
const FORBIDDEN_ENV = /^(ANTHROPIC_API_KEY|ANTHROPIC_AUTH_TOKEN|CLAUDE_CODE_OAUTH_TOKEN|AWS_|GOOGLE_|AZURE_)/;

/**
 * The hardened container of one attempt. The environment is built from an allowlist, never
 * copied from the host. HOME is a fresh host folder bind-mounted read-write rather than a
 * tmpfs, because the CLI may refresh its single-use login token there and the runner must
 * write the refreshed login back after the attempt (a tmpfs is gone by then).
 */
export function attemptContainerSpec(input: AttemptContainerInput): ContainerSpec {
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
  for (const name of Object.keys(env)) {
    if (FORBIDDEN_ENV.test(name)) throw new Error(`refusing to pass ${name} into an attempt container`);
  }
  const mounts: Mount[] = [
    { source: input.exportDir, target: CONTAINER.workspace, readOnly: true },
    { source: input.homeDir, target: CONTAINER.home, readOnly: false },
  ];
  if (input.mcpSocketDir) mounts.push({ source: input.mcpSocketDir, target: CONTAINER.mcpDir, readOnly: false });
  if (input.fake?.behaviourFile) mounts.push({ source: input.fake.behaviourFile, target: CONTAINER.fakeBehaviour, readOnly: true });
  if (input.fake?.recordsDir) mounts.push({ source: input.fake.recordsDir, target: CONTAINER.fakeRecords, readOnly: false });
  return {
    image: input.image,
    cmd: [...input.argv],
    env,
    user: CONTAINER.user,
    workingDir: CONTAINER.workspace,
    mounts,
    tmpfs: { "/tmp": "rw,nosuid,nodev,size=256m,mode=1777" },
    readOnlyRootfs: true,
    networkMode: input.network.mode === "container" ? `container:${input.network.id}` : input.network.mode,
    capDrop: ["ALL"],
    securityOpt: ["no-new-privileges"],
    pidsLimit: input.pidsLimit ?? 256,
    memoryBytes: input.memoryBytes ?? 2 * 1024 ** 3,
    labels: input.labels,
    ...(input.runtime ? { runtime: input.runtime } : {}),
  };
}
