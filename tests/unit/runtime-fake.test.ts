import { describe, expect, it } from "vitest";
import { FakeRuntime } from "../support/fake-runtime.ts";
import { fakePrograms, runtimeBehaviourSuite, sandboxBehaviourSuite } from "../support/runtime-behaviour.ts";
import { DockerSandbox } from "../../src/sandbox/docker-sandbox.ts";

runtimeBehaviourSuite("FakeRuntime", async () => {
  const runtime = new FakeRuntime({ program: fakePrograms });
  const image = runtime.addImage("study-runner-test/programs:fake");
  return { runtime, image: image.id, program: (name) => ({ cmd: [name] }) };
});

describe("FakeRuntime specifics", () => {
  it("loses output written before anyone attached, as the engine does", async () => {
    const runtime = new FakeRuntime({
      program: ({ stdout }) => {
        stdout.write("early\n");
        return 0;
      },
    });
    runtime.addImage("img:1");
    const spec = { image: "img:1", cmd: [], env: {}, mounts: [], tmpfs: {}, readOnlyRootfs: true, networkMode: "none" as const, capDrop: [], securityOpt: [], labels: {} };
    const id = await runtime.create(spec);
    await runtime.start(id);
    await runtime.wait(id);
    const { stdout } = await runtime.attach(id);
    const chunks: unknown[] = [];
    for await (const c of stdout) chunks.push(c);
    expect(chunks).toEqual([]);
    expect(runtime.created).toHaveLength(1);
    expect(runtime.created[0]).toEqual(spec);
  });

  it("reports a program that throws as exit 1 with its message on stderr", async () => {
    const runtime = new FakeRuntime({
      program: () => {
        throw new Error("boom");
      },
    });
    runtime.addImage("img:1");
    const id = await runtime.create({ image: "img:1", cmd: [], env: {}, mounts: [], tmpfs: {}, readOnlyRootfs: true, networkMode: "none", capDrop: [], securityOpt: [], labels: {} });
    const { stderr } = await runtime.attach(id);
    let err = "";
    stderr.on("data", (c: Buffer) => (err += c.toString()));
    await runtime.start(id);
    expect(await runtime.wait(id)).toEqual({ exitCode: 1, oomKilled: false });
    expect(err).toBe("boom\n");
  });
});

sandboxBehaviourSuite("the Docker provider over FakeRuntime", async () => {
  const runtime = new FakeRuntime({ program: fakePrograms });
  const image = runtime.addImage("study-runner-test/programs:fake");
  return { sandbox: new DockerSandbox(runtime), image: image.id, program: (name) => ({ cmd: [name] }) };
});
