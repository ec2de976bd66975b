import Docker from "dockerode";
import { describe, expect, it } from "vitest";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { buildImage, probeSpec } from "../../src/image/build.ts";
import { readBoundedText } from "../../src/sandbox/output.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import { DockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import { PROGRAM_SCRIPTS, runtimeBehaviourSuite, sandboxBehaviourSuite } from "../support/runtime-behaviour.ts";

// The programs run under the Node of the fake-claude image (built once, cached by digest).
runtimeBehaviourSuite("DockerRuntime", async () => {
  const runtime = new DockerRuntime();
  const image = await buildImage(runtime, await fakeClaudeImageSpec());
  return { runtime, image: image.id, program: (name) => ({ entrypoint: [IMAGE_LAYOUT.node, "-e", PROGRAM_SCRIPTS[name]], cmd: [] }) };
});

sandboxBehaviourSuite("the Docker provider over DockerRuntime", async () => {
  const runtime = new DockerRuntime();
  const image = await buildImage(runtime, await fakeClaudeImageSpec());
  return { sandbox: new DockerSandbox(runtime), image: image.id, program: (name) => ({ entrypoint: [IMAGE_LAYOUT.node, "-e", PROGRAM_SCRIPTS[name]], cmd: [] }) };
});

// The same seam over the engine-api channel (contract R240): content copied into per-attempt
// volumes, endpoints carried as streams through a relay container, writable folders copied back.
sandboxBehaviourSuite("the Docker provider's engine-api channel over DockerRuntime", async () => {
  const runtime = new DockerRuntime();
  const image = await buildImage(runtime, await fakeClaudeImageSpec());
  const sandbox = new DockerSandbox(runtime, { channel: "engine-api", engineApi: { streamRelay: [IMAGE_LAYOUT.node, `${IMAGE_LAYOUT.helpers}/stream-relay.cjs`] } });
  return { sandbox, image: image.id, program: (name) => ({ entrypoint: [IMAGE_LAYOUT.node, "-e", PROGRAM_SCRIPTS[name]], cmd: [] }) };
});

describe("DockerRuntime connection", () => {
  it("reports the unix socket it reached by default and fails as unavailable on a dead socket", async () => {
    const info = await new DockerRuntime().ping();
    expect(info.endpoint).toMatch(/^unix:\/\/.*docker\.sock$/);
    expect(info.runtimes).toContain("runc");
    await expect(new DockerRuntime({ socketPath: "/nonexistent/docker.sock" }).ping()).rejects.toMatchObject({ code: "unavailable" });
  });
});

describe("DockerRuntime output", () => {
  // contract: R67
  it("carries a container's output through the attach alone: the engine keeps no log of it", async () => {
    const runtime = new DockerRuntime();
    const image = await buildImage(runtime, await fakeClaudeImageSpec());
    // The hardening every container of the runner gets (the probe's spec), running a program that prints to both streams.
    const id = await runtime.create({ ...probeSpec(image.id, {}), entrypoint: [IMAGE_LAYOUT.node, "-e", PROGRAM_SCRIPTS.echo], cmd: [], env: { GREETING: "an answer the engine must not keep" } });
    try {
      const { stdout, stderr } = await runtime.attach(id);
      const output = Promise.all([readBoundedText(stdout, 4096), readBoundedText(stderr, 4096)]);
      await runtime.start(id);
      expect((await runtime.wait(id)).exitCode).toBe(0);
      expect(await output).toEqual(["out:an answer the engine must not keep\n", "err\n"]);
      const container = new Docker().getContainer(id);
      expect((await container.inspect()).HostConfig.LogConfig).toMatchObject({ Type: "none" });
      // Nothing to read back from the engine: `docker logs` has no copy.
      await expect(container.logs({ stdout: true, stderr: true, follow: false })).rejects.toThrow(/logging driver|does not support reading/i);
    } finally {
      await runtime.remove(id);
    }
  });
});
