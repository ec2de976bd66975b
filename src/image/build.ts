import { rmdir } from "node:fs/promises";
import { errorMessage, RefusalError } from "../util/errors.ts";
import { profileFix, requireProfile, useProfile, type FoundProfile } from "../profile/load.ts";
import { makeRunnerFolder } from "../util/orphans.ts";
import { ContainerRuntimeError, type ContainerRuntime, type ContainerSpec } from "../sandbox/port.ts";
import { readBoundedText } from "../sandbox/output.ts";
import { contextDigest, packContext, type ImageSpec } from "./context.ts";
import { IMAGE_LABELS, IMAGE_LAYOUT } from "./specs.ts";

export interface BuiltImage {
  tag: string;
  id: string;
  /** `sha256:<hex>` of the build context. */
  contextDigest: string;
  labels: Record<string, string>;
  /** false when an image with the same context digest was already there. */
  built: boolean;
}

/**
 * Builds `spec` unless the tag already names an image built from the same context bytes
 * (the context-digest label), so repeated runs and test files reuse one image.
 */
export async function buildImage(runtime: ContainerRuntime, spec: ImageSpec): Promise<BuiltImage> {
  // Hashed as it streams by when the image is there already (the usual case), so nothing of the
  // context stays in this process's memory; packed whole only for a build, whose label must name
  // the very bytes sent.
  const streamed = await contextDigest(spec);
  const existing = await runtime.inspectImage(spec.tag);
  if (existing?.labels[IMAGE_LABELS.contextDigest] === streamed) {
    return { tag: spec.tag, id: existing.id, contextDigest: streamed, labels: existing.labels, built: false };
  }
  const context = await packContext(spec);
  const digest = await contextDigest(context);
  const image = await runtime.buildImage(context, { tag: spec.tag, labels: { [IMAGE_LABELS.contextDigest]: digest } });
  if (image.labels[IMAGE_LABELS.contextDigest] !== digest) {
    throw new ContainerRuntimeError(`build ${spec.tag}: the image does not carry the context digest ${digest}`, "build-failed");
  }
  return { tag: spec.tag, id: image.id, contextDigest: digest, labels: image.labels, built: true };
}

export interface ProbedVersion {
  /** e.g. "2.1.296", parsed from "2.1.296 (Claude Code)". */
  version: string;
  imageId: string;
  /** sha256 hex of the image's claude binary, from its label. */
  binarySha256: string;
  /** The image's kind label ("claude-code" for the real binary built by `image build`), null without one. */
  kind: string | null;
}

export interface ProbeOptions {
  /** Labels for the throwaway container (e.g. `runnerLabels(run, "probe")`) so a reaper finds it. */
  labels?: Record<string, string>;
  timeoutMs?: number;
  /** The OCI runtime of the run's containers (the engine's default when absent). */
  runtime?: string;
}

const PROBE_OUTPUT_LIMIT = 64 * 1024;
const VERSION_LINE = /^(\d+\.\d+\.\d+) \(Claude Code\)$/;

/**
 * The hardening every container of ours gets; the probe uses it as-is. A probe runs the image's
 * binary on its own and looks up no name, so the engine sets up no network for it (contract R281).
 */
export function probeSpec(image: string, labels: Record<string, string>): ContainerSpec {
  return {
    image,
    cmd: ["--version"],
    env: {},
    user: IMAGE_LAYOUT.user,
    mounts: [],
    tmpfs: {
      "/tmp": "rw,nosuid,nodev,size=16m",
      [IMAGE_LAYOUT.home]: `rw,nosuid,nodev,size=16m,uid=${IMAGE_LAYOUT.uid},gid=${IMAGE_LAYOUT.gid}`,
    },
    readOnlyRootfs: true,
    networkMode: "none",
    networkDisabled: true,
    capDrop: ["ALL"],
    securityOpt: ["no-new-privileges"],
    pidsLimit: 64,
    labels,
  };
}

/**
 * Runs `claude --version` in a throwaway hardened container and returns what it printed,
 * with the image's id and binary hash. Any doubt (no binary label, non-zero exit, extra
 * output, a timeout) is a `RefusalError`: preflight refuses before anything is spent.
 */
export async function probeVersion(runtime: ContainerRuntime, image: string, opts: ProbeOptions = {}): Promise<ProbedVersion> {
  const info = await runtime.inspectImage(image);
  if (!info) throw new RefusalError(`image ${image} does not exist; build it first`);
  const binarySha256 = info.labels[IMAGE_LABELS.claudeSha256];
  if (!binarySha256 || !/^[0-9a-f]{64}$/.test(binarySha256)) {
    throw new RefusalError(`image ${image} has no ${IMAGE_LABELS.claudeSha256} label: its binary cannot be identified`);
  }
  const id = await runtime.create({ ...probeSpec(info.id, opts.labels ?? {}), ...(opts.runtime !== undefined ? { runtime: opts.runtime } : {}) });
  try {
    const { stdout, stderr } = await runtime.attach(id);
    const output = Promise.all([readBoundedText(stdout, PROBE_OUTPUT_LIMIT), readBoundedText(stderr, PROBE_OUTPUT_LIMIT)]);
    output.catch(() => undefined); // awaited below, or abandoned on a timeout
    await runtime.start(id);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), opts.timeoutMs ?? 30_000)));
    const exit = await Promise.race([runtime.wait(id), timedOut]).finally(() => clearTimeout(timer));
    if (exit === "timeout") {
      await runtime.kill(id);
      throw new RefusalError(`claude --version in ${image} did not finish in time`);
    }
    const [text, errText] = await output;
    if (exit.exitCode !== 0) {
      throw new RefusalError(`claude --version in ${image} exited ${exit.exitCode}: ${errText.trim().slice(0, 500)}`);
    }
    const match = VERSION_LINE.exec(text.trim());
    if (!match?.[1]) throw new RefusalError(`claude --version in ${image} printed ${JSON.stringify(text.slice(0, 200))}, not "<version> (Claude Code)"`);
    return { version: match[1], imageId: info.id, binarySha256, kind: info.labels[IMAGE_LABELS.kind] ?? null };
  } finally {
    await runtime.remove(id);
  }
}

/** Where the files probe binds its folder inside the container it creates. */
const FILES_PROBE_TARGET = "/study-runner-files-probe";

/**
 * Whether the engine sees this machine's files by path, as every attempt and session call needs
 * today (its export, HOME, staged login and the runner's sockets reach the container as folders of
 * the runner's host, contract R200). Found by a probe, not from DOCKER_HOST's form: a container of
 * `image` is created, never started, with a read-only bind of a fresh runner folder, then removed.
 * An engine on another machine, in Docker Desktop's VM or in a mount namespace of its own refuses
 * the bind, naming the folder. null when the bind was accepted, else why the run cannot start.
 */
export async function runnerFilesProblem(runtime: ContainerRuntime, image: string, labels: Record<string, string>): Promise<string | null> {
  const dir = await makeRunnerFolder("probe");
  try {
    const id = await runtime.create({ ...probeSpec(image, labels), mounts: [{ source: dir, target: FILES_PROBE_TARGET, readOnly: true }] });
    await runtime.remove(id);
    return null;
  } catch (err) {
    const message = errorMessage(err);
    if (!message.includes(dir)) throw err;
    return (
      `the Docker engine cannot see this machine's files: it refused a container's bind of the runner's folder ${dir} (${message.slice(0, 300)}). ` +
      "The host-paths channel reaches the export, HOME, login and the runner's sockets through such folders, so it needs the runner where the engine's files are: " +
      "on the engine's own host (for a remote engine, run study-runner there), or with a local engine; study attempts, the adjudicator and session tasks run over the engine's API alone instead (--sandbox-channel engine-api, contract R244) (docs/pilot.md, \"What you need\")"
    );
  } finally {
    await rmdir(dir).catch(() => undefined);
  }
}

/** The fake claude image answers without any model: like a scripted API, a test stand-in that sends no request. */
export async function isFakeClaudeImage(runtime: ContainerRuntime, image: string): Promise<boolean> {
  return (await runtime.inspectImage(image))?.labels[IMAGE_LABELS.kind] === "fake-claude";
}

/**
 * The calibration profile of the run's CLI version, made the one every guard of this process
 * reads, and checked against the image (contract R221): a real Claude Code image (kind
 * `claude-code`) must hold the binary the profile was measured on. A version without a profile,
 * or a profile of another binary, is refused before anything is reserved. Test doubles (the fake
 * image, unlabelled images) have no measured binary and are not compared.
 */
export function useRunProfile(probed: ProbedVersion, image: string, expectedCliVersion: string): FoundProfile {
  const found = runProfile(probed, image, expectedCliVersion);
  useProfile(found);
  return found;
}

/** The profile of `expectedCliVersion`, checked against the probed image as useRunProfile does, without making it the active one (the doctor). */
export function runProfile(probed: ProbedVersion, image: string, expectedCliVersion: string): FoundProfile {
  const found = requireProfile(expectedCliVersion);
  if (probed.kind === "claude-code" && probed.binarySha256 !== found.profile.binarySha256) {
    throw new RefusalError(
      `image ${image} holds a claude binary with sha256 ${probed.binarySha256}, but the calibration profile ${found.path} (${found.source}) was measured on the binary with sha256 ${found.profile.binarySha256}: it is the profile of another binary; ${profileFix(expectedCliVersion)}`,
    );
  }
  return found;
}
