/**
 * The full demo run: `study-runner demo` (36 attempts with the fake claude, then the demo's
 * adjudication and report) as a user runs it, in a child process. Its progress lines are
 * timestamped as they arrive: per attempt from its "started" line to the next one's (the last:
 * to its end line). One run: it is the figure of a whole run, and its 36 attempts give the
 * per-attempt median.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { PROJECT_ROOT } from "../src/util/paths.ts";
import { median, note, round, runMain, stats } from "./lib.ts";
import { STARTED_LINE } from "./study.ts";

const ATTEMPT_LINE = /^study-runner: \[(\d+)\/(\d+)\] \S+ (\S+) rep \d+: (\S+?)[,:]?(?: |$)/;

async function main(): Promise<Record<string, unknown>> {
  const work = await mkdtemp(join(tmpdir(), "study-runner-bench-demo-"));
  try {
    note("demo: node bin/study-runner.mjs demo (36 attempts, fake claude)");
    const t0 = performance.now();
    const child = spawn(process.execPath, [join(PROJECT_ROOT, "bin", "study-runner.mjs"), "demo", "--workdir", join(work, "demo")], {
      cwd: PROJECT_ROOT,
      stdio: ["ignore", "ignore", "pipe"],
    });
    const lines: { at: number; text: string }[] = [];
    let pending = "";
    child.stderr.on("data", (d: Buffer) => {
      const at = performance.now();
      pending += d.toString("utf8");
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        lines.push({ at, text: pending.slice(0, nl) });
        pending = pending.slice(nl + 1);
      }
    });
    const [code] = (await once(child, "exit")) as [number | null];
    const wallMs = performance.now() - t0;
    if (code !== 0)
      throw new Error(
        `the demo exited ${code}: ${lines
          .slice(-5)
          .map((l) => l.text)
          .join(" | ")}`,
      );

    const attemptLines = lines.filter((l) => ATTEMPT_LINE.test(l.text));
    const starts = attemptLines.filter((l) => STARTED_LINE.test(l.text));
    const ends = attemptLines.filter((l) => !STARTED_LINE.test(l.text));
    const total = Number(ATTEMPT_LINE.exec(starts[0]?.text ?? "")?.[2] ?? NaN);
    if (starts.length !== total || ends.length !== total) throw new Error(`expected ${total} attempts, saw ${starts.length} started and ${ends.length} ended`);
    const statuses = ends.map((l) => ATTEMPT_LINE.exec(l.text)![4]!);
    if (statuses.some((s) => s !== "completed")) throw new Error(`not every attempt completed: ${statuses.join(",")}`);

    const perAttempt = starts.map((s, i) => ({ arm: ATTEMPT_LINE.exec(s.text)![3]!, ms: (starts[i + 1]?.at ?? ends.at(-1)!.at) - s.at }));
    const byArm: Record<string, { median: number; runs: number }> = {};
    for (const arm of new Set(perAttempt.map((a) => a.arm))) {
      const ms = perAttempt.filter((a) => a.arm === arm).map((a) => a.ms);
      byArm[arm] = { median: round(median(ms), 1), runs: ms.length };
    }
    const studyMs = ends.at(-1)!.at - starts[0]!.at;
    return {
      attempts: total,
      wallMs: round(wallMs, 0),
      // Demo setup (corpus, indexes, image check, preflight) before the first attempt.
      beforeFirstAttemptMs: round(starts[0]!.at - t0, 0),
      studyMs: round(studyMs, 0),
      // The demo's blind adjudication and report after the last attempt.
      afterStudyMs: round(wallMs - (ends.at(-1)!.at - t0), 0),
      perAttemptMs: stats(perAttempt.map((a) => a.ms)),
      perAttemptByArmMs: byArm,
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

runMain("demo", main);
