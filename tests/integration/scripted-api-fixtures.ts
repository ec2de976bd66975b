import type { ContainerRuntime, Mount } from "../../src/sandbox/port.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";

/** Where the tests bind-mount the host folder that holds the scripted API's socket. */
export const SOCKET_DIR_IN_CONTAINER = "/run/study-runner-api";

export interface HardenedRun {
  exitCode: number;
  stdout: Buffer;
  stderr: string;
  wallMs: number;
}

export interface HardenedRunOptions {
  image: string;
  /** Host folder with the API socket; mounted read-only (connecting needs no write access). */
  socketDir: string;
  entrypoint: string[];
  cmd: string[];
  env: Record<string, string>;
  mounts?: Mount[];
  /** A writable HOME bind mount; otherwise HOME is a fresh tmpfs owned by uid 1000. */
  home?: string;
  /** Send `signal` once stdout contains `text`. */
  signalAfter?: { text: string; signal: string };
  timeoutMs?: number;
}

/**
 * Runs one container the way the runner hardens attempts: no network but loopback, read-only
 * root, every capability dropped, no privilege gain, uid 1000; returns its output and exit code.
 */
export async function runHardened(runtime: ContainerRuntime, o: HardenedRunOptions): Promise<HardenedRun> {
  const tmpfs: Record<string, string> = { "/tmp": "rw,nosuid,nodev,size=64m" };
  const mounts: Mount[] = [{ source: o.socketDir, target: SOCKET_DIR_IN_CONTAINER, readOnly: true }, ...(o.mounts ?? [])];
  if (o.home) mounts.push({ source: o.home, target: IMAGE_LAYOUT.home, readOnly: false });
  else tmpfs[IMAGE_LAYOUT.home] = `rw,nosuid,nodev,size=64m,uid=${IMAGE_LAYOUT.uid},gid=${IMAGE_LAYOUT.gid}`;
  const started = Date.now();
  const id = await runtime.create({
    image: o.image,
    entrypoint: o.entrypoint,
    cmd: o.cmd,
    env: o.env,
    user: IMAGE_LAYOUT.user,
    mounts,
    tmpfs,
    readOnlyRootfs: true,
    networkMode: "none",
    capDrop: ["ALL"],
    securityOpt: ["no-new-privileges"],
    pidsLimit: 256,
    labels: { "study-runner.test": "scripted-api" },
  });
  try {
    const { stdout, stderr } = await runtime.attach(id);
    const out: Buffer[] = [];
    let err = "";
    let signalled = false;
    stdout.on("data", (d: Buffer) => {
      out.push(d);
      if (o.signalAfter && !signalled && Buffer.concat(out).toString("utf8").includes(o.signalAfter.text)) {
        signalled = true;
        void runtime.kill(id, o.signalAfter.signal);
      }
    });
    stderr.on("data", (d: Buffer) => (err += d.toString("utf8")));
    const ended = Promise.all([new Promise((r) => stdout.on("end", r)), new Promise((r) => stderr.on("end", r))]);
    await runtime.start(id);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), o.timeoutMs ?? 60_000)));
    const exit = await Promise.race([runtime.wait(id), timeout]).finally(() => clearTimeout(timer));
    if (exit === "timeout") {
      await runtime.kill(id);
      throw new Error(`container did not finish in time; stderr: ${err.slice(0, 2000)}`);
    }
    await ended;
    return { exitCode: exit.exitCode, stdout: Buffer.concat(out), stderr: err, wallMs: Date.now() - started };
  } finally {
    await runtime.remove(id);
  }
}
