import { afterAll, describe, expect, it } from "vitest";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runStudy } from "../../src/study/run.ts";
import { DockerSandbox, ENDPOINT_DIRS, toContainerSpec } from "../../src/sandbox/docker-sandbox.ts";
import type { Endpoint, PreparedSandbox, SandboxSpec } from "../../src/sandbox/sandbox.ts";
import type { ContainerRuntime } from "../../src/sandbox/port.ts";
import { runTestCommand } from "../../src/session/test-command.ts";
import { attemptSandboxSpec } from "../../src/transport/cli/spec.ts";
import { loadManifest, type LoadedManifest } from "../../src/manifest/load.ts";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { ExitCode } from "../../src/util/errors.ts";
import { FakeRuntime } from "../support/fake-runtime.ts";
import { fakeClaudeRuntime, unitStudyConfig } from "../support/unit-study.ts";
import { baseEvents, toText } from "./transcript-fixtures.ts";

/**
 * The sandbox seam as its callers use it: the CLI attempt's stage and the session's test command
 * prepare their runs through the `Sandbox` they are given (not through the engine's port), and the
 * Docker provider turns a provider-neutral spec into the container it always was.
 */

/** The Docker provider over `runtime`, recording every spec it is asked to prepare and answering `reach` its own way. */
class RecordingSandbox extends DockerSandbox {
  readonly specs: SandboxSpec[] = [];
  constructor(runtime: ContainerRuntime) {
    super(runtime);
  }
  override prepare(spec: SandboxSpec): Promise<PreparedSandbox> {
    this.specs.push(spec);
    return super.prepare(spec);
  }
  override reach(endpoint: Endpoint): string {
    return `/elsewhere/${endpoint.name}`;
  }
}

/** A work folder with the demo corpus, and the demo manifest. */
async function demoFixture(): Promise<{ work: string; loaded: LoadedManifest; roots: Map<string, string> }> {
  const work = await mkdtemp(join(tmpdir(), "sr-unit-seam-"));
  const corpus = Object.entries(await makeDemoCorpus(join(work, "corpus")));
  return { work, loaded: await loadManifest(DEMO_MANIFEST), roots: new Map(corpus.map(([n, { dir }]) => [n, dir])) };
}
const fixture = demoFixture();
afterAll(async () => rm((await fixture).work, { recursive: true, force: true }));

describe("the sandbox seam", () => {
  // contract: R281
  it("runs every attempt of a study in the sandbox it is given, from a provider-neutral spec", async () => {
    const runtime = fakeClaudeRuntime((_, proc) => {
      proc.stdout.write(toText(baseEvents("repository")));
      return 0;
    });
    const sandbox = new RecordingSandbox(runtime);
    const { work, loaded, roots } = await fixture;
    const loginDir = join(work, "login");
    await writeTestLogin(loginDir);
    const config = unitStudyConfig({ work, name: "seam", loaded, roots, loginDir, attempts: 2, overrides: { capUsd: 1 } });
    const code = await runStudy(config, { runtime, sandbox, stdout: () => {}, stderr: process.stderr });
    expect(code).toBe(ExitCode.ok);
    expect(sandbox.specs).toHaveLength(2);
    for (const spec of sandbox.specs) {
      expect(spec.workspace?.target).toBe("/workspace");
      expect(spec.worktree).toBeUndefined();
      expect(spec.staged).toMatchObject({ target: "/run/study-runner-login", readOnly: false });
      expect(spec.memoryVolumes.map((v) => v.target)).toEqual(["/tmp", "/home/agent"]);
      expect(spec.security).toEqual({ readOnlyRoot: true, dropAllCapabilities: true, noNewPrivileges: true });
      // The CLI looks up no name (contract R281): the provider may leave the network out.
      expect(spec.network).toEqual({ mode: "none", names: false });
    }
    // Every container the engine made for an attempt came through the sandbox.
    expect(runtime.created.filter((s) => !s.cmd.includes("--version"))).toHaveLength(2);
  });

  it("asks the sandbox where the inside reaches each endpoint", () => {
    const runtime = new FakeRuntime({ program: () => 0 });
    const sandbox = new RecordingSandbox(runtime);
    const spec = attemptSandboxSpec(
      {
        image: "img",
        argv: [],
        exportDir: "/tmp/x",
        homeDir: "/tmp/h",
        network: { mode: "none" },
        labels: {},
        attemptIndex: 0,
        modelApiSocket: "/tmp/api/api.sock",
        egressProxySocket: "/tmp/egress/p.sock",
      },
      (e) => sandbox.reach(e),
    );
    expect(spec.endpoints).toEqual([
      { name: "model-api", socket: "/tmp/api/api.sock" },
      { name: "egress-proxy", socket: "/tmp/egress/p.sock" },
    ]);
    expect(spec.entrypoint).toEqual(expect.arrayContaining(["--api", "/elsewhere/model-api", "--proxy", "/elsewhere/egress-proxy"]));
  });

  // contract: R281
  it("runs a session's test command in the sandbox it is given: its worktree read-only, no endpoint, no network", async () => {
    const runtime = new FakeRuntime({
      program: ({ spec, stdout }) => {
        stdout.write(`ran ${spec.entrypoint?.join(" ")} ${spec.cmd.join(" ")}\n`);
        return 2;
      },
    });
    runtime.addImage("img:test");
    const sandbox = new RecordingSandbox(runtime);
    const run = await runTestCommand(sandbox, { image: "img:test", worktree: "/tmp/wt", command: ["npm", "test"], labels: { "study-runner.run": "r" } });
    expect(run).toMatchObject({ exitCode: 2, timedOut: false, output: "ran npm test\n" });
    expect(sandbox.specs).toHaveLength(1);
    expect(sandbox.specs[0]).toMatchObject({ worktree: { folder: "/tmp/wt", target: "/workspace", readOnly: true }, endpoints: [] });
    // The repository's own command keeps `localhost` (contract R281).
    expect(sandbox.specs[0]!.network).toEqual({ mode: "none" });
    expect(runtime.created[0]?.networkDisabled).toBeUndefined();
    expect(runtime.created[0]?.mounts).toEqual([{ source: "/tmp/wt", target: "/workspace", readOnly: true }]);
  });

  it("maps a spec onto a container on Docker: folders, endpoint folders read-only, tmpfs, limits, security, OCI runtime", () => {
    const spec: SandboxSpec = {
      image: "sha256:abc",
      cmd: ["x"],
      env: { A: "1" },
      worktree: { folder: "/h/wt", target: "/workspace", readOnly: false },
      staged: { folder: "/h/login", target: "/run/login", readOnly: true },
      endpoints: [
        { name: "session-channel", socket: "/h/ch/s.sock" },
        { name: "doc-bridge", socket: "/h/mcp/mcp.sock" },
      ],
      testMounts: [{ folder: "/h/fake.json", target: "/fake/behaviour.json", readOnly: true }],
      memoryVolumes: [{ target: "/home/agent", bytes: 1048576, owner: { uid: 1000, gid: 1000 }, mode: "0700" }],
      limits: { memoryBytes: 2048, nanoCpus: 1e9, pidsLimit: 64 },
      security: { readOnlyRoot: true, dropAllCapabilities: true, noNewPrivileges: true },
      network: { mode: "container", id: "side" },
      ociRuntime: "runsc",
      labels: { l: "v" },
    };
    expect(toContainerSpec(spec)).toEqual({
      image: "sha256:abc",
      cmd: ["x"],
      env: { A: "1" },
      mounts: [
        { source: "/h/wt", target: "/workspace", readOnly: false },
        { source: "/h/login", target: "/run/login", readOnly: true },
        { source: "/h/ch", target: ENDPOINT_DIRS["session-channel"], readOnly: true },
        { source: "/h/mcp", target: ENDPOINT_DIRS["doc-bridge"], readOnly: true },
        { source: "/h/fake.json", target: "/fake/behaviour.json", readOnly: true },
      ],
      tmpfs: { "/home/agent": "rw,nosuid,nodev,size=1048576,uid=1000,gid=1000,mode=0700" },
      readOnlyRootfs: true,
      networkMode: "container:side",
      capDrop: ["ALL"],
      securityOpt: ["no-new-privileges"],
      pidsLimit: 64,
      memoryBytes: 2048,
      nanoCpus: 1e9,
      labels: { l: "v" },
      runtime: "runsc",
    });
  });
});
