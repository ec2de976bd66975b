import { describe, expect, it } from "vitest";
import { median, measure, ratio, stats } from "../../bench/lib.ts";
import { attemptDurations, STARTED_LINE } from "../../bench/study.ts";
import { repoEntries, transcriptLines, TRANSCRIPT_MODEL, TRANSCRIPT_INIT, TRANSCRIPT_TOOLS, TRANSCRIPT_VERSION, type TranscriptShape } from "../../bench/gen.ts";
import { TranscriptReader } from "../../src/transcript/reader.ts";
import { exclusionReason } from "../support/path-reason.ts";
import type { TreeEntry } from "../../src/corpus/git.ts";

describe("bench helpers", () => {
  it("median takes the middle of unsorted samples, the mean of the two middles for an even count", () => {
    expect(median([5, 1, 3])).toBe(3);
    expect(median([10, 2, 4, 8])).toBe(6);
    expect(median([7])).toBe(7);
    // Not the mean: one outlier (a run hit by load) does not move it.
    expect(median([1, 2, 1000])).toBe(2);
  });

  it("median refuses no samples and non-finite ones, so a failed run cannot pass as a figure", () => {
    expect(() => median([])).toThrow(/no samples/);
    expect(() => median([1, Number.NaN])).toThrow(/non-finite/);
  });

  it("stats and ratio round; a zero floor is refused", () => {
    expect(stats([3.12345, 1, 2])).toEqual({ median: 2, min: 1, max: 3.1, runs: 3 });
    expect(ratio(3, 2)).toBe(1.5);
    expect(() => ratio(1, 0)).toThrow();
  });

  it("measure discards the warm-up runs and runs `after` untimed after every run", async () => {
    // A clock that only the runs and `after` move: run i takes 100 + i ms, `after` 1000 ms.
    let now = 0;
    const calls: number[] = [];
    let afters = 0;
    const samples = await measure(
      (run) => {
        calls.push(run);
        now += 100 + run;
      },
      {
        warmup: 2,
        runs: 3,
        clock: () => now,
        after: () => {
          afters++;
          now += 1000;
        },
      },
    );
    expect(calls).toEqual([0, 1, 2, 3, 4]);
    expect(afters).toBe(5);
    expect(samples).toEqual([102, 103, 104]);
  });

  it("attempt durations run from one start to the next, the last to the end of the run", () => {
    expect(attemptDurations([100, 250, 600], 1000)).toEqual([150, 350, 400]);
    expect(STARTED_LINE.test("study-runner: [3/36] queuekit-config doc-bridge rep 2: started")).toBe(true);
    expect(STARTED_LINE.test("study-runner: [3/36] queuekit-config doc-bridge rep 2: completed, 1 in / 2 out, 0.4s (run 2.0s)")).toBe(false);
    expect(STARTED_LINE.test("study-runner adjudicate: [1/2] item-fa868c936a5c: started")).toBe(false);
  });
});

describe("bench inputs", () => {
  it("the generated transcript reads clean, fits its byte target and ends in the summed usage", () => {
    const shape: TranscriptShape = { lines: 0, bytes: 0, toolCalls: 0 };
    const target = 256 * 1024;
    const reader = new TranscriptReader({ arm: "repository", model: TRANSCRIPT_MODEL, expectedTools: [...TRANSCRIPT_TOOLS], cliVersion: TRANSCRIPT_VERSION, init: TRANSCRIPT_INIT });
    let bytes = 0;
    for (const line of transcriptLines(target, 1, shape)) {
      bytes += Buffer.byteLength(line) + 1;
      reader.pushLine(line);
    }
    const facts = reader.finish();
    expect(facts.setupProblems).toEqual([]);
    expect(bytes).toBe(shape.bytes);
    expect(bytes).toBeLessThanOrEqual(target);
    // Close to the target, so the MB/s figure is about the size it claims.
    expect(bytes).toBeGreaterThan(target - 16 * 1024);
    expect(facts.toolCalls).toBe(shape.toolCalls);
    expect(facts.toolCalls).toBeGreaterThan(10);
    expect(facts.usageComplete).toBe(true);
    const messages = facts.perMessageUsage;
    expect(facts.inputTokens).toBe(messages.reduce((s, m) => s + m.inputTokens, 0));
    expect(facts.cacheReadInputTokens).toBe(messages.reduce((s, m) => s + m.cacheReadInputTokens, 0));
  });

  it("the same seed gives the same transcript (every run measures the same bytes)", () => {
    expect([...transcriptLines(64 * 1024, 3)]).toEqual([...transcriptLines(64 * 1024, 3)]);
  });

  it("the generated repository has the requested size and mixes in what the filter keeps out", () => {
    const { entries, shape, answerKey } = repoEntries(600, 6_000_000);
    expect(entries).toHaveLength(600);
    expect(shape.bytes).toBeGreaterThan(5_500_000);
    expect(shape.bytes).toBeLessThan(6_500_000);
    const reasons: Record<string, number> = {};
    for (const e of entries) {
      if (!("content" in e) || !("path" in e)) throw new Error("only regular files are generated");
      const size = Buffer.byteLength(e.content);
      const entry: TreeEntry = { mode: "100644", type: "blob", oid: "0".repeat(40), size, path: e.path, rawPath: Buffer.from(e.path) };
      const reason = exclusionReason(entry, { answerKeys: [answerKey] });
      if (reason) reasons[reason] = (reasons[reason] ?? 0) + 1;
    }
    expect(reasons).toEqual(shape.filtered);
    expect(Object.keys(reasons).sort()).toEqual(["answer-key", "build-or-dependency-dir", "hidden", "lockfile", "too-large"]);
  });
});
