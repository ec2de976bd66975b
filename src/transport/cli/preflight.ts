import { tmpdir } from "node:os";
import { join } from "node:path";
import { probeVersion, runnerFilesProblem, useRunProfile, type ProbedVersion } from "../../image/build.ts";
import { assertRuntimeOffered, resolveOciRuntime, runtimeNeeds } from "../../isolation/oci-runtime.ts";
import type { IsolationProfile } from "../../isolation/profile.ts";
import { runnerLabels } from "../../sandbox/reaper.ts";
import { hasEngineStorage, type ContainerRuntime, type EngineInfo } from "../../sandbox/port.ts";
import type { SandboxChannel } from "../../sandbox/docker-sandbox.ts";
import { errorMessage, RefusalError } from "../../util/errors.ts";
import { GATEWAY_SOCKET_NAME } from "../../gateway/gateway.ts";
import { EGRESS_SOCKET_NAME } from "../../isolation/proxy.ts";
import { SOCKET_NAME as MCP_SOCKET_NAME } from "../../mcp/bridge.ts";
import { serviceSocketDir, socketPathProblem } from "../../util/container-socket.ts";
import { runnerFolderShape, type FolderKind } from "../../util/orphans.ts";
import { SESSION_CHANNEL_SOCKET, sessionChannelPaths } from "./session-channel.ts";

/**
 * The container half of the preflight of a kind that runs the CLI in containers (the study and
 * the adjudicator), before anything is reserved: the engine answers and offers the `--runtime`
 * asked for, the image's CLI is the expected version, and one probe container shows that the
 * runtime gives what the units will use (docs/isolation.md, "gVisor"). Each refusal is a
 * RefusalError: nothing was charged.
 */

/** The engine, or a refusal naming what to do; `--runtime` must be one it offers. */
export async function reachEngine(runtime: ContainerRuntime, runtimeName: string | undefined): Promise<EngineInfo> {
  let engine: EngineInfo;
  try {
    engine = await runtime.ping();
  } catch (err) {
    const why = errorMessage(err);
    // A certificate the TLS handshake refused is what to fix, not the engine or its address.
    throw new RefusalError(`the Docker engine is not reachable (${why})${/DOCKER_CERT_PATH/.test(why) ? "" : "; start it or set DOCKER_HOST"}; nothing was charged`);
  }
  assertRuntimeOffered(engine, runtimeName, "--runtime");
  return engine;
}

/** The ledger's `sandbox` header: the provider, the channel the preflight chose and the engine it runs on (contract R244). */
export function sandboxHeader(engine: EngineInfo, channel: SandboxChannel): { provider: "docker"; channel: SandboxChannel; endpoint: string; os: string | null; arch: string | null } {
  return { provider: "docker", channel, endpoint: engine.endpoint, os: engine.os ?? null, arch: engine.arch ?? null };
}

/** How the units reach the model and their servers, which decides their network and bind-mounted sockets. */
export interface UnitRoute {
  isolation: IsolationProfile;
  /** The units go through the runner's gateway (`--credentials gateway`). */
  gateway: boolean;
  /** A Messages API on a host unix socket (`--model-api-socket`). */
  modelApiSocket: boolean;
  /** The study's mcp arm: the doc-bridge server's socket. */
  docBridge?: boolean;
  /** Session calls: the session files' channel socket. */
  session?: boolean;
}

/** The image's CLI version (refused unless it is `expectedCliVersion`) and the OCI runtime every unit's container is created with. */
export async function probeCliImage(
  runtime: ContainerRuntime,
  engine: EngineInfo,
  o: { image: string; expectedCliVersion: string; runtimeName: string | undefined; runId: string; route: UnitRoute; channel?: SandboxChannel },
): Promise<{ probed: ProbedVersion; ociRuntime: string; channel: SandboxChannel }> {
  const probed = await probeVersion(runtime, o.image, { labels: runnerLabels(o.runId, "probe"), runtime: o.runtimeName });
  if (probed.version !== o.expectedCliVersion) {
    throw new RefusalError(`image ${o.image} reports claude ${probed.version}, but ${o.expectedCliVersion} is expected (--cli-version); nothing was charged`);
  }
  useRunProfile(probed, o.image, o.expectedCliVersion);
  const channel = await chooseSandboxChannel(runtime, probed.imageId, o);
  const { isolation, gateway, modelApiSocket, docBridge } = o.route;
  const ociRuntime = await resolveOciRuntime(runtime, engine, {
    name: o.runtimeName,
    flag: "--runtime",
    image: o.image,
    labels: runnerLabels(o.runId, "probe"),
    channel,
    needs: runtimeNeeds({
      network: isolation === "standard" && !modelApiSocket && !gateway ? "bridge" : "none",
      gateway,
      modelApiSocket,
      docBridge,
      egressProxy: isolation === "strict" && !gateway,
    }),
  });
  return { probed, ociRuntime, channel };
}

/**
 * How the units' sandboxes (a study's attempts, the adjudicator's items, session calls and their
 * test commands) get their content and reach the runner's sockets (contract R244): the
 * channel asked for (`--sandbox-channel`), else the files probe's answer: host-paths when the
 * engine sees the runner's files, engine-api when it does not. What the engine-api channel cannot
 * carry is refused here, before anything is reserved: a login copy (written back through a host
 * folder) and a model API socket the runner does not meter.
 */
export async function chooseSandboxChannel(runtime: ContainerRuntime, imageId: string, o: { runId: string; route: UnitRoute; channel?: SandboxChannel }): Promise<SandboxChannel> {
  assertSocketRoom(o.route);
  const filesProblem = o.channel === "engine-api" ? null : await runnerFilesProblem(runtime, imageId, runnerLabels(o.runId, "probe"));
  const channel = o.channel ?? (filesProblem ? "engine-api" : "host-paths");
  if (channel === "host-paths") {
    if (filesProblem) throw new RefusalError(`${filesProblem}; nothing was charged`);
    return channel;
  }
  const why = filesProblem ? "the engine does not see this machine's files, so its sandboxes are reached over the engine's API (--sandbox-channel engine-api)" : "--sandbox-channel engine-api";
  if (!hasEngineStorage(runtime)) throw new RefusalError(`${why}, which this container runtime does not offer; nothing was charged`);
  if (!o.route.gateway) {
    throw new RefusalError(
      `${why}: the login-copy mode is not carried over it (the refreshed login comes back through a host folder); use --credentials gateway, or run where the engine sees the runner's files; nothing was charged`,
    );
  }
  return channel;
}

/**
 * The units' sockets the route makes (the gateway's, the doc-bridge's, the egress proxy's, a session's
 * channel) are made in folders of the temporary folder on either channel, and a unix socket's path has
 * at most 107 bytes: a TMPDIR too deep for the longest of them is refused here, before anything is
 * reserved, instead of failing the first attempt that makes one (contract R288).
 */
export function assertSocketRoom(route: UnitRoute, tmp: string = tmpdir()): void {
  const service = (kind: FolderKind, name: string) => join(serviceSocketDir(runnerFolderShape(kind, tmp)), name);
  const paths = [
    route.gateway ? service("gateway", GATEWAY_SOCKET_NAME) : "",
    route.docBridge ? service("mcp", MCP_SOCKET_NAME) : "",
    route.isolation === "strict" && !route.gateway ? service("egress", EGRESS_SOCKET_NAME) : "",
    route.session ? join(sessionChannelPaths(runnerFolderShape("home", tmp)).socketDir, SESSION_CHANNEL_SOCKET) : "",
  ];
  const longest = paths.reduce((a, b) => (Buffer.byteLength(b) > Buffer.byteLength(a) ? b : a));
  const problem = longest === "" ? null : socketPathProblem(longest);
  if (problem) throw new RefusalError(`TMPDIR ${tmp} is too deep for the runner's sockets: ${problem}; nothing was charged`);
}
