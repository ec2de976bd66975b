import { describe, expect, it } from "vitest";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { buildImage } from "../../src/image/build.ts";
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
