/**
 * A run's exports: the exports of the demo study's attempts (its corpus, manifest and plan, in
 * plan order), made the way a run made them before (`exportAtPin` per attempt: the pin checked,
 * the tree listed and filtered again each time) and the way it makes them now (one `RunExports`
 * per run: each repository planned once, every export written from the plan), each pass a whole
 * run, alternately. Measured per pass: the CPU time of this process and of the git processes it
 * waited for (utime, stime, cutime and cstime of /proc/self/stat), and the git processes started
 * (the runner's own count, src/process/child.ts). Prints both and their ratios.
 */
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeDemoCorpus } from "../src/demo/corpus.ts";
import { exportAtPin, removeExport, RunExports, type ExportOptions, type ExportResult } from "../src/export/export.ts";
import { exportSourceFor } from "../src/export/options.ts";
import { loadManifest } from "../src/manifest/load.ts";
import { planStudy } from "../src/plan/plan.ts";
import { childProcessCounts } from "../src/process/child.ts";
import { DEMO_MANIFEST } from "../src/util/paths.ts";
import { note, ratio, runMain, stats } from "./lib.ts";

const RUNS = 5;
/** Clock ticks per second of /proc/self/stat's times (USER_HZ, 100 on Linux). */
const USER_HZ = 100;

/** CPU milliseconds of this process and of its children it has waited for. */
function cpuMs(): number {
  const stat = readFileSync("/proc/self/stat", "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // After the command: state is field 3; utime, stime, cutime, cstime are fields 14 to 17.
  const ticks = [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i]), 0);
  return (ticks * 1000) / USER_HZ;
}

const gitStarted = () => childProcessCounts().git ?? 0;

async function main(): Promise<Record<string, unknown>> {
  const work = await mkdtemp(join(tmpdir(), "study-runner-bench-run-exports-"));
  try {
    const corpus = await makeDemoCorpus(join(work, "corpus"));
    const loaded = await loadManifest(DEMO_MANIFEST);
    const plan = planStudy(loaded.manifest, "full");
    const sources = new Map<string, Omit<ExportOptions, "labels">>();
    for (const name of Object.keys(corpus)) sources.set(name, { ...(await exportSourceFor(loaded, name, corpus[name]!.dir)), parentDir: work });
    note(`run-exports: ${plan.length} exports of the demo corpus per pass, per attempt and per run alternately, ${RUNS} passes each`);

    const pass = async (exportOne: (o: ExportOptions) => Promise<ExportResult>) => {
      const cpu = cpuMs();
      const git = gitStarted();
      const hashes: string[] = [];
      for (const a of plan) {
        const made = await exportOne({ ...sources.get(a.repository)!, labels: { run: "bench", attempt: String(a.index) } });
        hashes.push(made.exportHash);
        await removeExport(made.dir);
      }
      return { cpuMs: cpuMs() - cpu, git: gitStarted() - git, hashes };
    };
    const before = { cpuMs: [] as number[], git: [] as number[] };
    const after = { cpuMs: [] as number[], git: [] as number[] };
    for (let i = 0; i < RUNS; i++) {
      const perAttempt = await pass(exportAtPin);
      const run = new RunExports();
      const perRun = await pass((o) => run.exportAtPin(o));
      if (perRun.hashes.join() !== perAttempt.hashes.join()) throw new Error("the run's exports differ from the per-attempt exports");
      before.cpuMs.push(perAttempt.cpuMs);
      before.git.push(perAttempt.git);
      after.cpuMs.push(perRun.cpuMs);
      after.git.push(perRun.git);
    }
    const b = stats(before.cpuMs);
    const a = stats(after.cpuMs);
    return {
      exportsPerPass: plan.length,
      repositories: sources.size,
      perAttempt: { cpuMs: b, gitProcesses: before.git[0] },
      perRun: { cpuMs: a, gitProcesses: after.git[0] },
      cpuRatio: ratio(a.median, b.median),
      gitProcessRatio: ratio(after.git[0]!, before.git[0]!),
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

runMain("run-exports", main);
