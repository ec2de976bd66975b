/**
 * The Docker engine stopped during an attempt (issue 10). The engine of this machine is shared
 * with parallel test workers, so this test starts a second dockerd of its own (vfs storage, no
 * bridge, its own data and exec roots and socket), builds the fake image into it offline, points
 * the runner at it with DOCKER_HOST and kills it mid-attempt. The runner must exit 3 (its own
 * fault) with a readable ledger that keeps the reservation charged; once the engine is back, the
 * next run removes the container the dead engine was running.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { mkdtemp, open, readdir, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { prepareDemo } from "../../src/demo/setup.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { runCli } from "../support/cli.ts";
import { freshLogin, leftovers, prepareRun, runPipeline, startPipeline, waitFor, waitForAttemptContainer, RESERVATION_USD, type Pipeline } from "../support/pipeline.ts";

const execFileP = promisify(execFile);

/** A private dockerd: start, kill, start again on the same roots, stop for good. */
class SecondEngine {
  readonly socket: string;
  private child: ChildProcess | undefined;
  private starts = 0;
  constructor(readonly root: string) {
    this.socket = join(root, "docker.sock");
  }
  get host(): string {
    return `unix://${this.socket}`;
  }
  async start(): Promise<void> {
    const log = await open(join(this.root, `dockerd-${++this.starts}.log`), "w");
    await writeFile(join(this.root, "daemon.json"), "{}\n");
    this.child = spawn(
      "dockerd",
      [
        "--config-file",
        join(this.root, "daemon.json"),
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        // overlay2 on a nested data root is not a given; vfs always works (a test, not a benchmark).
        "--storage-driver",
        "vfs",
        "--data-root",
        join(this.root, "data"),
        "--exec-root",
        join(this.root, "exec"),
        "--pidfile",
        join(this.root, "docker.pid"),
        "-H",
        this.host,
      ],
      { stdio: ["ignore", log.fd, log.fd] },
    );
    const child = this.child;
    let exited = false;
    child.on("exit", () => (exited = true));
    await log.close();
    const runtime = new DockerRuntime({ socketPath: this.socket });
    await waitFor(
      "the second dockerd to answer",
      async () => {
        if (exited) throw new Error(`dockerd exited at start:\n${await this.log()}`);
        return runtime.ping().then(
          () => true,
          () => undefined,
        );
      },
      90_000,
      250,
    );
  }
  /**
   * The engine dies at once, as on a crash or `kill -9`: connections drop mid-request. Its
   * containerd dies with it (dockerd gives it a parent-death signal), but not always at once on
   * a loaded machine, and both pid files stay. A dockerd started while the containerd's pid is
   * alive (the containerd still dying, or the pid already reused) takes it for a running
   * containerd, waits for its socket and exits after 15 s (seen once in CI; a live pid in the
   * dockerd pid file stops it at once). So this waits for the containerd to be gone and removes
   * both stale pid files: the restart then starts a containerd of its own.
   */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const pidFile = join(this.root, "exec", "containerd", "containerd.pid");
    const containerd = (await readFile(pidFile, "utf8").catch(() => "")).trim();
    const gone = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await gone;
    if (/^\d+$/.test(containerd)) {
      const alive = async () => (await readFile(`/proc/${containerd}/cmdline`, "utf8").catch(() => "")).includes(join(this.root, "exec"));
      await waitFor("the dead engine's containerd to exit", async () => ((await alive()) ? undefined : true), 60_000, 100);
    }
    await Promise.all([rm(pidFile, { force: true }), rm(join(this.root, "docker.pid"), { force: true })]);
  }
  async stop(): Promise<void> {
    const child = this.child;
    if (child && child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 40_000);
      await gone;
      clearTimeout(timer);
    }
    // A killed dockerd can leave container shims of its exec root behind: end those, and only those.
    for (const pid of await readdir("/proc").catch(() => [] as string[])) {
      if (!/^\d+$/.test(pid)) continue;
      const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
      if (cmdline.includes(join(this.root, "exec"))) {
        try {
          process.kill(Number(pid), "SIGKILL");
        } catch {
          // already gone
        }
      }
    }
    // dockerd bind-mounts its data root onto itself and keeps network namespaces under its exec root.
    const mounts = (await readFile("/proc/self/mounts", "utf8")).split("\n").map((l) => l.split(" ")[1] ?? "");
    for (const m of mounts
      .filter((m) => m.startsWith(`${this.root}/`))
      .sort()
      .reverse()) {
      await execFileP("umount", ["-l", m]).catch(() => undefined);
    }
  }
  log(): Promise<string> {
    return readFile(join(this.root, `dockerd-${this.starts}.log`), "utf8").catch(() => "");
  }
}

let engine: SecondEngine;
let p: Pipeline;
beforeAll(async () => {
  // Short: the engine's unix sockets live under it (108-byte limit).
  const root = await mkdtemp("/tmp/sr-dd-");
  engine = new SecondEngine(root);
  await engine.start();
  const runtime = new DockerRuntime({ socketPath: engine.socket });
  const work = join(root, "work");
  const demo = await prepareDemo(join(work, "demo"), runtime);
  p = {
    work,
    demo,
    runtime,
    rootArgs: Object.entries(demo.roots).flatMap(([n, dir]) => ["--root", `${n}=${dir}`]),
    cleanup: async () => undefined,
  };
}, 600_000);
afterAll(async () => {
  if (!engine) return;
  await engine.stop();
  await rm(engine.root, { recursive: true, force: true }).catch(() => undefined);
}, 120_000);

describe("the Docker engine stopped during an attempt", () => {
  it("the engine is this test's own: a second dockerd on its own socket, not the shared one", async () => {
    const info = await p.runtime.ping();
    expect(info.endpoint).toBe(engine.host);
    expect(resolve(await readlink(`/proc/${(await readFile(join(engine.root, "docker.pid"), "utf8")).trim()}/exe`))).toMatch(/dockerd$/);
  });

  it("the runner exits 3 with a readable ledger that keeps the reservation charged; the next run removes the container", async () => {
    const loginDir = await freshLogin(p);
    const env = { DOCKER_HOST: engine.host };
    const args = ["--test-login-lock-stale-ms", "2000"];
    const run = await prepareRun(p, { behaviour: { attempts: { "0": { kind: "sleep", seconds: 300 } } }, loginDir, env, args });
    const started = startPipeline(run);
    const container = await waitForAttemptContainer(p, started);
    await engine.kill();

    const r = await started.done;
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toMatch(/internal error: .*Docker engine unreachable/);
    expect(r.stdout).toBe("");

    // Decided (docs/reliability.md): the attempt stays unsettled, its reservation counted as spent,
    // and the run is blocked saying why; the outcome of an attempt whose engine died is unknown.
    const ledger = await readLedger(run.output);
    expect(ledger.status).toBe("blocked");
    expect(ledger.statusReason).toMatch(/^attempt 1 stopped by a fault of the runner: .*Docker engine unreachable.*; the attempt was not settled and its reservation stays charged$/);
    expect(ledger.observations.map((o) => [o.phase, o.status, o.chargedUsd])).toEqual([["running", null, null]]);
    expect(ledger.budget).toMatchObject({ reservedUsd: RESERVATION_USD, spentUsd: RESERVATION_USD });
    const check = await runCli(["ledger", "check", run.output, "--json"]);
    expect(check.code).toBe(0);
    expect(JSON.parse(check.stdout)).toMatchObject({ state: "finished", valid: true, openReservation: { index: 0, reservationUsd: RESERVATION_USD } });
    // The export and the login copy are host folders: removed although the engine was gone.
    expect(await leftovers(run.tmp)).toEqual([]);

    // The engine comes back (it stops what its dead self left running); the next run reaps the container.
    await engine.start();
    expect(await p.runtime.inspect(container)).toMatchObject({ labels: expect.objectContaining({ [LABELS.pid]: String(started.pid) }) });
    const next = await runPipeline(p, { loginDir, tmp: run.tmp, env, args });
    expect(next.code, next.stderr).toBe(0);
    expect(await p.runtime.inspect(container)).toBeUndefined();
    expect(await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid) })).toEqual([]);
    expect(await leftovers(run.tmp)).toEqual([]);
  }, 300_000);
});
