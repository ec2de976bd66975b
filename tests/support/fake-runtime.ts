import { createHash, randomBytes } from "node:crypto";
import { PassThrough, Readable } from "node:stream";
import { buffer as readAll } from "node:stream/consumers";
import tar from "tar-stream";
import {
  ContainerRuntimeError,
  assertLabelFilter,
  assertValidSpec,
  type ContainerExit,
  type ContainerOutput,
  type ContainerRuntime,
  type ContainerSpec,
  type ContainerState,
  type ContainerSummary,
  type EngineInfo,
  type ImageInfo,
} from "../../src/sandbox/port.ts";

/** What a fake container's "process" sees: its spec, its output streams, and a kill signal. */
export interface FakeProcess {
  spec: ContainerSpec;
  image: ImageInfo;
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  /** Aborted when the container is killed; the program should stop promptly. */
  signal: AbortSignal;
  /**
   * Handles a catchable signal (SIGTERM, SIGINT…) the way a program's own handler would; the program
   * decides whether to end. An untrapped one is ignored, as the kernel ignores it for a container's
   * first process, unless the spec asks for an init, which forwards it (the program then dies of it).
   */
  trap(signal: string, handler: () => void): void;
}

/** A container's program: returns its exit code (or an exit with an OOM kill); a throw is exit 1. */
export type FakeProgram = (proc: FakeProcess) => Promise<number | ContainerExit | void> | number | ContainerExit | void;

export interface FakeRuntimeOptions {
  /** Runs every started container; dispatch on `spec.image` / `spec.cmd` as the test needs. */
  program: FakeProgram;
  info?: Partial<EngineInfo>;
}

interface FakeImage extends ImageInfo {
  tags: string[];
}

interface FakeContainer {
  id: string;
  name?: string;
  spec: ContainerSpec;
  image: FakeImage;
  state: "created" | "running" | "exited";
  exit?: ContainerExit;
  output?: { stdout: PassThrough; stderr: PassThrough };
  abort: AbortController;
  traps: Map<string, () => void>;
  done: Promise<ContainerExit>;
  finish: (exit: ContainerExit) => void;
}

const SIGNAL_NUMBERS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGUSR1: 10, SIGUSR2: 12, SIGTERM: 15 };

/**
 * An in-memory `ContainerRuntime` whose containers run a JS function instead of a
 * process. It keeps the engine's observable rules (attach before start, exit 128+n on a
 * kill, idempotent kill/remove, label filters, a missing image fails `create`), which the
 * shared behaviour suite checks against Docker too.
 */
export class FakeRuntime implements ContainerRuntime {
  private readonly images = new Map<string, FakeImage>();
  private readonly containers = new Map<string, FakeContainer>();
  /** Every spec passed to `create`, in order: what a test inspects to see the policy applied. */
  readonly created: ContainerSpec[] = [];

  constructor(private readonly options: FakeRuntimeOptions) {}

  async ping(): Promise<EngineInfo> {
    return { serverVersion: "fake", apiVersion: "1.41", endpoint: "fake://", runtimes: ["runc"], defaultRuntime: "runc", ...this.options.info };
  }

  /** Registers an image directly, as if built elsewhere. */
  addImage(tag: string, labels: Record<string, string> = {}): ImageInfo {
    const id = `sha256:${createHash("sha256").update(tag).update(JSON.stringify(labels)).digest("hex")}`;
    return this.storeImage(id, tag, labels);
  }

  private storeImage(id: string, tag: string, labels: Record<string, string>): ImageInfo {
    for (const image of this.images.values()) image.tags = image.tags.filter((t) => t !== tag);
    const image: FakeImage = this.images.get(id) ?? { id, labels, tags: [] };
    image.tags.push(tag);
    this.images.set(id, image);
    return { id, labels: { ...labels } };
  }

  async buildImage(context: NodeJS.ReadableStream | Buffer, opts: { tag: string; labels?: Record<string, string> }): Promise<ImageInfo> {
    const bytes = Buffer.isBuffer(context) ? context : await readAll(context as NodeJS.ReadableStream);
    const files = await untar(bytes);
    const dockerfile = files.get("Dockerfile");
    if (!dockerfile) throw new ContainerRuntimeError(`build ${opts.tag} failed: no Dockerfile in the context`, "build-failed");
    const labels = { ...dockerfileLabels(dockerfile.toString("utf8")), ...opts.labels };
    const id = `sha256:${createHash("sha256").update(bytes).update(JSON.stringify(labels)).digest("hex")}`;
    return this.storeImage(id, opts.tag, labels);
  }

  private findImage(ref: string): FakeImage | undefined {
    const direct = this.images.get(ref) ?? this.images.get(`sha256:${ref}`);
    if (direct) return direct;
    const tag = ref.includes(":") ? ref : `${ref}:latest`;
    return [...this.images.values()].find((i) => i.tags.includes(tag));
  }

  async inspectImage(ref: string): Promise<ImageInfo | undefined> {
    const image = this.findImage(ref);
    return image && { id: image.id, labels: { ...image.labels } };
  }

  async create(spec: ContainerSpec): Promise<string> {
    assertValidSpec(spec);
    const image = this.findImage(spec.image);
    if (!image) throw new ContainerRuntimeError(`create container from ${spec.image}: no such image`, "not-found");
    if (spec.name !== undefined && [...this.containers.values()].some((c) => c.name === spec.name)) {
      throw new ContainerRuntimeError(`create container: the name ${spec.name} is in use`, "conflict");
    }
    const id = randomBytes(32).toString("hex");
    let finish!: (exit: ContainerExit) => void;
    const done = new Promise<ContainerExit>((resolve) => (finish = resolve));
    const container: FakeContainer = { id, spec: copySpec(spec), image, state: "created", abort: new AbortController(), traps: new Map(), done, finish };
    if (spec.name !== undefined) container.name = spec.name;
    this.containers.set(id, container);
    this.created.push(copySpec(spec));
    return id;
  }

  private get(id: string, what: string): FakeContainer {
    const c = this.containers.get(id);
    if (!c) throw new ContainerRuntimeError(`${what} ${id}: not found`, "not-found");
    return c;
  }

  async attach(id: string): Promise<ContainerOutput> {
    const c = this.get(id, "attach");
    if (c.state === "exited") {
      // The engine answers an attach to an exited container with streams that end at once.
      return { stdout: Readable.from([]), stderr: Readable.from([]) };
    }
    c.output ??= { stdout: new PassThrough(), stderr: new PassThrough() };
    return { stdout: c.output.stdout, stderr: c.output.stderr };
  }

  async start(id: string): Promise<void> {
    const c = this.get(id, "start");
    if (c.state !== "created") return;
    c.state = "running";
    // Output written before anyone attached is lost, as with the engine.
    const stdout = c.output?.stdout ?? new PassThrough().resume();
    const stderr = c.output?.stderr ?? new PassThrough().resume();
    void (async () => {
      let exit: ContainerExit;
      try {
        const trap = (signal: string, handler: () => void): void => void c.traps.set(signal.toUpperCase(), handler);
        const r = await this.options.program({ spec: c.spec, image: { id: c.image.id, labels: { ...c.image.labels } }, stdout, stderr, signal: c.abort.signal, trap });
        exit = typeof r === "number" ? { exitCode: r, oomKilled: false } : (r ?? { exitCode: 0, oomKilled: false });
      } catch (err) {
        stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
        exit = { exitCode: 1, oomKilled: false };
      }
      this.exited(c, exit);
    })();
  }

  private exited(c: FakeContainer, exit: ContainerExit): void {
    if (c.state === "exited") return;
    c.state = "exited";
    c.exit = exit;
    c.output?.stdout.end();
    c.output?.stderr.end();
    c.finish(exit);
  }

  async wait(id: string): Promise<ContainerExit> {
    const c = this.get(id, "wait");
    // The engine's default wait condition ("not-running") returns at once for a created container.
    if (c.state === "created") return { exitCode: 0, oomKilled: false };
    return c.done;
  }

  async kill(id: string, signal = "SIGKILL"): Promise<void> {
    const n = SIGNAL_NUMBERS[signal.toUpperCase()];
    if (n === undefined) throw new ContainerRuntimeError(`kill ${id}: unknown signal ${signal}`, "invalid-spec");
    const c = this.containers.get(id);
    if (c?.state !== "running") return;
    if (n !== 9) {
      const handler = c.traps.get(signal.toUpperCase());
      if (handler) return handler();
      if (c.spec.init !== true) return;
    }
    c.abort.abort(new Error(signal));
    this.exited(c, { exitCode: 128 + n, oomKilled: false });
  }

  async inspect(id: string): Promise<ContainerState | undefined> {
    const c = this.containers.get(id);
    if (!c) return undefined;
    return {
      running: c.state === "running",
      exitCode: c.exit?.exitCode ?? null,
      oomKilled: c.exit?.oomKilled ?? false,
      labels: { ...c.image.labels, ...c.spec.labels },
      env: Object.entries(c.spec.env).map(([k, v]) => `${k}=${v}`),
      runtime: c.spec.runtime ?? "runc",
    };
  }

  async remove(id: string): Promise<void> {
    await this.kill(id);
    this.containers.delete(id);
  }

  async listByLabel(labels: Record<string, string>): Promise<ContainerSummary[]> {
    assertLabelFilter(labels);
    const wanted = Object.entries(labels);
    const out: ContainerSummary[] = [];
    for (const c of this.containers.values()) {
      const all = { ...c.image.labels, ...c.spec.labels };
      if (wanted.every(([k, v]) => all[k] === v)) out.push({ id: c.id, labels: all, running: c.state === "running" });
    }
    return out;
  }
}

async function untar(bytes: Buffer): Promise<Map<string, Buffer>> {
  const files = new Map<string, Buffer>();
  const extract = tar.extract();
  const finished = new Promise<void>((resolve, reject) => {
    extract.on("entry", (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on("data", (c: unknown) => chunks.push(c as Buffer));
      stream.on("end", () => {
        if (header.type === "file") files.set(header.name, Buffer.concat(chunks));
        next();
      });
      stream.resume();
    });
    extract.on("finish", resolve);
    extract.on("error", reject);
  });
  extract.end(bytes);
  await finished;
  return files;
}

/** `LABEL "k"="v" …` lines of a Dockerfile, in the JSON-quoted form our contexts write. */
function dockerfileLabels(dockerfile: string): Record<string, string> {
  const labels: Record<string, string> = {};
  const quoted = String.raw`"(?:[^"\\]|\\.)*"`;
  for (const line of dockerfile.split("\n")) {
    if (!line.startsWith("LABEL ")) continue;
    for (const m of line.slice(6).matchAll(new RegExp(`(${quoted})=(${quoted})`, "g"))) {
      labels[JSON.parse(m[1]!) as string] = JSON.parse(m[2]!) as string;
    }
  }
  return labels;
}

/** A copy the caller cannot change afterwards; the workspace's tar() is a function, kept as is. */
function copySpec(spec: ContainerSpec): ContainerSpec {
  const { workspace, ...data } = spec;
  return { ...structuredClone(data), ...(workspace ? { workspace: { ...workspace } } : {}) };
}
