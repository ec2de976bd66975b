/**
 * What the engine's network setup costs a container with network `none`, against the same
 * container with the engine's networking disabled (`ContainerSpec.networkDisabled`, Docker's
 * `NetworkDisabled`; contract R280): the fake image's node printing one line, created, started,
 * waited for and removed one after another, the two kinds alternating over rounds so a change in
 * the machine's load hits both alike.
 *
 * Two figures per kind, medians over the rounds' per-container means: the wall time of one
 * container's create-to-remove, and the CPU the whole machine spent on it (from /proc/stat, so it
 * counts the daemons, the shims, runc, the network hook Docker 20.10 starts for every container
 * and the program itself; run it on a quiet machine). No target: it says what the relay saves.
 */
import { readFile } from "node:fs/promises";
import { buildImage } from "../src/image/build.ts";
import { IMAGE_LAYOUT } from "../src/image/specs.ts";
import { DockerRuntime } from "../src/sandbox/docker.ts";
import type { ContainerSpec } from "../src/sandbox/port.ts";
import { fakeClaudeImageSpec } from "../src/stand-ins/fake-claude/image.ts";
import { median, note, ratio, round, runMain } from "./lib.ts";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const PER_ROUND = 10;
const KINDS = ["none", "disabled"] as const;

/** Busy and total jiffies of all CPUs so far. */
async function cpuJiffies(): Promise<{ busy: number; total: number }> {
  const fields = (await readFile("/proc/stat", "utf8")).split("\n")[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = fields.reduce((a, b) => a + b, 0);
  return { busy: total - fields[3]! - fields[4]!, total };
}

async function main(): Promise<Record<string, unknown>> {
  const runtime = new DockerRuntime();
  const image = (await buildImage(runtime, await fakeClaudeImageSpec())).id;
  const base: ContainerSpec = {
    image,
    entrypoint: [IMAGE_LAYOUT.node, "-e", "console.log('ok')"],
    cmd: [],
    env: {},
    user: "1000:1000",
    mounts: [],
    tmpfs: {},
    readOnlyRootfs: true,
    networkMode: "none",
    capDrop: ["ALL"],
    securityOpt: ["no-new-privileges"],
    labels: { "study-runner.bench": "network-setup" },
  };
  const one = async (kind: (typeof KINDS)[number]): Promise<void> => {
    const id = await runtime.create(kind === "disabled" ? { ...base, networkDisabled: true } : base);
    try {
      await runtime.start(id);
      const exit = await runtime.wait(id);
      if (exit.exitCode !== 0) throw new Error(`the ${kind} container exited ${exit.exitCode}`);
    } finally {
      await runtime.remove(id);
    }
  };
  // Warm-up: the image's layers and the daemons' caches.
  for (const kind of KINDS) await one(kind);
  const wall: Record<string, number[]> = { none: [], disabled: [] };
  const cpu: Record<string, number[]> = { none: [], disabled: [] };
  const jiffyMs = 1000 / 100;
  for (let r = 0; r < ROUNDS; r++) {
    note(`network-setup: round ${r + 1}/${ROUNDS}`);
    for (const kind of r % 2 === 0 ? KINDS : [...KINDS].reverse()) {
      const before = await cpuJiffies();
      const t0 = performance.now();
      for (let i = 0; i < PER_ROUND; i++) await one(kind);
      const ms = performance.now() - t0;
      const after = await cpuJiffies();
      wall[kind]!.push(ms / PER_ROUND);
      cpu[kind]!.push(((after.busy - before.busy) * jiffyMs) / PER_ROUND);
    }
  }
  const figures = Object.fromEntries(KINDS.map((k) => [k, { wallMs: round(median(wall[k]!), 1), cpuMs: round(median(cpu[k]!), 1) }]));
  return {
    containers: ROUNDS * PER_ROUND * KINDS.length,
    ...figures,
    wallRatio: ratio(median(wall.disabled!), median(wall.none!)),
    cpuSavedMs: round(median(cpu.none!) - median(cpu.disabled!), 1),
  };
}

runMain("network-setup", main);
