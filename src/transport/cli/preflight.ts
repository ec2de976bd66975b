import { probeVersion, runnerFilesProblem, useRunProfile, type ProbedVersion } from "../../image/build.ts";
import { assertRuntimeOffered, resolveOciRuntime, runtimeNeeds } from "../../isolation/oci-runtime.ts";
import type { IsolationProfile } from "../../isolation/profile.ts";
import { runnerLabels } from "../../sandbox/reaper.ts";
import type { ContainerRuntime, EngineInfo } from "../../sandbox/port.ts";
import { errorMessage, RefusalError } from "../../util/errors.ts";

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
    throw new RefusalError(`the Docker engine is not reachable (${errorMessage(err)}); start it or set DOCKER_HOST`);
  }
  assertRuntimeOffered(engine, runtimeName, "--runtime");
  return engine;
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
}

/** The image's CLI version (refused unless it is `expectedCliVersion`) and the OCI runtime every unit's container is created with. */
export async function probeCliImage(
  runtime: ContainerRuntime,
  engine: EngineInfo,
  o: { image: string; expectedCliVersion: string; runtimeName: string | undefined; runId: string; route: UnitRoute },
): Promise<{ probed: ProbedVersion; ociRuntime: string }> {
  const probed = await probeVersion(runtime, o.image, { labels: runnerLabels(o.runId, "probe"), runtime: o.runtimeName });
  if (probed.version !== o.expectedCliVersion) {
    throw new RefusalError(`image ${o.image} reports claude ${probed.version}, but ${o.expectedCliVersion} is expected (--cli-version); nothing was charged`);
  }
  useRunProfile(probed, o.image, o.expectedCliVersion);
  const filesProblem = await runnerFilesProblem(runtime, probed.imageId, runnerLabels(o.runId, "probe"));
  if (filesProblem) throw new RefusalError(`${filesProblem}; nothing was charged`);
  const { isolation, gateway, modelApiSocket, docBridge } = o.route;
  const ociRuntime = await resolveOciRuntime(runtime, engine, {
    name: o.runtimeName,
    flag: "--runtime",
    image: o.image,
    labels: runnerLabels(o.runId, "probe"),
    needs: runtimeNeeds({
      network: isolation === "standard" && !modelApiSocket && !gateway ? "bridge" : "none",
      gateway,
      modelApiSocket,
      docBridge,
      egressProxy: isolation === "strict" && !gateway,
    }),
  });
  return { probed, ociRuntime };
}
