/**
 * Export: `exportAtPin` of a generated repository (5,000 files, about 50 MB, filtered paths
 * mixed in) next to
 * - the floor, `git archive <pin> | tar -x` into a folder: the cheapest way to turn a commit
 *   into files (it writes every file, the filtered ones too, and sets no read-only modes);
 * - the naive reference, one `git show <pin>:<path>` process per exported file, timed on the
 *   first NAIVE_SAMPLE files and scaled to all of them (each file costs the same process).
 * The repository is committed once; every timed run writes a fresh folder, removed untimed.
 * The pair is timed where the runner puts its exports (os.tmpdir(), i.e. TMPDIR), the figure
 * the target is judged on, and again on /dev/shm when TMPDIR is not a tmpfs: on a disk the
 * file creation dominates and varies with the other writers of the disk.
 */
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, statfs, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { exportAtPin, planExport, removeExport } from "../src/export/export.ts";
import { makeGitRepo } from "../tests/support/git-fixture.ts";
import { repoEntries } from "./gen.ts";
import { measure, note, ratio, round, runMain, stats } from "./lib.ts";

const execFileP = promisify(execFile);
const FILES = 5000;
const BYTES = 50 * 1000 * 1000;
/** The export at most as slow as `git archive | tar -x` beside it (docs/performance.md, "The export reading each blob once"). */
const TARGET_RATIO = 1.0;
const RUNS = 5;
const NAIVE_SAMPLE = 500;
const SHM = "/dev/shm";
const TMPFS_MAGIC = 0x01021994;
const GIT_ENV = { ...process.env, GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null", LC_ALL: "C" };

async function isTmpfs(path: string): Promise<boolean> {
  return statfs(path).then(
    (s) => s.type === TMPFS_MAGIC,
    () => false,
  );
}

interface Pair {
  exportMs: ReturnType<typeof stats>;
  floorGitArchiveTarMs: ReturnType<typeof stats>;
  ratioToFloor: number;
  exportMBps: number;
}

async function main(): Promise<Record<string, unknown>> {
  const work = await mkdtemp(join(tmpdir(), "study-runner-bench-export-"));
  try {
    note(`export: committing ${FILES} files (~${BYTES / 1e6} MB)`);
    const { entries, shape, answerKey } = repoEntries(FILES, BYTES);
    const repo = await makeGitRepo(entries, work);
    const pin = repo.commit;
    const source = { repoDir: repo.dir, pin, answerKeys: [answerKey] };
    const plan = await planExport(source);
    const exportedBytes = plan.files.reduce((s, f) => s + f.size, 0);
    const excluded = Object.values(plan.excluded).reduce((s, n) => s + n, 0);
    const out = join(work, "out");
    await mkdir(out);

    // Alternating runs, so a change in the machine's load hits both alike.
    const compare = async (parent: string): Promise<Pair> => {
      let dir = "";
      let floorDir = "";
      const ours: number[] = [];
      const floor: number[] = [];
      for (let i = 0; i < RUNS; i++) {
        const warmup = i === 0 ? 1 : 0;
        ours.push(
          ...(await measure(async () => (dir = (await exportAtPin({ ...source, parentDir: parent, labels: { run: "bench", attempt: String(i) } })).dir), {
            warmup,
            runs: 1,
            after: () => removeExport(dir),
          })),
        );
        floor.push(
          ...(await measure(
            async () => {
              floorDir = await mkdtemp(join(parent, "study-runner-bench-floor-"));
              await execFileP("sh", ["-c", 'git -C "$1" archive --format=tar "$2" | tar -x -C "$3"', "sh", repo.dir, pin, floorDir], { env: GIT_ENV });
            },
            { warmup, runs: 1, after: () => rm(floorDir, { recursive: true, force: true }) },
          )),
        );
      }
      const o = stats(ours);
      const f = stats(floor);
      return { exportMs: o, floorGitArchiveTarMs: f, ratioToFloor: ratio(o.median, f.median), exportMBps: round(exportedBytes / 1e6 / (o.median / 1000), 1) };
    };
    note(`export: exportAtPin and the floor (git archive | tar -x) under ${tmpdir()}, ${RUNS} runs each after a warm-up`);
    const primary = await compare(out);
    // The same pair on a tmpfs, when TMPDIR is not one: what is left without the disk.
    let onTmpfs: Pair | null = null;
    if (!(await isTmpfs(out)) && (await isTmpfs(SHM))) {
      const shmOut = await mkdtemp(join(SHM, "study-runner-bench-export-"));
      try {
        note(`export: the same on the tmpfs ${SHM}`);
        onTmpfs = await compare(shmOut);
      } finally {
        await rm(shmOut, { recursive: true, force: true });
      }
    }

    // A sample, once: all 4,600 processes take over a minute on a loaded 2-core machine, and
    // the figure only shows the order of magnitude the one cat-file --batch process avoids.
    const sample = plan.files.slice(0, NAIVE_SAMPLE);
    note(`export: naive reference, one git show per file (${sample.length} of ${plan.files.length} files, scaled)`);
    let naiveDir = "";
    const naiveSample = await measure(
      async () => {
        naiveDir = await mkdtemp(join(out, "naive-"));
        for (const f of sample) {
          const { stdout } = await execFileP("git", ["show", `${pin}:${f.path}`], { cwd: repo.dir, env: GIT_ENV, encoding: "buffer", maxBuffer: 1 << 20 });
          const target = join(naiveDir, f.path);
          await mkdir(dirname(target), { recursive: true });
          await writeFile(target, stdout, { mode: 0o444 });
        }
      },
      { warmup: 0, runs: 1, after: () => rm(naiveDir, { recursive: true, force: true }) },
    );
    const n = stats(naiveSample.map((ms) => (ms * plan.files.length) / sample.length));
    return {
      repository: { files: shape.files, bytes: shape.bytes, exportedFiles: plan.files.length, exportedBytes, filteredOut: excluded, filteredByReason: plan.excluded },
      exportParent: { path: tmpdir(), tmpfs: await isTmpfs(out) },
      ...primary,
      naiveGitShowPerFileMs: { ...n, sampleFiles: sample.length, scaledTo: plan.files.length },
      naiveRatioToFloor: ratio(n.median, primary.floorGitArchiveTarMs.median),
      onTmpfs,
      targetRatio: TARGET_RATIO,
      targetMet: primary.ratioToFloor <= TARGET_RATIO,
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

runMain("export", main);
