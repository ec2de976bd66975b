import { describe, expect, it } from "vitest";
import { probeVersion } from "../../src/image/build.ts";
import { IMAGE_LABELS } from "../../src/image/specs.ts";
import { FakeRuntime, type FakeProgram } from "../support/fake-runtime.ts";
import { RefusalError } from "../../src/util/errors.ts";

const SHA = "a".repeat(64);

function setup(program: FakeProgram, labels: Record<string, string> = { [IMAGE_LABELS.claudeSha256]: SHA }) {
  const runtime = new FakeRuntime({ program });
  const image = runtime.addImage("study-runner/fake-claude:test", labels);
  return { runtime, image };
}

const prints =
  (text: string, code = 0): FakeProgram =>
  ({ stdout }) => {
    stdout.write(text);
    return code;
  };

describe("probeVersion", () => {
  it("returns the printed version with the image id and binary hash, from a hardened throwaway container", async () => {
    const { runtime, image } = setup(prints("2.1.296 (Claude Code)\n"));
    const probed = await probeVersion(runtime, "study-runner/fake-claude:test", { labels: { "study-runner.run": "r1" } });
    expect(probed).toEqual({ version: "2.1.296", imageId: image.id, binarySha256: SHA, kind: null });
    expect(runtime.created).toHaveLength(1);
    const spec = runtime.created[0]!;
    expect(spec).toMatchObject({
      image: image.id,
      cmd: ["--version"],
      env: {},
      user: "1000:1000",
      mounts: [],
      readOnlyRootfs: true,
      networkMode: "none",
      capDrop: ["ALL"],
      securityOpt: ["no-new-privileges"],
      labels: { "study-runner.run": "r1" },
    });
    expect(spec.entrypoint).toBeUndefined();
    expect(Object.keys(spec.tmpfs).sort()).toEqual(["/home/agent", "/tmp"]);
    expect(spec.tmpfs["/home/agent"]).toMatch(/uid=1000,gid=1000/);
    expect(await runtime.listByLabel({ "study-runner.run": "r1" })).toEqual([]);
  });

  it("reports another version as printed (the caller compares it with the pin)", async () => {
    const { runtime } = setup(prints("2.1.295 (Claude Code)\n"));
    expect((await probeVersion(runtime, "study-runner/fake-claude:test")).version).toBe("2.1.295");
  });

  it.each([
    ["unexpected text", prints("claude version 2.1.296\n")],
    ["extra output", prints("2.1.296 (Claude Code)\nupdate available\n")],
    ["a non-zero exit", prints("2.1.296 (Claude Code)\n", 1)],
  ])("refuses %s and removes the container", async (_what, program) => {
    const { runtime } = setup(program);
    await expect(probeVersion(runtime, "study-runner/fake-claude:test", { labels: { probe: "x" } })).rejects.toBeInstanceOf(RefusalError);
    expect(await runtime.listByLabel({ probe: "x" })).toEqual([]);
  });

  it("kills and refuses a probe that does not finish in time", async () => {
    const { runtime } = setup(({ signal }) => new Promise((resolve) => signal.addEventListener("abort", () => resolve(0))));
    await expect(probeVersion(runtime, "study-runner/fake-claude:test", { timeoutMs: 100, labels: { probe: "slow" } })).rejects.toThrow(/did not finish/);
    expect(await runtime.listByLabel({ probe: "slow" })).toEqual([]);
  });

  it("refuses an image without a binary hash label, or no image at all, before running anything", async () => {
    const { runtime } = setup(prints("2.1.296 (Claude Code)\n"), {});
    await expect(probeVersion(runtime, "study-runner/fake-claude:test")).rejects.toThrow(/claude-sha256/);
    await expect(probeVersion(runtime, "study-runner/absent:1")).rejects.toThrow(/does not exist/);
    expect(runtime.created).toEqual([]);
  });
});
