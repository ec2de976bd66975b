import { describe, expect, it } from "vitest";
import { medianSplit, splitAttempt } from "../../bench/study.ts";

describe("the attempt split of the benchmarks", () => {
  it("names each step by the marks around it, sums a repeated step and leaves out marks outside the attempt", () => {
    const at: Array<[string, number]> = [
      ["before", 5],
      ["cli:begin", 12],
      ["ledger:write", 20],
      ["ledger:written", 23],
      ["ledger:write", 40],
      ["ledger:written", 44],
      ["after", 50],
    ];
    const marks = at.map(([mark, time]) => ({ mark, at: time }));
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
