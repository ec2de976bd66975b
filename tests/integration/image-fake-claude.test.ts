import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImage, probeSpec } from "../../src/image/build.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { runBounded } from "../../src/sandbox/bounded.ts";
import { dockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import type { ContainerSpec, Mount } from "../../src/sandbox/port.ts";
import { makeFakeDir, parseEvents, runToEnd, streamJsonArgs, type FakeBehaviourFile, type FakeDir } from "../support/fake-claude.ts";

// The fake claude inside the hardened FROM-scratch image on the real engine: what it can
// see and do there is what a real attempt container would allow.

const runtime = new DockerRuntime();
let image = "";
let workspace = "";
const dirs: FakeDir[] = [];

beforeAll(async () => {
  image = (await buildImage(runtime, await fakeClaudeImageSpec())).id;
  workspace = await mkdtemp(join(tmpdir(), "fake-export-"));
  await writeFile(join(workspace, "README.md"), "# Exported\nthe exported corpus\n", { mode: 0o444 });
  await mkdir(join(workspace, "docs"), { mode: 0o555 });
  // mkdtemp makes 0700 root-owned dirs; an export is 0555 so that uid 1000 can read it.
  await chmod(workspace, 0o555);
});
afterAll(async () => {
  for (const d of dirs) await d.cleanup();
  await chmod(workspace, 0o755);
  await rm(workspace, { recursive: true, force: true });
});

async function fakeDir(file?: FakeBehaviourFile): Promise<FakeDir> {
  const d = await makeFakeDir(file);
  dirs.push(d);
  return d;
}

/** The hardening of the version probe plus a read-only workspace, as an attempt would run. */
function attemptSpec(cmd: string[], mounts: Mount[], env: Record<string, string> = {}): ContainerSpec {
  const base = probeSpec(image, { "study-runner.test": "image-fake-claude" });
  return {
    ...base,
    cmd,
    env,
    workingDir: IMAGE_LAYOUT.workspace,
    mounts: [{ source: workspace, target: IMAGE_LAYOUT.workspace, readOnly: true }, ...mounts],
  };
}

describe("the fake claude image on the real engine", () => {
  it("runs a full ok attempt as uid 1000 with no network, a read-only root and workspace, and a writable tmpfs HOME", async () => {
    const fake = await fakeDir({ default: { kind: "ok", answer: "exported" } });
    const run = await runToEnd(runtime, attemptSpec(streamJsonArgs(), fake.mounts, { STUDY_RUNNER_ATTEMPT: "0" }));
    expect(run.stderr).toBe("");
    expect(run.exitCode).toBe(0);
    const events = parseEvents(run.stdout);
    expect(events[0]).toMatchObject({ cwd: "/workspace", tools: ["Glob", "Grep", "Read"], apiKeySource: "none" });
    const reads = events
      .filter((e) => e.type === "user")
      .flatMap((e) => e.message.content)
      .map((c: any) => c.content);
    expect(reads).toContain("1\t# Exported\n2\tthe exported corpus\n3\t");
    expect(events.at(-1)).toMatchObject({ type: "result", subtype: "success", result: "exported" });

    const records = await fake.records();
    expect(records.map((r) => r.file)).toEqual([expect.stringMatching(/^0-\d+-[0-9a-f]{8}\.json$/)]);
    const record = records[0]!.record;
    expect(record).toMatchObject({
      uid: 1000,
      gid: 1000,
      cwd: "/workspace",
      cwdWritable: false,
      rootWritable: false,
      home: "/home/agent",
      homeWritable: true,
      credentialsPresent: false,
      anthropicApiKeyPresent: false,
      networkInterfaces: ["lo"],
    });
    expect(record.envNames).not.toContain("ANTHROPIC_API_KEY");
    expect(record.envNames).toEqual(expect.arrayContaining(["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_AUTOUPDATER", "HOME", "STUDY_RUNNER_ATTEMPT"]));
    expect(record.listings["/workspace"]).toEqual({ entries: ["README.md", "docs"] });
    expect(record.listings["/run/study-runner"]).toEqual({ error: "ENOENT" });
    // Only the image's own tree, the engine's pseudo-filesystems and our mounts: no host files.
    const root = (record.listings["/"] as { entries: string[] }).entries;
    expect(root.filter((e) => ![".dockerenv", "dev", "proc", "sys"].includes(e)).sort()).toEqual(["etc", "fake", "home", "lib", "lib64", "opt", "tmp", "usr", "workspace"]);
  });

  it("keeps the root and the workspace read-only even where uid 1000 could write", async () => {
    const fake = await fakeDir();
    // Without the HOME tmpfs, /home/agent is the image's own directory, owned by 1000, and
    // this workspace is mode 0777: only the read-only root and the read-only bind stop writes.
    const open = await mkdtemp(join(tmpdir(), "fake-open-export-"));
    await chmod(open, 0o777);
    const spec = (readOnly: boolean): ContainerSpec => ({
      ...attemptSpec(["--version"], fake.mounts, { STUDY_RUNNER_ATTEMPT: readOnly ? "ro" : "rw" }),
      mounts: [{ source: open, target: IMAGE_LAYOUT.workspace, readOnly }, ...fake.mounts],
      tmpfs: { "/tmp": "rw,size=8m" },
      readOnlyRootfs: readOnly,
    });
    expect((await runToEnd(runtime, spec(false))).exitCode).toBe(0);
    expect((await runToEnd(runtime, spec(true))).exitCode).toBe(0);
    const byAttempt = new Map((await fake.records()).map((r) => [r.record.attempt, r.record]));
    expect(byAttempt.get("rw")).toMatchObject({ home: "/home/agent", homeWritable: true, cwd: "/workspace", cwdWritable: true });
    expect(byAttempt.get("ro")).toMatchObject({ home: "/home/agent", homeWritable: false, cwd: "/workspace", cwdWritable: false, rootWritable: false });
    await rm(open, { recursive: true, force: true });
  });

  it("acts out the behaviour of its attempt index and the version of its behaviour file", async () => {
    const fake = await fakeDir({
      version: "2.1.290",
      default: { kind: "ok" },
      attempts: { "3": { kind: "exit", events: [{ type: "system", subtype: "init" }], code: 3 } },
    });
    const exit = await runToEnd(runtime, attemptSpec(streamJsonArgs(), fake.mounts, { STUDY_RUNNER_ATTEMPT: "3" }));
    expect([exit.exitCode, exit.stdout]).toEqual([3, '{"type":"system","subtype":"init"}\n']);
    const version = await runToEnd(runtime, attemptSpec(["--version"], fake.mounts));
    expect(version.stdout).toBe("2.1.290 (Claude Code)\n");
    expect((await fake.records()).map((r) => r.file.split("-")[0]).sort()).toEqual(["3", "probe"]);
  });

  it("keeps sleeping until killed: the caller's timeout is the only stop", async () => {
    const fake = await fakeDir({ default: { kind: "sleep", seconds: 600 } });
    const run = await runToEnd(runtime, attemptSpec(streamJsonArgs(), fake.mounts), 1500);
    expect(run).toMatchObject({ timedOut: true, exitCode: 137, stdout: "" });
  });

  // contract: R67
  it("gives the attempt a closed stdin: a program that reads it sees its end at once", async () => {
    // Run the way an attempt is run (runBounded), with the image's node reading stdin to its end.
    // An open stdin that nobody writes would keep it waiting until the bound below kills it.
    const read = "let n=0;process.stdin.on('data',(d)=>{n+=d.length}).on('end',()=>console.log(JSON.stringify({type:'stdin-end',bytes:n})))";
    const spec = { ...attemptSpec([], []), entrypoint: [IMAGE_LAYOUT.node, "-e", read] };
    const lines: string[] = [];
    const raw = await runBounded(dockerSandbox(runtime).containers, spec, (line) => lines.push(line), { timeoutMs: 20_000 });
    expect(raw).toMatchObject({ timedOut: false, exitCode: 0 });
    expect(lines).toEqual(['{"type":"stdin-end","bytes":0}']);
  });
});
