import { spawnSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { LABELS, reapOrphans, runnerLabels } from "../../src/sandbox/reaper.ts";
import { buildImage } from "../../src/image/build.ts";
import { IMAGE_LAYOUT } from "../../src/image/specs.ts";
import { fakeClaudeImageSpec } from "../../src/stand-ins/fake-claude/image.ts";
import type { ContainerSpec } from "../../src/sandbox/port.ts";

const runtime = new DockerRuntime();
let image = "";
const made: string[] = [];

beforeAll(async () => {
  image = (await buildImage(runtime, await fakeClaudeImageSpec())).id;
});
afterAll(async () => {
  for (const id of made) await runtime.remove(id);
});

const sleeper = (labels: Record<string, string>): ContainerSpec => ({
  image,
  entrypoint: [IMAGE_LAYOUT.node, "-e", "setTimeout(() => {}, 3600e3)"],
  cmd: [],
  env: {},
  user: IMAGE_LAYOUT.user,
  mounts: [],
  tmpfs: {},
  readOnlyRootfs: true,
  networkMode: "none",
  capDrop: ["ALL"],
  securityOpt: ["no-new-privileges"],
  labels,
});

describe("reapOrphans on the real engine", () => {
  it("removes a running container whose runner pid is dead and keeps this process's container", async () => {
    const dead = Number(spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }).stdout);
    const run = `reaper-${process.pid}-${Date.now()}`;
    const orphan = await runtime.create(sleeper({ ...runnerLabels(run, "1"), [LABELS.pid]: String(dead) }));
    const ours = await runtime.create(sleeper(runnerLabels(run, "2")));
    made.push(orphan, ours);
    await runtime.start(orphan);
    await runtime.start(ours);

    const result = await reapOrphans(runtime);
    // A runner in a parallel test worker reaps orphans too and may have removed this one first;
    // what matters is that it is gone and ours is not.
    expect(result.removed).not.toContain(ours);
    expect(result.kept).toContain(ours);
    expect(await runtime.inspect(orphan)).toBeUndefined();
    expect((await runtime.inspect(ours))?.running).toBe(true);
    expect((await runtime.listByLabel({ [LABELS.run]: run })).map((c) => c.id)).toEqual([ours]);
  });

  it("keeps a dead runner's volume that a container still mounts, and removes it once that container is gone", async () => {
    // The race a parallel run met: a runner alive when the containers were listed and killed before
    // the volumes were; its volume's removal is refused while its container mounts it.
    const dead = Number(spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }).stdout);
    const run = `reaper-volume-${process.pid}-${Date.now()}`;
    const volume = `study-runner-${run}-staged`;
    await runtime.createVolume(volume, { ...runnerLabels(run, "1"), [LABELS.pid]: String(dead) });
    const holder = await runtime.create({ ...sleeper(runnerLabels(run, "1")), mounts: [{ source: volume, volume: true, target: "/held", readOnly: true }] });
    made.push(holder);

    const first = await reapOrphans(runtime);
    expect(first.kept).toContain(volume);
    expect((await runtime.listVolumesByLabel({ [LABELS.run]: run })).map((v) => v.name)).toEqual([volume]);

    await runtime.remove(holder);
    await reapOrphans(runtime);
    expect(await runtime.listVolumesByLabel({ [LABELS.run]: run })).toEqual([]);
  });
});
