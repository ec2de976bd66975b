import { accessSync, constants } from "node:fs";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import type Docker from "dockerode";
import { RefusalError } from "../util/errors.ts";
import { loadDockerode } from "./dockerode-load.ts";
import { printable } from "../util/printable.ts";
import {
  ContainerRuntimeError,
  assertLabelFilter,
  assertValidSpec,
  type ContainerExit,
  type ContainerOutput,
  type ContainerRuntime,
  type ContainerSpec,
  type ContainerState,
  type ContainerStdio,
  type ContainerSummary,
  type EngineInfo,
  type EngineStorage,
  type ImageInfo,
  type VolumeSummary,
} from "./port.ts";

/**
 * How to reach the engine. Every field is optional: without any, dockerode (docker-modem)
 * reads the environment the way the docker CLI does:
 * - `DOCKER_HOST` unset: the unix socket `$HOME/.docker/run/docker.sock` if it exists,
 *   else `/var/run/docker.sock`;
 * - `DOCKER_HOST=unix:///path`: that socket;
 * - `DOCKER_HOST=tcp://host:port`: plain HTTP, or HTTPS when `DOCKER_TLS_VERIFY=1` or the
 *   port is 2376, with `ca.pem`, `cert.pem`, `key.pem` from `DOCKER_CERT_PATH`;
 * - `DOCKER_HOST=ssh://user@host`: the engine's socket over SSH, authenticated by the
 *   agent at `SSH_AUTH_SOCK`.
 * Fields given here override what the environment says.
 */
export interface DockerConnectionOptions {
  socketPath?: string;
  host?: string;
  port?: number | string;
  protocol?: "http" | "https" | "ssh";
  username?: string;
  ca?: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
  /** Milliseconds for a single request; unset means no client timeout (a build can take a while). */
  timeout?: number;
}

interface ModemLike {
  socketPath?: string | (() => Promise<string>);
  host?: string;
  port?: string | number;
  protocol?: string;
  username?: string;
  demuxStream(stream: NodeJS.ReadableStream, stdout: NodeJS.WritableStream, stderr: NodeJS.WritableStream): void;
  followProgress(stream: NodeJS.ReadableStream, onFinished: (err: Error | null, output: unknown[]) => void): void;
}

function statusOf(err: unknown): number | undefined {
  const code = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof code === "number" ? code : undefined;
}

/** The files DOCKER_CERT_PATH holds for an engine reached over TLS, as the docker CLI reads them. */
const CERT_FILES = ["ca.pem", "cert.pem", "key.pem"] as const;
const CERT_FIX = "set DOCKER_CERT_PATH to the folder holding ca.pem (the CA that signed the engine's certificate), cert.pem and key.pem (a client certificate that CA signed)";

/**
 * What keeps the environment's TLS engine from being reached, before any client is built: with
 * a missing file docker-modem fails with a bare ENOENT as the client is made, and with
 * DOCKER_TLS_VERIFY but no DOCKER_CERT_PATH it would offer no client certificate at all.
 */
export function engineTlsProblem(env: NodeJS.ProcessEnv): string | undefined {
  const host = env.DOCKER_HOST ?? "";
  if (host === "" || /^(unix|npipe|ssh):\/\//.test(host)) return undefined;
  const verify = env.DOCKER_TLS_VERIFY ?? "";
  if (verify !== "" && verify !== "1") return `DOCKER_TLS_VERIFY=${printable(verify)} is not understood; set DOCKER_TLS_VERIFY=1 for TLS to the engine at ${printable(host)}, or unset it`;
  const dir = env.DOCKER_CERT_PATH ?? "";
  if (dir === "") return verify === "1" ? `DOCKER_TLS_VERIFY=1 asks for TLS to the engine at ${printable(host)}, but DOCKER_CERT_PATH is not set; ${CERT_FIX}` : undefined;
  const missing = CERT_FILES.filter((f) => {
    try {
      accessSync(join(dir, f), constants.R_OK);
      return false;
    } catch {
      return true;
    }
  });
  if (missing.length > 0) return `DOCKER_CERT_PATH=${printable(dir)} has no readable ${missing.join(", ")}; ${CERT_FIX}`;
  return undefined;
}

/** A TLS handshake the engine or the runner refused: a certificate, not the engine, is what to fix. */
function isTlsRefusal(code: unknown): boolean {
  return typeof code === "string" && (/^ERR_SSL_|^ERR_TLS_CERT/.test(code) || /CERT|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER/.test(code));
}

/** Socket and connection errors mean the engine is unreachable, a runner fault of its own kind. */
function wrap(err: unknown, what: string): ContainerRuntimeError {
  if (err instanceof ContainerRuntimeError) return err;
  const status = statusOf(err);
  const sysCode = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : String(err);
  if (isTlsRefusal(sysCode)) {
    const dir = process.env.DOCKER_CERT_PATH ? `DOCKER_CERT_PATH=${printable(process.env.DOCKER_CERT_PATH)}` : "DOCKER_CERT_PATH (not set)";
    const side = String(sysCode).startsWith("ERR_SSL_") ? "the engine refused the client certificate" : "the engine's certificate is not one the CA in ca.pem signed";
    return new ContainerRuntimeError(`${what}: the TLS connection to the Docker engine failed, ${side} (${String(sysCode)}); the certificates come from ${dir}: ${CERT_FIX}`, "unavailable", {
      cause: err,
    });
  }
  if (status === 404) return new ContainerRuntimeError(`${what}: not found (${message})`, "not-found", { cause: err });
  if (status === 409) return new ContainerRuntimeError(`${what}: conflict (${message})`, "conflict", { cause: err });
  if (status === 400) return new ContainerRuntimeError(`${what}: rejected by the engine (${message})`, "invalid-spec", { cause: err });
  // The engine's connection refused, cut (a write after the engine closed it is EPIPE) or out of reach.
  if (typeof sysCode === "string" && ["ECONNREFUSED", "ENOENT", "EACCES", "ECONNRESET", "EPIPE", "ECONNABORTED", "EHOSTUNREACH", "ENETUNREACH", "ETIMEDOUT"].includes(sysCode)) {
    return new ContainerRuntimeError(`${what}: Docker engine unreachable (${sysCode})`, "unavailable", { cause: err });
  }
  return new ContainerRuntimeError(`${what}: ${message}`, "engine", { cause: err });
}

/** How often `wait` checks that the engine is still there. */
const WAIT_HEARTBEAT_MS = 2_000;

/** The dockerode adapter: with its loader (dockerode-load.ts), the only module that imports dockerode. */
export class DockerRuntime implements ContainerRuntime, EngineStorage {
  private readonly docker: Docker;

  /** Throws a refusal naming DOCKER_CERT_PATH when the environment's TLS certificates cannot be used. */
  constructor(options: DockerConnectionOptions = {}) {
    const tls = options.socketPath === undefined && options.host === undefined ? engineTlsProblem(process.env) : undefined;
    if (tls !== undefined) throw new RefusalError(`the Docker engine cannot be reached: ${tls}; nothing was charged`);
    const Dockerode = loadDockerode();
    this.docker = new Dockerode(options);
  }

  private get modem(): ModemLike {
    return this.docker.modem as unknown as ModemLike;
  }

  async ping(): Promise<EngineInfo> {
    try {
      const [version, info] = await Promise.all([this.docker.version(), this.docker.info() as Promise<{ Runtimes?: Record<string, unknown>; DefaultRuntime?: string }>]);
      return {
        serverVersion: version.Version,
        apiVersion: version.ApiVersion,
        endpoint: await this.endpoint(),
        runtimes: Object.keys(info.Runtimes ?? {}).sort(),
        defaultRuntime: info.DefaultRuntime || "runc",
        ...(version.Os ? { os: version.Os } : {}),
        ...(version.Arch ? { arch: version.Arch } : {}),
      };
    } catch (err) {
      throw wrap(err, "ping");
    }
  }

  private async endpoint(): Promise<string> {
    const m = this.modem;
    if (m.socketPath !== undefined) {
      const path = typeof m.socketPath === "function" ? await m.socketPath() : m.socketPath;
      return `unix://${path}`;
    }
    const scheme = m.protocol === "https" ? "tcp+tls" : m.protocol === "ssh" ? "ssh" : "tcp";
    const user = m.protocol === "ssh" && m.username ? `${m.username}@` : "";
    return `${scheme}://${user}${m.host ?? ""}${m.port ? `:${m.port}` : ""}`;
  }

  async buildImage(context: NodeJS.ReadableStream | Buffer, opts: { tag: string; labels?: Record<string, string> }): Promise<ImageInfo> {
    let output: unknown[];
    try {
      // The legacy builder (API 1.41 default) needs no registry for `FROM scratch`;
      // `networkmode: none` keeps any RUN step (there are none in our contexts) offline too.
      const stream = await this.docker.buildImage(context as NodeJS.ReadableStream, {
        t: opts.tag,
        labels: opts.labels ?? {},
        rm: true,
        forcerm: true,
        networkmode: "none",
      });
      output = await new Promise<unknown[]>((resolve, reject) => this.modem.followProgress(stream, (err, out) => (err ? reject(err) : resolve(out))));
    } catch (err) {
      const wrapped = wrap(err, `build ${opts.tag}`);
      // An HTTP error from /build (no Dockerfile, a bad instruction) is the context's fault.
      if (statusOf(err) !== undefined) throw new ContainerRuntimeError(wrapped.message, "build-failed", { cause: err });
      throw wrapped;
    }
    // A failed build still answers 200; the failure is an `error` message in the stream.
    const failure = output.find((o): o is { error: string } => typeof (o as { error?: unknown }).error === "string");
    if (failure) throw new ContainerRuntimeError(`build ${opts.tag} failed: ${failure.error.trim()}`, "build-failed");
    const image = await this.inspectImage(opts.tag);
    if (!image) throw new ContainerRuntimeError(`build ${opts.tag} reported success but the tag is absent`, "build-failed");
    return image;
  }

  async inspectImage(ref: string): Promise<ImageInfo | undefined> {
    try {
      const info = await this.docker.getImage(ref).inspect();
      return { id: info.Id, labels: { ...(info.Config?.Labels ?? {}) } };
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw wrap(err, `inspect image ${ref}`);
    }
  }

  async create(spec: ContainerSpec): Promise<string> {
    assertValidSpec(spec);
    // This engine runs on the runner's host: the workspace's host copy is bound read-only. Copying
    // the tar in instead would need a writable target, and the root filesystem is read-only.
    if (spec.workspace && spec.workspace.hostPath === undefined) {
      throw new ContainerRuntimeError(`invalid container spec: the Docker adapter binds the workspace from the runner's host; give workspace.hostPath`, "invalid-spec");
    }
    const binds = spec.workspace ? [...spec.mounts, { source: spec.workspace.hostPath!, target: spec.workspace.target, readOnly: true }] : spec.mounts;
    try {
      const container = await this.docker.createContainer({
        ...(spec.name !== undefined ? { name: spec.name } : {}),
        Image: spec.image,
        ...(spec.entrypoint !== undefined ? { Entrypoint: spec.entrypoint } : {}),
        Cmd: spec.cmd,
        Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
        ...(spec.user !== undefined ? { User: spec.user } : {}),
        ...(spec.workingDir !== undefined ? { WorkingDir: spec.workingDir } : {}),
        Labels: spec.labels,
        // stdin stays closed (contract R67) but for the engine-api channel's relay, whose stdio is
        // the channel; output is attached, never a TTY, so stdout and stderr arrive multiplexed and separable.
        AttachStdin: spec.openStdin === true,
        OpenStdin: spec.openStdin === true,
        StdinOnce: false,
        Tty: false,
        AttachStdout: true,
        AttachStderr: true,
        ...(spec.networkDisabled === true ? { NetworkDisabled: true } : {}),
        HostConfig: {
          Mounts: binds.map((m) => ({
            Type: m.volume ? ("volume" as const) : ("bind" as const),
            Source: m.source,
            Target: m.target,
            ReadOnly: m.readOnly,
            // The engine takes the options it is given; dockerode's type asks for all of them.
            ...(m.volume && m.noCopy ? { VolumeOptions: { NoCopy: true } as Docker.MountSettings["VolumeOptions"] } : {}),
          })),
          Tmpfs: spec.tmpfs,
          ReadonlyRootfs: spec.readOnlyRootfs,
          NetworkMode: spec.networkMode,
          CapDrop: spec.capDrop,
          ...(spec.capAdd !== undefined ? { CapAdd: spec.capAdd } : {}),
          SecurityOpt: spec.securityOpt,
          ...(spec.pidsLimit !== undefined ? { PidsLimit: spec.pidsLimit } : {}),
          ...(spec.memoryBytes !== undefined ? { Memory: spec.memoryBytes, MemorySwap: spec.memoryBytes } : {}),
          ...(spec.nanoCpus !== undefined ? { NanoCpus: spec.nanoCpus } : {}),
          ...(spec.runtime !== undefined ? { Runtime: spec.runtime } : {}),
          ...(spec.init !== undefined ? { Init: spec.init } : {}),
          // The output reaches the runner through the attach alone: the engine keeps no copy of
          // a transcript (answers included) in a log file, or in whatever log service its
          // default driver ships container output to (contract R67).
          LogConfig: { Type: "none", Config: {} },
        },
      });
      return container.id;
    } catch (err) {
      throw wrap(err, `create container from ${spec.image}`);
    }
  }

  async attach(id: string): Promise<ContainerOutput> {
    let stream: NodeJS.ReadWriteStream;
    try {
      stream = await this.docker.getContainer(id).attach({ stream: true, stdout: true, stderr: true, logs: false });
    } catch (err) {
      throw wrap(err, `attach ${id}`);
    }
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    this.modem.demuxStream(stream, stdout, stderr);
    let ended = false;
    const end = (): void => {
      if (ended) return;
      ended = true;
      stdout.end();
      stderr.end();
    };
    stream.on("end", end);
    stream.on("close", end);
    stream.on("error", (err: Error) => {
      ended = true;
      stdout.destroy(err);
      stderr.destroy(err);
    });
    return { stdout, stderr };
  }

  async start(id: string): Promise<void> {
    try {
      await this.docker.getContainer(id).start();
    } catch (err) {
      throw wrap(err, `start ${id}`);
    }
  }

  async wait(id: string): Promise<ContainerExit> {
    const stop = new AbortController();
    try {
      const container = this.docker.getContainer(id);
      const waited = container.wait({ abortSignal: stop.signal }) as Promise<{ StatusCode: number }>;
      waited.catch(() => undefined); // lost to the heartbeat below, then aborted
      const result = await Promise.race([waited, this.engineGone(stop.signal)]);
      const info = await container.inspect();
      return { exitCode: result.StatusCode, oomKilled: info.State.OOMKilled === true };
    } catch (err) {
      throw wrap(err, `wait ${id}`);
    } finally {
      stop.abort();
    }
  }

  /**
   * Rejects once the engine stops answering a ping; never resolves. docker-modem settles a
   * request only on its response's 'end', and when the engine dies while a container runs,
   * the wait response is cut after its headers without one: measured with a second dockerd
   * killed mid-attempt (contract R100), the wait never settled and the runner hung. A ping every
   * few seconds turns that into the "unavailable" fault the caller can act on.
   */
  private async engineGone(signal: AbortSignal): Promise<never> {
    for (;;) {
      try {
        await sleep(WAIT_HEARTBEAT_MS, undefined, { signal });
      } catch {
        return new Promise<never>(() => undefined); // the wait ended first
      }
      try {
        await this.docker.ping();
      } catch (err) {
        if (signal.aborted) return new Promise<never>(() => undefined);
        throw err;
      }
    }
  }

  async kill(id: string, signal = "SIGKILL"): Promise<void> {
    try {
      await this.docker.getContainer(id).kill({ signal });
    } catch (err) {
      // 409: not running; 404: already removed. Both mean there is nothing left to stop.
      const status = statusOf(err);
      if (status === 409 || status === 404) return;
      throw wrap(err, `kill ${id}`);
    }
  }

  async inspect(id: string): Promise<ContainerState | undefined> {
    try {
      const info = await this.docker.getContainer(id).inspect();
      const running = info.State.Running === true;
      const exited = !running && info.State.Status !== "created";
      return {
        running,
        exitCode: exited ? info.State.ExitCode : null,
        oomKilled: info.State.OOMKilled === true,
        labels: { ...(info.Config.Labels ?? {}) },
        env: [...(info.Config.Env ?? [])],
        runtime: info.HostConfig?.Runtime ?? "",
      };
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw wrap(err, `inspect ${id}`);
    }
  }

  async remove(id: string): Promise<void> {
    try {
      await this.docker.getContainer(id).remove({ force: true, v: true });
    } catch (err) {
      const status = statusOf(err);
      if (status === 404) return;
      // 409 "removal already in progress": another remover owns it now.
      if (status === 409 && /already in progress/i.test(err instanceof Error ? err.message : "")) return;
      throw wrap(err, `remove ${id}`);
    }
  }

  async listByLabel(labels: Record<string, string>): Promise<ContainerSummary[]> {
    assertLabelFilter(labels);
    try {
      const list = await this.docker.listContainers({
        all: true,
        filters: { label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) },
      });
      return list.map((c) => ({ id: c.Id, labels: { ...(c.Labels ?? {}) }, running: c.State === "running" }));
    } catch (err) {
      throw wrap(err, "list containers");
    }
  }

  async createVolume(name: string, labels: Record<string, string>): Promise<void> {
    try {
      await this.docker.createVolume({ Name: name, Labels: labels });
    } catch (err) {
      throw wrap(err, `create volume ${name}`);
    }
  }

  async removeVolume(name: string): Promise<void> {
    try {
      await this.docker.getVolume(name).remove();
    } catch (err) {
      if (statusOf(err) === 404) return;
      throw wrap(err, `remove volume ${name}`);
    }
  }

  async listVolumesByLabel(labels: Record<string, string>): Promise<VolumeSummary[]> {
    assertLabelFilter(labels);
    try {
      const list = (await this.docker.listVolumes({ filters: { label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) } })) as {
        Volumes?: Array<{ Name: string; Labels?: Record<string, string> | null }> | null;
      };
      return (list.Volumes ?? []).map((v) => ({ name: v.Name, labels: { ...(v.Labels ?? {}) } }));
    } catch (err) {
      throw wrap(err, "list volumes");
    }
  }

  async putArchive(id: string, path: string, tar: NodeJS.ReadableStream): Promise<void> {
    try {
      await this.docker.getContainer(id).putArchive(tar, { path });
    } catch (err) {
      throw wrap(err, `copy into ${id}:${path}`);
    }
  }

  async getArchive(id: string, path: string): Promise<NodeJS.ReadableStream> {
    try {
      return (await this.docker.getContainer(id).getArchive({ path })) as NodeJS.ReadableStream;
    } catch (err) {
      throw wrap(err, `copy from ${id}:${path}`);
    }
  }

  async attachStdio(id: string): Promise<ContainerStdio> {
    let stream: NodeJS.ReadWriteStream;
    try {
      stream = (await this.docker.getContainer(id).attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true, logs: false })) as NodeJS.ReadWriteStream;
    } catch (err) {
      throw wrap(err, `attach ${id}`);
    }
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    // The channel's stream: what its reader has not taken waits in the engine, not here.
    demuxBounded(stream, stdout, stderr);
    const end = (): void => {
      stdout.end();
      stderr.end();
    };
    stream.on("end", end);
    stream.on("close", end);
    stream.on("error", (err: Error) => {
      stdout.destroy(err);
      stderr.destroy(err);
    });
    return { stdin: stream, stdout, stderr };
  }
}

/** The engine's attach frame header: stream type (1 stdout, 2 stderr), three zero bytes, uint32 BE length. */
const ATTACH_HEADER_BYTES = 8;

/**
 * Splits the engine's multiplexed attach stream into stdout and stderr, honouring their
 * backpressure (contract R252): while either is full, the attach stream is paused, so what the
 * reader has not taken waits in the engine and the container's pipe, not in the runner's memory.
 * docker-modem's own demuxStream writes on regardless of the readers.
 */
export function demuxBounded(raw: NodeJS.ReadableStream, stdout: NodeJS.WritableStream & { writableNeedDrain?: boolean }, stderr: NodeJS.WritableStream & { writableNeedDrain?: boolean }): void {
  let pending: Buffer = Buffer.alloc(0);
  const resume = (): void => {
    if (!stdout.writableNeedDrain && !stderr.writableNeedDrain) raw.resume();
  };
  for (const s of [stdout, stderr]) {
    s.on("drain", resume);
    // A reader gone takes nothing more: the other one is not held up by it.
    s.on("close", () => raw.resume());
  }
  raw.on("data", (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    let full = false;
    while (pending.length >= ATTACH_HEADER_BYTES) {
      const length = pending.readUInt32BE(4);
      if (pending.length < ATTACH_HEADER_BYTES + length) break;
      const target = pending[0] === 2 ? stderr : stdout;
      if (!target.write(pending.subarray(ATTACH_HEADER_BYTES, ATTACH_HEADER_BYTES + length))) full = true;
      pending = pending.subarray(ATTACH_HEADER_BYTES + length);
    }
    if (full) raw.pause();
  });
}
