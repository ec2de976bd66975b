import { spawnSync } from "node:child_process";
import { hostname } from "node:os";
import { describe, expect, it } from "vitest";
import { FakeRuntime } from "../support/fake-runtime.ts";
import { isProcessAlive, LABELS, reapOrphans, runnerLabels } from "../../src/sandbox/reaper.ts";
import type { ContainerSpec } from "../../src/sandbox/port.ts";

function deadPid(): number {
  // A child that has exited and been waited for: its pid is no longer alive.
  const r = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" });
  return Number(r.stdout);
}

const base = (labels: Record<string, string>): ContainerSpec => ({
  image: "img:1",
  cmd: [],
  env: {},
  mounts: [],
  tmpfs: {},
  readOnlyRootfs: true,
  networkMode: "none",
  capDrop: ["ALL"],
  securityOpt: [],
  labels,
});

describe("runner labels and the orphan reaper", () => {
  it("labels a container with run, attempt, this pid and this host", () => {
    expect(runnerLabels("run-1", "3")).toEqual({
      "study-runner.run": "run-1",
      "study-runner.attempt": "3",
      "study-runner.pid": String(process.pid),
      "study-runner.host": hostname(),
    });
  });

  it("tells a live pid from a dead one", () => {
    expect(isProcessAlive(process.pid)).toBe(true);
    expect(isProcessAlive(deadPid())).toBe(false);
  });

  it("removes only this host's containers whose runner pid is dead, running or not", async () => {
    const runtime = new FakeRuntime({ program: ({ signal }) => new Promise((r) => signal.addEventListener("abort", () => r(0))) });
    runtime.addImage("img:1");
    const dead = deadPid();
    const orphanRunning = await runtime.create(base({ ...runnerLabels("r", "1"), [LABELS.pid]: String(dead) }));
    await runtime.start(orphanRunning);
    const orphanStopped = await runtime.create(base({ ...runnerLabels("r", "2"), [LABELS.pid]: String(dead) }));
    const ours = await runtime.create(base(runnerLabels("r", "3")));
    const otherHost = await runtime.create(base({ ...runnerLabels("r", "4"), [LABELS.pid]: String(dead), [LABELS.host]: `${hostname()}-elsewhere` }));
    const garbledPid = await runtime.create(base({ ...runnerLabels("r", "5"), [LABELS.pid]: "12abc" }));
    const unlabelled = await runtime.create(base({}));

    const result = await reapOrphans(runtime);
    expect(result.removed.sort()).toEqual([orphanRunning, orphanStopped].sort());
    expect(result.kept.sort()).toEqual([ours, garbledPid].sort());
    for (const id of [orphanRunning, orphanStopped]) expect(await runtime.inspect(id)).toBeUndefined();
    for (const id of [ours, otherHost, garbledPid, unlabelled]) expect(await runtime.inspect(id)).toBeDefined();
  });

  it("asks the given liveness check, so a pid alive elsewhere keeps its container", async () => {
    const runtime = new FakeRuntime({ program: () => 0 });
    runtime.addImage("img:1");
    const id = await runtime.create(base({ ...runnerLabels("r", "1"), [LABELS.pid]: "424242" }));
    expect((await reapOrphans(runtime, { isAlive: (pid) => pid === 424242 })).removed).toEqual([]);
    expect((await reapOrphans(runtime, { isAlive: () => false })).removed).toEqual([id]);
  });
});
