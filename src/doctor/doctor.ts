import type { EnvOf } from "../cli/config/flags.ts";
import type { ExportLimits } from "../export/export.ts";
import { randomBytes } from "node:crypto";
import type { ContainerRuntime } from "../sandbox/port.ts";
import { runnerLabels } from "../sandbox/reaper.ts";
import type { SandboxChannel } from "../sandbox/docker-sandbox.ts";
import { runtimeNeeds } from "../isolation/oci-runtime.ts";
import { loadManifest, type LoadedManifest } from "../manifest/load.ts";
import { planStudy, plannedRepositories, type Mode, type PlannedAttempt } from "../plan/plan.ts";
import { referenceEngineCommand } from "../mcp/preflight.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { errorMessage } from "../util/errors.ts";
import { DEFAULT_EGRESS_ALLOW } from "../isolation/policy.ts";
import type { Transport } from "../terms/terms.ts";
import type { UpstreamOptions } from "../gateway/gateway.ts";
import { isFakeClaudeImage } from "../image/build.ts";
import {
  checkClaudeVersion,
  checkEngineFiles,
  checkDocBridge,
  checkDocker,
  checkIsolation,
  checkRuntime,
  checkGit,
  checkImage,
  checkLogin,
  checkModelApi,
  checkNode,
  checkOutput,
  checkRootOf,
  checkSettings,
  checkTransport,
  fail,
  pass,
  skip,
  type Check,
  type FindBinary,
} from "./checks.ts";

/** What `run` would be given: the doctor checks that a run with these flags could start. */
export interface DoctorInput {
  manifest: string;
  mode: Mode;
  transport: Transport;
  roots: ReadonlyMap<string, string>;
  image: string;
  expectedCliVersion: string;
  claudeConfigDir?: string;
  /** Default: the bundled reference engine, as for `run`. */
  docBridgeCommand?: readonly string[];
  output?: string;
  attemptBudgetUsd?: string;
  /** As for run; a strict profile adds an "isolation" check. */
  isolation?: string;
  /** Strict only: the proxy's allowlist (default DEFAULT_EGRESS_ALLOW). */
  egressAllow?: readonly string[];
  /** As for run; adds a "runtime" check. */
  runtime?: string;
  /** As for run: the export limits each checkout's export is checked against. */
  exportLimits?: ExportLimits;
  /** Tests only (the hidden flags): the gateway's upstream and the CA it trusts. */
  gatewayUpstream?: UpstreamOptions;
}

export interface DoctorDeps {
  /** Builds the engine client; called once, inside the docker check, so a bad DOCKER_HOST is a failed check. */
  connect: () => ContainerRuntime;
  /** The doctor's environment variables, parsed at the command's entry (src/cli/config/). */
  env: EnvOf<"doctor">;
  now?: number;
  homeDir?: string;
  findBinary?: FindBinary;
  projectRoot?: string;
  docBridgeTimeoutMs?: number;
}

export interface DoctorReport {
  /** Every check passed: a run with these flags could start. */
  ok: boolean;
  mode: Mode;
  transport: Transport;
  manifest: string;
  attempts: number | null;
  checks: Check[];
}

export async function runDoctor(input: DoctorInput, deps: DoctorDeps): Promise<DoctorReport> {
  const projectRoot = deps.projectRoot ?? PROJECT_ROOT;
  // Independent chains run side by side; the lines keep one fixed order.
  const [git, engine, login, corpus] = await Promise.all([
    checkGit(),
    engineChecks(input, deps),
    checkLogin({ configDir: input.claudeConfigDir, env: { CLAUDE_CONFIG_DIR: deps.env.values.CLAUDE_CONFIG_DIR }, homeDir: deps.homeDir, now: deps.now }),
    corpusChecks(input),
  ]);
  const checks: Check[] = [checkNode(), git, ...engine.checks, login, ...corpus.checks];
  if (input.isolation === "strict") checks.push(checkIsolation(input.isolation, input.egressAllow ?? DEFAULT_EGRESS_ALLOW));

  if (corpus.plan && corpus.loaded) {
    const { plan, loaded } = corpus;
    if (plan.some((a) => a.arm === "mcp")) {
      const planned = plannedRepositories(plan);
      const unready = corpus.checks.filter((c) => c.name.startsWith("root:") && !c.ok && planned.includes(c.name.slice("root:".length)));
      if (!git.ok || unready.length) {
        checks.push(skip("doc-bridge", `needs clean checkouts at their pins (${unready.map((r) => r.name).join(", ") || "git"})`));
      } else {
        const checkouts = planned.map((repository) => ({ repository, dir: input.roots.get(repository)!, pin: loaded.manifest.repositories[repository]! }));
        checks.push(await checkDocBridge(input.docBridgeCommand ?? referenceEngineCommand(), checkouts, deps.docBridgeTimeoutMs, loaded));
      }
    }
  } else {
    checks.push(skip("roots", "needs the manifest"), skip("doc-bridge", "needs the manifest"));
  }
  checks.push(await checkOutput(input.output, input.roots, projectRoot));
  checks.push(checkTransport(input.transport, deps.env));
  // A cli run goes through the gateway by default: the route to the model API, once the image is known.
  if (input.transport === "cli") checks.push(engine.fakeImage === undefined ? skip("model-api", "needs the image") : await checkModelApi(input.gatewayUpstream, engine.fakeImage));
  const planned = corpus.plan?.length ?? 0;
  checks.push(...checkSettings({ flags: { attemptBudgetUsd: input.attemptBudgetUsd, output: input.output }, env: deps.env, mode: input.mode, planned, transport: input.transport }));

  return { ok: checks.every((c) => c.ok), mode: input.mode, transport: input.transport, manifest: corpus.loaded?.path ?? input.manifest, attempts: corpus.plan?.length ?? null, checks };
}

/**
 * docker, then the image, then its claude --version: each needs the one before; then --runtime,
 * if given. `fakeImage`: whether the image is the fake claude, once it was found.
 */
async function engineChecks(input: DoctorInput, deps: DoctorDeps): Promise<{ checks: Check[]; fakeImage?: boolean }> {
  const docker = await checkDocker(deps.connect, deps.env.values.DOCKER_HOST);
  const checks = [docker.check];
  // Labelled like a run's containers, so a reaper removes them if the doctor is killed mid-probe.
  const labels = runnerLabels(`doctor-${Date.now()}-${randomBytes(3).toString("hex")}`, "probe");
  let imageOk = false;
  let fakeImage: boolean | undefined;
  let channel: SandboxChannel | undefined;
  if (!docker.runtime) checks.push(skip("image", "needs the Docker engine"), skip("claude-version", "needs the Docker engine"), skip("engine-files", "needs the Docker engine"));
  else {
    const image = await checkImage(docker.runtime, input.image, input.expectedCliVersion, deps.findBinary);
    checks.push(image);
    imageOk = image.ok;
    if (image.ok) fakeImage = await isFakeClaudeImage(docker.runtime, input.image);
    if (!image.ok) checks.push(skip("claude-version", "needs the image"), skip("engine-files", "needs the image"));
    else {
      checks.push(await checkClaudeVersion(docker.runtime, input.image, input.expectedCliVersion, labels));
      const files = await checkEngineFiles(docker.runtime, input.image, labels);
      checks.push(files.check);
      channel = files.channel;
    }
  }
  if (input.runtime !== undefined) {
    // What a run with these flags needs (run's default credentials are the gateway: network none, its socket, and the doc-bridge's for the mcp arm).
    const needs = runtimeNeeds({ network: "none", gateway: true, modelApiSocket: false, docBridge: true });
    checks.push(
      docker.runtime
        ? await checkRuntime(docker.runtime, input.runtime, imageOk ? { image: input.image, labels, needs, ...(channel ? { channel } : {}) } : undefined)
        : skip("runtime", "needs the Docker engine"),
    );
  }
  return { checks, fakeImage };
}

/** The manifest, its plan, and every planned or given checkout. */
async function corpusChecks(input: DoctorInput): Promise<{ checks: Check[]; loaded?: LoadedManifest; plan?: PlannedAttempt[] }> {
  let loaded: LoadedManifest;
  try {
    loaded = await loadManifest(input.manifest);
  } catch (err) {
    return { checks: [fail("manifest", errorMessage(err), "pass --manifest with the study manifest (docs/schemas/manifest.schema.json)")] };
  }
  const plan = planStudy(loaded.manifest, input.mode);
  const planned = plannedRepositories(plan);
  const what = input.mode === "pilot" ? "the pilot" : "the full study";
  const manifest = pass("manifest", `${loaded.path} (protocol hash ${loaded.protocolHash.slice(0, 12)}): ${what} is ${plan.length} attempts over ${planned.join(", ")}`);
  const names = [...new Set([...planned, ...input.roots.keys()])];
  const roots = await Promise.all(names.map((name) => checkRootOf(loaded, name, input.roots.get(name), what, input.exportLimits)));
  return { checks: [manifest, ...roots], loaded, plan };
}

const STATE = (c: Check) => (c.ok ? "ok" : c.skipped ? "skip" : "FAIL");

/** One line per check: state, name, what was found and, when it failed, the fix; then the verdict. */
export function formatReport(report: DoctorReport): string {
  const width = Math.max(...report.checks.map((c) => c.name.length));
  const lines = report.checks.map((c) => `${STATE(c).padEnd(4)}  ${c.name.padEnd(width)}  ${c.detail}${c.fix ? `  -> fix: ${c.fix}` : ""}`);
  const failed = report.checks.filter((c) => !c.ok && !c.skipped).length;
  const skipped = report.checks.filter((c) => c.skipped).length;
  const what = `${report.mode === "pilot" ? "the pilot" : "the full run"} (--transport ${report.transport})`;
  lines.push(
    report.ok ? `${what} could start with these flags and this environment` : `${failed} check${failed === 1 ? "" : "s"} failed${skipped ? `, ${skipped} skipped` : ""}: ${what} would be refused`,
  );
  return lines.join("\n") + "\n";
}
