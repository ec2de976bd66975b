import { access, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { homedir, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import Docker from "dockerode";
import { pack } from "tar-stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { buildImage, runnerFilesProblem } from "../../src/image/build.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { DEMO_MANIFEST, PROJECT_ROOT } from "../../src/util/paths.ts";
import { runCli } from "../support/cli.ts";
import { SECOND_ENGINE_DIR, startSecondEngine } from "../support/second-engine.ts";

/**
 * An engine that does not share the runner's files (a second dockerd in a mount namespace of its
 * own, tests/support/second-engine.ts). The preflight finds out by a probe that such an engine
 * cannot see them: a study and its adjudication then run over the engine's API alone (the
 * engine-api channel: content copied in, sockets carried as streams), and so do session tasks,
 * their worktrees copied in and back.
 */

const TINY_IMAGE = "study-runner-test/files-probe:1";
const FAKE_IMAGE = "study-runner/fake-claude:2.1.296";
let host: string;
let engine: Docker;
let work: string;

/** A one-file image built on the second engine, offline: enough to create (never start) containers there. */
async function buildTinyImage(docker: Docker): Promise<void> {
  const context = pack();
  context.entry({ name: "Dockerfile" }, "FROM scratch\nCOPY marker /marker\n");
  context.entry({ name: "marker" }, "files probe\n");
  context.finalize();
  const stream = await docker.buildImage(context as unknown as NodeJS.ReadableStream, { t: TINY_IMAGE });
  await new Promise<void>((resolve, reject) =>
    docker.modem.followProgress(stream, (err: Error | null, out: { error?: string }[]) => {
      const failed = err ?? out.find((o) => o.error)?.error;
      if (failed) reject(failed instanceof Error ? failed : new Error(failed));
      else resolve();
    }),
  );
}

beforeAll(async () => {
  host = await startSecondEngine();
  engine = new Docker({ socketPath: `${SECOND_ENGINE_DIR}/docker.sock` });
  await buildTinyImage(engine);
  work = await mkdtemp(join(tmpdir(), "sr-engine-files-"));
}, 180_000);
afterAll(() => rm(work, { recursive: true, force: true }));

describe("an engine that does not share the runner's files", () => {
  // contract: R200
  it("cannot bind the runner's temporary folder, HOME or checkout, while the local engine can", async () => {
    // The runner's own folders, wherever the checkout is (under the temporary folder in CI's /tmp/ci/clone).
    for (const folder of new Set([tmpdir(), homedir(), "/home", dirname(PROJECT_ROOT)])) {
      const bind = {
        Image: TINY_IMAGE,
        Cmd: ["/marker"],
        NetworkDisabled: true,
        HostConfig: { NetworkMode: "none", Mounts: [{ Type: "bind" as const, Source: folder, Target: "/seen", ReadOnly: true }] },
      };
      // The folder exists on the engine's host too (an empty tmpfs), so a folder only the runner has is what must fail: one made inside it.
      const mine = await mkdtemp(join(folder, ".sr-engine-files-"));
      try {
        await expect(engine.createContainer({ ...bind, HostConfig: { ...bind.HostConfig, Mounts: [{ ...bind.HostConfig.Mounts[0]!, Source: mine }] } })).rejects.toThrow(
          /bind source path does not exist/,
        );
      } finally {
        await rm(mine, { recursive: true, force: true });
      }
    }
    // The probe the preflight runs: refused on the second engine, naming the folder; accepted on the local one.
    const probeLabels = { "study-runner-test.files-probe": String(process.pid) };
    const problem = await runnerFilesProblem(new DockerRuntime({ socketPath: `${SECOND_ENGINE_DIR}/docker.sock` }), TINY_IMAGE, probeLabels);
    expect(problem).toMatch(/the Docker engine cannot see this machine's files: it refused a container's bind of the runner's folder \/.*study-runner-probe-/);
    expect(problem).toMatch(/run study-runner there/);
    const local = new DockerRuntime();
    await local.ping();
    expect(await localProbe(local)).toBeNull();
    // The probe leaves no folder and no container behind.
    expect((await readdir(tmpdir())).filter((n) => n.startsWith(`study-runner-probe-${process.pid}-`))).toEqual([]);
    expect(await engine.listContainers({ all: true, filters: { label: [`study-runner-test.files-probe=${process.pid}`] } })).toEqual([]);
  });

  // contract: R240
  it("`demo --pilot` on it runs over the engine's API alone: both arms and the adjudication, exit 0", async () => {
    const workdir = join(work, "demo");
    const r = await runCli(["demo", "--pilot", "--quiet", "--workdir", workdir], { env: { DOCKER_HOST: host }, timeoutMs: 600_000 });
    expect(r.code, r.stderr).toBe(0);
    const name = (await readdir(join(workdir, "ledgers"))).find((n) => /^run-.*\.json$/.test(n) && !n.includes("adjudication"))!;
    const ledger = JSON.parse(await readFile(join(workdir, "ledgers", name), "utf8"));
    expect(ledger.sandbox).toEqual({ provider: "docker", channel: "engine-api", endpoint: host, os: "linux", arch: expect.any(String) });
    expect(ledger.observations.map((o: { status: string }) => o.status)).toEqual(["completed", "completed"]);
    expect(ledger.observations.find((o: { arm: string }) => o.arm === "mcp").mcp.toolCalls.length).toBeGreaterThan(0);
    // Nothing of the run is left on that engine: no container, no volume (other files' runs may share the engine).
    const run = [`${LABELS.run}=${ledger.runId}`];
    expect(await engine.listContainers({ all: true, filters: { label: run } })).toEqual([]);
    expect((await engine.listVolumes({ filters: { label: run } })).Volumes ?? []).toEqual([]);
  }, 600_000);

  // contract: R244
  it("refuses `run --credentials login-copy` on it with exit 2 before anything is reserved, naming the gateway", async () => {
    const corpus = join(work, "demo", "corpus");
    const loginDir = join(work, "login-copy");
    await writeTestLogin(loginDir);
    const output = join(work, "login-copy-ledger.json");
    const roots = (await readdir(corpus)).flatMap((name) => ["--root", `${name}=${join(corpus, name)}`]);
    const argv = ["run", "--manifest", DEMO_MANIFEST, "--pilot", "--approve-budget", "--quiet", "--transport", "cli", "--credentials", "login-copy", "--isolation", "offline"];
    const r = await runCli([...argv, "--image", FAKE_IMAGE, "--claude-config-dir", loginDir, "--output", output, ...roots], {
      env: { DOCKER_HOST: host, STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" },
    });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/login-copy/);
    expect(r.stderr).toMatch(/--credentials gateway/);
    await expect(access(output)).rejects.toThrow(/ENOENT/);
  }, 180_000);

  // contract: R200, R245, R247
  it("`demo --sessions` on it runs over the engine's API alone: questions, scripted answers, resumes and tests, exit 0; `doctor` names the engine-api channel", async () => {
    const workdir = join(work, "sessions");
    const sessions = await runCli(["demo", "--sessions", "--quiet", "--workdir", workdir], { env: { DOCKER_HOST: host }, timeoutMs: 600_000 });
    expect(sessions.code, sessions.stderr).toBe(0);
    const name = (await readdir(join(workdir, "ledgers"))).find((n) => /^sessions-.*\.json$/.test(n))!;
    const ledger = JSON.parse(await readFile(join(workdir, "ledgers", name), "utf8"));
    // The probe chose the channel: the engine cannot see the worktree, so it was copied in and back.
    expect(ledger.sandbox).toEqual({ provider: "docker", channel: "engine-api", endpoint: host, os: "linux", arch: expect.any(String) });
    expect(ledger.status).toBe("finished");
    expect(ledger.sessions.map((s: { state: string; calls: Array<{ resultStatus: string }>; test: { exitCode: number } }) => [s.state, s.calls.map((c) => c.resultStatus), s.test.exitCode])).toEqual([
      ["done", ["question", "done"], 0],
      ["done", ["question", "done"], 0],
    ]);
    // Nothing of the sessions is left on that engine: no container, no volume.
    const run = [`${LABELS.run}=${ledger.runId}`];
    expect(await engine.listContainers({ all: true, filters: { label: run } })).toEqual([]);
    expect((await engine.listVolumes({ filters: { label: run } })).Volumes ?? []).toEqual([]);
    // The fake image the pilot above built on that engine.
    const doctor = await runCli(["doctor", "--transport", "cli", "--image", FAKE_IMAGE], { env: { DOCKER_HOST: host } });
    const line = doctor.stdout.split("\n").find((l) => l.includes("engine-files"));
    expect(line, doctor.stdout).toMatch(/channel engine-api: the Docker engine cannot see this machine's files/);
    expect(line).toMatch(/session tasks get their content copied in \(and a session's worktree copied back\)/);
    expect(line).toMatch(/--credentials login-copy needs the engine's own host or a local engine/);
  }, 600_000);
});

/** The same probe against the local engine, with an image the suite builds anyway (the fake claude). */
async function localProbe(local: DockerRuntime): Promise<string | null> {
  const image = await buildImage(local, await fakeClaudeImageSpec());
  return runnerFilesProblem(local, image.id, {});
}
