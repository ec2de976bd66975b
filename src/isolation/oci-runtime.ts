import { createServer, type Socket } from "node:net";
import { IMAGE_LAYOUT } from "../image/specs.ts";
import { join } from "node:path";
import type { ContainerRuntime, EngineInfo, NetworkMode } from "../sandbox/port.ts";
import { readBoundedText } from "../sandbox/output.ts";
import { DockerSandbox, type SandboxChannel } from "../sandbox/docker-sandbox.ts";
import type { Endpoint, PreparedSandbox, SandboxSpec } from "../sandbox/sandbox.ts";
import { assertSocketOwner, listenForContainer } from "../util/container-socket.ts";
import { RefusalError, errorMessage } from "../util/errors.ts";
import { makeRunnerFolder } from "../util/orphans.ts";
import { removeTree } from "../export/export.ts";

/**
 * `--runtime NAME` (docs/isolation.md, "gVisor"): before anything is reserved, the engine must
 * offer the runtime, and one probe container must show, under that runtime, what every attempt
 * container of the run will need from it: to start with the run's network, hardened as an attempt
 * is; to have a network interface besides loopback when the attempts use the bridge; and, when
 * the run reaches anything through a bind-mounted unix socket (the gateway, the doc-bridge, the
 * strict profile's proxy, a Messages API socket, a session's gateway), to connect to one and be
 * answered. What the run needs is derived from its plan by the caller; what the runtime does is
 * measured, never assumed from its name. A failure refuses the run naming the limit and the fix,
 * so nothing fails in the middle of an attempt. The probe is a sandbox on the run's own channel
 * (contract R273): on engine-api its socket is served by the relay container in a volume, as an
 * attempt's are, since an engine that cannot see the runner's files cannot bind a runner folder.
 */

const PROBE_SOCKET = "probe.sock";
/** The probe's tmpfs /tmp and HOME, as the version probe's (src/image/build.ts probeSpec). */
const PROBE_VOLUME_BYTES = 16 * 1024 * 1024;
const PROBE_TIMEOUT_MS = 60_000;
const PROBE_OUTPUT_LIMIT = 16 * 1024;

/** What the run's containers will need of the runtime, derived from the run's plan. */
export interface RuntimeNeeds {
  network: NetworkMode;
  /** Why a bind-mounted unix socket is needed (e.g. "the model gateway"); empty when none is. */
  unixSockets: readonly string[];
}

export interface RuntimeProbe {
  /** The kernel release the container saw (gVisor reports its own, e.g. 4.4.0, not the host's). */
  kernel: string;
  /** The network interfaces the container saw. */
  interfaces: string[];
  /** "ok", or why connecting to the bind-mounted socket failed (an errno code or "no answer"). */
  socket: string;
}

/** The node script the probe container runs: lists its interfaces, then connects to the socket and expects "pong". */
const PROBE_SCRIPT = `
const os = require("os");
const out = { kernel: os.release(), interfaces: Object.keys(os.networkInterfaces()).sort(), socket: "no answer" };
const done = () => { process.stdout.write(JSON.stringify(out) + "\\n"); process.exit(0); };
const s = require("net").connect(process.argv[1]);
s.setTimeout(10000, () => { out.socket = "timed out"; done(); });
s.on("error", (e) => { out.socket = e.code || String(e.message); done(); });
s.on("connect", () => s.write("ping\\n"));
let got = "";
s.on("data", (d) => { got += d; if (got.includes("pong")) { out.socket = "ok"; done(); } });
s.on("end", done);
`;

/** The engine must offer the named runtime (contract R19); checked before anything else of the runtime. */
export function assertRuntimeOffered(engine: EngineInfo, name: string | undefined, flag: string): void {
  if (name === undefined || engine.runtimes.includes(name)) return;
  throw new RefusalError(
    `the Docker engine has no OCI runtime '${name}' (${flag}); it offers ${engine.runtimes.join(", ") || "none"}; install and register it (docs/isolation.md, "gVisor"), or drop ${flag}; nothing was charged`,
  );
}

/** What a run's containers need of the runtime, from what the run will use. */
export function runtimeNeeds(o: { network: NetworkMode; gateway: boolean; modelApiSocket: boolean; docBridge?: boolean; egressProxy?: boolean }): RuntimeNeeds {
  const unixSockets = [
    ...(o.gateway ? ["the model gateway"] : []),
    ...(o.modelApiSocket ? ["the Messages API socket (--model-api-socket)"] : []),
    ...(o.docBridge ? ["the doc-bridge server (the mcp arm)"] : []),
    ...(o.egressProxy ? ["the egress proxy (--isolation strict)"] : []),
  ];
  return { network: o.network, unixSockets };
}

/**
 * The OCI runtime every container of the run is created with: the named one (already offered),
 * checked by a probe container, or the engine's default (recorded by name, so the ledger always
 * says which runtime ran).
 */
export async function resolveOciRuntime(
  runtime: ContainerRuntime,
  engine: EngineInfo,
  input: { name?: string; flag: string; image: string; needs: RuntimeNeeds; labels: Record<string, string>; channel?: SandboxChannel },
): Promise<string> {
  if (input.name === undefined) return engine.defaultRuntime;
  assertRuntimeOffered(engine, input.name, input.flag);
  // The engine's default is the runtime every other check of the preflight (the image's version) already ran under.
  if (input.name === engine.defaultRuntime) return input.name;
  // A runner that cannot share a socket with the container user is refused for that, not for the runtime.
  if (input.needs.unixSockets.length > 0) {
    try {
      assertSocketOwner(input.needs.unixSockets.join(", "));
    } catch (err) {
      throw new RefusalError(`${errorMessage(err)}; nothing was charged`);
    }
  }
  let probe: RuntimeProbe;
  try {
    probe = await probeOciRuntime(runtime, input.image, input.name, input.needs.network, input.labels, input.channel);
  } catch (err) {
    throw new RefusalError(
      `the OCI runtime '${input.name}' (${input.flag}) could not run a probe container of ${input.image} with network ${input.needs.network}: ${errorMessage(err).slice(0, 600)}; ${gvisorHint(input.name, "start")}; nothing was charged`,
    );
  }
  const problem = runtimeProblem(input.name, input.flag, input.needs, probe);
  if (problem) throw new RefusalError(`${problem}; nothing was charged`);
  return input.name;
}

/** What the probe shows the runtime cannot give the run, or null. Pure, for the preflight and the doctor. */
export function runtimeProblem(name: string, flag: string, needs: RuntimeNeeds, probe: RuntimeProbe): string | null {
  if (needs.unixSockets.length > 0 && probe.socket !== "ok") {
    return `under the OCI runtime '${name}' (${flag}) a container cannot connect to a host unix socket bind-mounted into it (${probe.socket}), and this run reaches ${needs.unixSockets.join(", ")} through one; ${gvisorHint(name, "socket")}`;
  }
  if (needs.network === "bridge" && !probe.interfaces.some((i) => i !== "lo")) {
    return `under the OCI runtime '${name}' (${flag}) a container on the bridge network sees only ${probe.interfaces.join(", ") || "no interface"}, so the CLI could not reach the API; ${gvisorHint(name, "network")}`;
  }
  return null;
}

/** The fix for each limit, as gVisor's runsc names it (docs/isolation.md, "gVisor"). */
function gvisorHint(name: string, limit: "start" | "socket" | "network"): string {
  const subject = /runsc|gvisor/i.test(name) ? `gVisor (${name})` : `if '${name}' is gVisor, it`;
  switch (limit) {
    case "start":
      return `${subject} must be registered with the runtimeArgs --network=none (it cannot set up a network in the engine's root network namespace) and a platform the host supports (--platform=ptrace, or kvm where /dev/kvm exists)`;
    case "socket":
      return `${subject} refuses host unix sockets unless runsc runs with --host-uds=open in the runtime's runtimeArgs; register it so, or use --credentials login-copy with a repository-only plan and no --isolation strict`;
    case "network":
      return `${subject} registered with --network=none has no network of its own; use --isolation offline or strict with the model gateway (the default), or register a second runtime without --network=none for the bridge`;
  }
}

/**
 * The probe as a sandbox of the run's channel: the image's node runs PROBE_SCRIPT as the container
 * user, hardened as an attempt is, and connects to `endpoint` where an attempt reaches the model
 * gateway (a bound folder on host-paths, the relay's volume on engine-api).
 */
function probeSandboxSpec(o: { image: string; runtime: string; network: NetworkMode; labels: Record<string, string>; endpoint: Endpoint; address: string }): SandboxSpec {
  if (o.network !== "none" && o.network !== "bridge") throw new Error(`the runtime probe runs with network none or bridge, not ${o.network}`);
  return {
    image: o.image,
    entrypoint: [IMAGE_LAYOUT.node],
    cmd: ["-e", PROBE_SCRIPT, o.address],
    env: {},
    user: IMAGE_LAYOUT.user,
    memoryVolumes: [
      { target: "/tmp", bytes: PROBE_VOLUME_BYTES },
      { target: IMAGE_LAYOUT.home, bytes: PROBE_VOLUME_BYTES, owner: { uid: IMAGE_LAYOUT.uid, gid: IMAGE_LAYOUT.gid } },
    ],
    endpoints: [o.endpoint],
    limits: { pidsLimit: 64 },
    security: { readOnlyRoot: true, dropAllCapabilities: true, noNewPrivileges: true },
    // As the attempt it stands for: with network none, no name to look up either (contract R281).
    network: o.network === "none" ? { mode: "none", names: false } : { mode: o.network },
    ociRuntime: o.runtime,
    labels: o.labels,
    streamRelay: [IMAGE_LAYOUT.node, `${IMAGE_LAYOUT.helpers}/stream-relay.cjs`],
  };
}

/** Runs the probe sandbox under `name`, on `channel`, with a fresh socket served on the host; throws when it cannot run. */
export async function probeOciRuntime(
  runtime: ContainerRuntime,
  image: string,
  name: string,
  network: NetworkMode,
  labels: Record<string, string>,
  channel: SandboxChannel = "host-paths",
): Promise<RuntimeProbe> {
  const dir = await makeRunnerFolder("probe");
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    s.on("error", () => undefined);
    s.once("data", () => s.end("pong\n"));
  });
  let prepared: PreparedSandbox | undefined;
  try {
    await listenForContainer(server, dir, PROBE_SOCKET);
    // A provider of its own: nothing made ahead or removed in the background, for a probe the doctor runs alone.
    const sandbox = new DockerSandbox(runtime, { channel });
    const endpoint: Endpoint = { name: "model-api", socket: join(dir, PROBE_SOCKET) };
    prepared = await sandbox.prepare(probeSandboxSpec({ image, runtime: name, network, labels, endpoint, address: sandbox.reach(endpoint) }));
    const { stdout, stderr } = await prepared.run();
    const output = Promise.all([readBoundedText(stdout, PROBE_OUTPUT_LIMIT), readBoundedText(stderr, PROBE_OUTPUT_LIMIT)]);
    output.catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), PROBE_TIMEOUT_MS)));
    const exit = await Promise.race([prepared.wait(), timedOut]).finally(() => clearTimeout(timer));
    if (exit === "timeout") {
      await prepared.stop();
      throw new Error(`the probe did not finish in ${PROBE_TIMEOUT_MS / 1000} s`);
    }
    const [text, errText] = await output;
    if (exit.exitCode !== 0) throw new Error(`the probe exited ${exit.exitCode}: ${errText.trim().slice(0, 400)}`);
    const parsed = JSON.parse(text.trim().split("\n").pop() ?? "") as RuntimeProbe;
    if (!Array.isArray(parsed.interfaces) || typeof parsed.socket !== "string" || typeof parsed.kernel !== "string") throw new Error(`the probe printed ${JSON.stringify(text.slice(0, 200))}`);
    return { kernel: parsed.kernel, interfaces: parsed.interfaces.map(String), socket: parsed.socket };
  } finally {
    await prepared?.cleanup().catch(() => undefined);
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await removeTree(dir);
  }
}
