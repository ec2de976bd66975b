import { describe, expect, it } from "vitest";
import { medianSplit, splitAttempt } from "../../bench/study.ts";

describe("the attempt split of the benchmarks", () => {
  it("names each step by the marks around it, sums a repeated step and leaves out marks outside the attempt", () => {
    const marks = [
      { mark: "before", at: 5 },
      { mark: "cli:begin", at: 12 },
      { mark: "ledger:write", at: 20 },
      { mark: "ledger:written", at: 23 },
      { mark: "ledger:write", at: 40 },
      { mark: "ledger:written", at: 44 },
      { mark: "after", at: 50 },
    ];
    expect(splitAttempt(marks, 10, 50)).toEqual({
      "started → cli:begin": 2,
      "cli:begin → ledger:write": 8,
      "ledger:write → ledger:written": 7,
      "ledger:written → ledger:write": 17,
      "ledger:written → next": 6,
    });
  });

  it("takes each step's median over attempts, a step an attempt lacks counting 0", () => {
    expect(medianSplit([{ a: 1, b: 4 }, { a: 3 }, { a: 2, b: 6 }])).toEqual({ a: 2, b: 4 });
  });
});
