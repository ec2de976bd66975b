import { beforeAll, describe, expect, it } from "vitest";
import { buildImage, probeVersion } from "../../src/image/build.ts";
import { contextDigest, fileSha256 } from "../../src/image/context.ts";
import { IMAGE_LABELS } from "../../src/image/specs.ts";
import { fakeClaudeImageSpec, FAKE_CLAUDE_SCRIPT } from "../../src/stand-ins/fake-claude/image.ts";
import type { ImageSpec } from "../../src/image/context.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";

const runtime = new DockerRuntime();
let spec: ImageSpec;

beforeAll(async () => {
  spec = await fakeClaudeImageSpec();
});

describe("offline image builds on the real engine", () => {
  it("gives the same context digest for two packs of the same inputs", async () => {
    expect(await contextDigest(spec)).toBe(await contextDigest(await fakeClaudeImageSpec()));
  });

  it("builds the fake image FROM scratch without a registry and probes its version in a hardened container", async () => {
    const built = await buildImage(runtime, spec);
    expect(built.tag).toBe("study-runner/fake-claude:2.1.296");
    expect(built.labels).toMatchObject({
      [IMAGE_LABELS.contextDigest]: await contextDigest(spec),
      [IMAGE_LABELS.kind]: "fake-claude",
      [IMAGE_LABELS.claudeVersion]: "2.1.296",
      [IMAGE_LABELS.claudeSha256]: await fileSha256(FAKE_CLAUDE_SCRIPT),
    });
    expect(await probeVersion(runtime, built.tag)).toEqual({ version: "2.1.296", imageId: built.id, binarySha256: await fileSha256(FAKE_CLAUDE_SCRIPT), kind: "fake-claude" });
  });

  it("builds only when no image with the same context digest is tagged", async () => {
    const tag = "study-runner-test/fake-claude:cache";
    const a: ImageSpec = { ...spec, tag, labels: { ...spec.labels, "study-runner.test": "a" } };
    const b: ImageSpec = { ...spec, tag, labels: { ...spec.labels, "study-runner.test": "b" } };
    await buildImage(runtime, a);
    const first = await buildImage(runtime, b);
    expect(first.built).toBe(true);
    const again = await buildImage(runtime, b);
    expect(again).toEqual({ ...first, built: false });
    const back = await buildImage(runtime, a);
    expect(back.built).toBe(true);
    expect(back.contextDigest).not.toBe(first.contextDigest);
    expect((await runtime.inspectImage(tag))?.labels["study-runner.test"]).toBe("a");
  });
});
