import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { PassThrough } from "node:stream";
import { Progress } from "../../src/study/progress.ts";
import type { PlannedAttempt } from "../../src/plan/plan.ts";
import { completedObservation } from "../support/ledger-sample.ts";

const CLEAR = "\r\x1b[2K";

function stream(isTTY: boolean) {
  const out = new PassThrough() as PassThrough & { isTTY?: boolean };
  if (isTTY) out.isTTY = true;
  let text = "";
  out.on("data", (d: Buffer) => (text += d.toString("utf8")));
  return { out, text: () => text };
}

const attempt: PlannedAttempt = {
  index: 0,
  taskId: "ledgerlite-rounding",
  taskIndex: 0,
  repository: "ledgerlite",
  pin: "e2ff563dc35b3da1d8b11ab55f4447489db3f3e5",
  scenario: "repository-only",
  arm: "repository",
  repetition: 1,
};
const observation = completedObservation(0, 0.002, { inputTokens: 1200, outputTokens: 80, answer: "SECRET-ANSWER-TEXT" });

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

describe("Progress on a terminal", () => {
  it("rewrites one live line every second while an attempt runs and erases it before the end line", async () => {
    const { out, text } = stream(true);
    const progress = new Progress(out, 2, 1, false);
    progress.start(attempt);
    await vi.advanceTimersByTimeAsync(3_200);
    const during = text();
    expect(during.startsWith("study-runner: [1/2] ledgerlite-rounding repository-only rep 1: started\n")).toBe(true);
    const frames = during.split(CLEAR).slice(1);
    expect(frames).toEqual([1, 2, 3].map((s) => `study-runner: [1/2] ledgerlite-rounding repository-only rep 1: running ${s}s, spent $0.000000 of $1.000000, run ${s}s`));

    progress.end(attempt, observation, 0.002);
    const after = text().slice(during.length);
    expect(after.startsWith(CLEAR + "study-runner: [1/2] ledgerlite-rounding repository-only rep 1: completed, 1200 in / 80 out")).toBe(true);
    expect(after.endsWith("\n")).toBe(true);
    expect(text()).not.toContain("SECRET-ANSWER-TEXT");

    // Stopped: no frame after the end line, and the next attempt's frames show the spend so far.
    await vi.advanceTimersByTimeAsync(5_000);
    expect(text().length).toBe(during.length + after.length);
    progress.start({ ...attempt, index: 1, scenario: "doc-bridge", arm: "mcp" });
    await vi.advanceTimersByTimeAsync(1_000);
    expect(text().split(CLEAR).at(-1)).toMatch(/^study-runner: \[2\/2\] ledgerlite-rounding doc-bridge rep 1: running 1s, spent \$0\.002000 of \$1\.000000, run 9s$/);
    progress.stopLive();
  });

  it("prints an attempt's evidence digest under its end line and a note on a line of its own, never into the live line", async () => {
    const { out, text } = stream(true);
    const progress = new Progress(out, 2, 1, false);
    progress.start(attempt);
    await vi.advanceTimersByTimeAsync(1_200);
    progress.settledNote("evidence digest after observation 0 settled: abc");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(text()).not.toContain("evidence digest");
    progress.end(attempt, observation, 0.002);
    const lines = text().split("\n");
    const endAt = lines.findIndex((l) => l.includes(": completed, "));
    expect(lines[endAt + 1]).toBe("study-runner: evidence digest after observation 0 settled: abc");

    progress.start({ ...attempt, index: 1, scenario: "doc-bridge", arm: "mcp" });
    await vi.advanceTimersByTimeAsync(1_200);
    progress.note("waiting for the CLI login");
    // The live frame was erased before the note: the note's line holds nothing else.
    expect(text().split("\n").at(-2)!.split(CLEAR).at(-1)).toBe("study-runner: waiting for the CLI login");
    expect(text().split("\n").at(-2)!.endsWith("running 1s, spent $0.002000 of $1.000000, run 3s")).toBe(false);
    progress.stopLive();
  });

  it("stopLive erases a drawn line and stops the ticker (an attempt that ended by a runner fault)", async () => {
    const { out, text } = stream(true);
    const progress = new Progress(out, 1, 1, false);
    progress.start(attempt);
    await vi.advanceTimersByTimeAsync(1_000);
    progress.stopLive();
    expect(text().endsWith(CLEAR)).toBe(true);
    const length = text().length;
    await vi.advanceTimersByTimeAsync(3_000);
    expect(text().length).toBe(length);
  });

  it("writes nothing at all with --quiet", async () => {
    const { out, text } = stream(true);
    const progress = new Progress(out, 2, 1, true);
    progress.start(attempt);
    await vi.advanceTimersByTimeAsync(3_000);
    progress.end(attempt, observation, 0.002);
    expect(text()).toBe("");
  });
});

describe("Progress on a pipe or a file", () => {
  it("writes exactly the start and the end line, no carriage return, however long the attempt runs", async () => {
    const { out, text } = stream(false);
    const progress = new Progress(out, 2, 1, false);
    progress.start(attempt);
    await vi.advanceTimersByTimeAsync(5_000);
    progress.end(attempt, observation, 0.002);
    const lines = text().split("\n");
    expect(lines).toHaveLength(3);
    expect(lines[0]).toBe("study-runner: [1/2] ledgerlite-rounding repository-only rep 1: started");
    expect(lines[1]).toMatch(/^study-runner: \[1\/2\] ledgerlite-rounding repository-only rep 1: completed, 1200 in \/ 80 out, .* spent \$0\.002000 of \$1\.000000, 5\.0s \(run 5\.0s\)$/);
    expect(text()).not.toContain("\r");
  });
});

describe("Progress with attempts in flight (--concurrency)", () => {
  const second: PlannedAttempt = { ...attempt, index: 1, scenario: "doc-bridge", arm: "mcp" };

  it("the live line shows how many attempts run and which; each end line says how many still run", async () => {
    const { out, text } = stream(true);
    const progress = new Progress(out, 4, 1, false);
    progress.start(attempt);
    await vi.advanceTimersByTimeAsync(1_000);
    progress.start(second);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(text().split(CLEAR).at(-1)).toBe("study-runner: 2 attempts running [1/4] [2/4], spent $0.000000 of $1.000000, run 3s");
    progress.stopLive();
    progress.end(attempt, observation, 0.002);
    expect(text()).toMatch(/\[1\/4\] ledgerlite-rounding repository-only rep 1: completed, .*, 3\.0s \(run 3\.0s\), 1 still running\n$/);
    // The other attempt still runs: its own line comes back, with its own time.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(text().split(CLEAR).at(-1)).toBe("study-runner: [2/4] ledgerlite-rounding doc-bridge rep 1: running 3s, spent $0.002000 of $1.000000, run 4s");
    progress.stopLive();
    progress.end(second, observation, 0.004);
    expect(text()).toMatch(/\[2\/4\] ledgerlite-rounding doc-bridge rep 1: completed, .*, 3\.0s \(run 4\.0s\)\n$/);
    const length = text().length;
    await vi.advanceTimersByTimeAsync(3_000);
    expect(text().length).toBe(length);
  });

  it("prints nothing at all with --quiet, however many run", async () => {
    const { out, text } = stream(true);
    const progress = new Progress(out, 4, 1, true);
    progress.start(attempt);
    progress.start(second);
    await vi.advanceTimersByTimeAsync(3_000);
    progress.end(attempt, observation, 0.002);
    progress.end(second, observation, 0.004);
    expect(text()).toBe("");
  });
});
