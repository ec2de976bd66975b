import { describe, expect, it } from "vitest";
import { runLoop, type Book, type Checkpoint, type Entry, type LoopOptions, type RunKind, type UnitContext, type UnitOutcome } from "../../src/loop/loop.ts";
import { ExitCode, RefusalError } from "../../src/util/errors.ts";

/**
 * The bookkeeping loop alone, with a scripted run kind: every stop path, every charge rule and
 * every write point, without containers or files. What each write would put on disk is the
 * snapshot of the book taken by `persist`.
 */

interface TestEntry extends Entry {
  unit: number;
}
type Script = (ctx: UnitContext<TestEntry>) => Promise<UnitOutcome> | UnitOutcome;

const ok = (cost: number, reported: number | null = cost): UnitOutcome => ({ status: "completed", reason: "answered", reportedCostUsd: reported, computedCostUsd: cost });
const fail = (status: UnitOutcome["status"], costs: number | null = null): UnitOutcome => ({ status, reason: `it ${status}`, reportedCostUsd: costs, computedCostUsd: costs });

interface Harness {
  book: Book & { entries: TestEntry[] };
  writes: Array<{ status: string; reservedUsd: number; spentUsd: number; cumulativeCapExceeded: boolean; entries: TestEntry[] }>;
  events: string[];
  notReached: number[];
  settledCalls: Array<{ unit: number; stopReason: string | null }>;
  run(extra?: Partial<LoopOptions<number, TestEntry, string>>): Promise<{ exitCode: number; stopReason: string | null }>;
}

function harness(
  scripts: Script[],
  o: { limitUsd?: number | null; capUsd?: number; acquire?: (unit: number) => Promise<{ release(): Promise<void> }>; recordWithoutRun?: (unit: number) => boolean } = {},
): Harness {
  const book: Harness["book"] = { status: "running", budget: { reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false }, entries: [] };
  const h: Harness = {
    book,
    writes: [],
    events: [],
    notReached: [],
    settledCalls: [],
    async run(extra = {}) {
      const kind: RunKind<number, TestEntry> = {
        noun: "attempt",
        number: (u) => u + 1,
        describe: (u) => `attempt ${u + 1} (task t${u})`,
        limitUsd: o.limitUsd === undefined ? 0.1 : o.limitUsd,
        recordWithoutRun: o.recordWithoutRun,
        acquire: o.acquire,
        open(unit, reservationUsd) {
          const entry: TestEntry = { unit, phase: "reserved", reservationUsd, status: null, chargedUsd: null };
          book.entries.push(entry);
          return entry;
        },
        async runOne(unit, ctx) {
          h.events.push(`run ${unit}`);
          return scripts[unit]!(ctx);
        },
        settled: (unit, _entry, stopReason) => void h.settledCalls.push({ unit, stopReason }),
        notReached: (unit) => void h.notReached.push(unit),
      };
      return runLoop({
        kind,
        units: scripts.map((_, i) => i),
        book,
        capUsd: o.capUsd ?? 1,
        doneStatus: "done",
        async persist() {
          h.writes.push({ status: book.status, ...book.budget, entries: book.entries.map((e) => ({ ...e })) });
        },
        checkpoint: (p: Checkpoint) => void h.events.push(p),
        ...extra,
      });
    },
  };
  return h;
}

describe("the bookkeeping loop", () => {
  it("writes the reservation before the unit runs and the charge after it, and ends done with exit 0", async () => {
    const h = harness([
      (ctx) => {
        // What is on disk while the unit runs: the reservation, counted as spent.
        expect(h.writes.at(-1)).toMatchObject({ status: "running", reservedUsd: 0.1, spentUsd: 0.1, entries: [{ phase: "reserved", reservationUsd: 0.1 }] });
        expect(ctx.reservation).toEqual({ reservedUsd: 0.1 });
        return ok(0.002, 0.0015);
      },
      () => ok(0.003),
    ]);
    const end = await h.run();
    expect(end).toEqual({ exitCode: ExitCode.ok, stopReason: null });
    expect(h.book.status).toBe("done");
    // Per unit: one write after reserving, one after settling; then the final write.
    expect(h.writes).toHaveLength(5);
    expect(h.writes.at(-1)).toMatchObject({ status: "done", reservedUsd: 0, spentUsd: 0.005 });
    // A completed unit is charged the larger of its valid costs.
    expect(h.book.entries.map((e) => [e.status, e.chargedUsd])).toEqual([
      ["completed", 0.002],
      ["completed", 0.003],
    ]);
    expect(h.events).toEqual([
      "before-reserve-write",
      "after-reserve-write",
      "run 0",
      "after-attempt-before-write",
      "before-reserve-write",
      "after-reserve-write",
      "run 1",
      "after-attempt-before-write",
    ]);
  });

  it("stops at the first unit that does not complete: charged at least its reservation, later units not reached, exit 1", async () => {
    const h = harness([() => ok(0.01), () => fail("timed-out", 0.02), () => ok(0.01)]);
    const end = await h.run();
    expect(end.exitCode).toBe(ExitCode.blocked);
    expect(h.book.status).toBe("blocked");
    expect(h.book.statusReason).toBe("attempt 2 (task t1) ended timed-out: it timed-out");
    expect(h.book.entries.map((e) => e.chargedUsd)).toEqual([0.01, 0.1]);
    expect(h.notReached).toEqual([2]);
    expect(h.events).not.toContain("run 2");
    expect(h.settledCalls).toEqual([
      { unit: 0, stopReason: null },
      { unit: 1, stopReason: "attempt 2 (task t1) ended timed-out: it timed-out" },
    ]);
    expect(h.writes.at(-1)).toMatchObject({ status: "blocked", reservedUsd: 0, spentUsd: 0.11 });
  });

  it("a failure with a valid cost above the reservation is charged that cost", async () => {
    const h = harness([() => fail("failed", 0.25)]);
    await h.run();
    expect(h.book.entries[0]).toMatchObject({ status: "failed", chargedUsd: 0.25 });
    expect(h.book.budget.spentUsd).toBe(0.25);
  });

  it("a success that cost more than its reservation is budget-exceeded and stops the run", async () => {
    const h = harness([() => ok(0.15), () => ok(0.01)]);
    const end = await h.run();
    expect(h.book.entries[0]).toMatchObject({ status: "budget-exceeded", chargedUsd: 0.15 });
    expect(end.stopReason).toBe("attempt 1 (task t0) ended budget-exceeded: answered");
    expect(h.events).not.toContain("run 1");
  });

  it("a completed unit without a valid cost cannot be verified: it keeps its whole reservation charged", async () => {
    const h = harness([() => ({ status: "completed", reason: "answered", reportedCostUsd: null, computedCostUsd: null })]);
    await h.run();
    expect(h.book.entries[0]).toMatchObject({ status: "completed", chargedUsd: 0.1 });
  });

  it("refuses a unit whose limit does not fit under the cap: nothing reserved for it, exit 1", async () => {
    const h = harness([() => ok(0.02), () => ok(0.02)], { capUsd: 0.11 });
    const end = await h.run();
    expect(end.exitCode).toBe(ExitCode.blocked);
    expect(h.book.statusReason).toMatch(/^attempt 2 refused: the per-attempt limit 0\.1 USD does not fit under the remaining budget 0\.09 USD/);
    expect(h.book.entries).toHaveLength(1);
    expect(h.notReached).toEqual([1]);
    expect(h.writes.at(-1)).toMatchObject({ status: "blocked", reservedUsd: 0, spentUsd: 0.02 });
  });

  it("with up-front limits the cap is passed only by a unit charged above its reservation: budget-exceeded, the cap marked", async () => {
    const h = harness([() => ok(0.05), () => ok(0.09), () => ok(0.01)], { capUsd: 0.12, limitUsd: 0.06 });
    const end = await h.run();
    expect(h.book.entries.map((e) => [e.status, e.chargedUsd])).toEqual([
      ["completed", 0.05],
      ["budget-exceeded", 0.09],
    ]);
    expect(h.book.budget).toEqual({ reservedUsd: 0, spentUsd: 0.14, cumulativeCapExceeded: true });
    expect(end.exitCode).toBe(ExitCode.blocked);
    expect(h.notReached).toEqual([2]);
  });

  it("the unit's lock is taken before the reservation and released after the settling write; a refused lock reserves nothing", async () => {
    const order: string[] = [];
    const h = harness([() => ok(0.01), () => ok(0.01)], {
      async acquire(unit) {
        order.push(`acquire ${unit}`);
        if (unit === 1) throw new RefusalError("the Claude login is in use by another run");
        return { release: async () => void order.push(`release ${unit} after ${h.writes.length} writes`) };
      },
    });
    const end = await h.run();
    expect(order).toEqual(["acquire 0", "release 0 after 2 writes", "acquire 1"]);
    expect(end.exitCode).toBe(ExitCode.blocked);
    expect(h.book.statusReason).toBe("attempt 2 not started, nothing reserved: the Claude login is in use by another run");
    expect(h.book.entries).toHaveLength(1);
    expect(h.writes.at(-1)).toMatchObject({ status: "blocked", reservedUsd: 0, spentUsd: 0.01 });
  });

  it("a refusal after the reservation is a unit that did not complete: settled failed, its reservation charged, exit 1, the lock released", async () => {
    let released = false;
    const h = harness(
      [
        () => {
          throw new RefusalError("the Claude login expired");
        },
      ],
      { acquire: async () => ({ release: async () => void (released = true) }) },
    );
    const end = await h.run();
    expect(end.exitCode).toBe(ExitCode.blocked);
    expect(h.book.entries[0]).toMatchObject({ phase: "settled", status: "failed", chargedUsd: 0.1 });
    expect(h.book.statusReason).toBe("attempt 1 (task t0) ended failed: refused after its reservation: the Claude login expired");
    expect(released).toBe(true);
    expect(h.writes.at(-1)).toMatchObject({ status: "blocked", spentUsd: 0.1, reservedUsd: 0 });
  });

  it("a fault of the runner leaves the unit unsettled with its reservation counted, says so on disk, releases the lock and propagates", async () => {
    let released = false;
    const h = harness(
      [
        () => {
          throw new Error("Docker engine unreachable");
        },
        () => ok(0.01),
      ],
      { acquire: async () => ({ release: async () => void (released = true) }) },
    );
    await expect(h.run()).rejects.toThrow("Docker engine unreachable");
    expect(released).toBe(true);
    expect(h.writes.at(-1)).toMatchObject({ status: "blocked", reservedUsd: 0.1, spentUsd: 0.1, entries: [{ phase: "reserved", status: null, chargedUsd: null }] });
    expect(h.book.statusReason).toBe("attempt 1 stopped by a fault of the runner: Docker engine unreachable; the attempt was not settled and its reservation stays charged");
    expect(h.events).not.toContain("run 1");
  });

  it("a signal stops new starts: the run is blocked with the signal's exit code, and says so on disk", async () => {
    for (const [sig, code] of [
      ["SIGINT", ExitCode.sigint],
      ["SIGTERM", ExitCode.sigterm],
    ] as const) {
      const controller = new AbortController();
      const h = harness([
        () => {
          controller.abort(sig);
          return fail("failed", 0.01);
        },
        () => ok(0.01),
      ]);
      const end = await h.run({ signal: controller.signal });
      expect(end.exitCode).toBe(code);
      expect(h.events).not.toContain("run 1");
      const before = harness([() => ok(0.01)]);
      const aborted = new AbortController();
      aborted.abort(sig);
      const endBefore = await before.run({ signal: aborted.signal });
      expect(endBefore.exitCode).toBe(code);
      expect(before.book.statusReason).toBe(`interrupted by ${sig} before attempt 1`);
      expect(before.book.entries).toHaveLength(0);
      expect(before.writes).toEqual([{ status: "blocked", reservedUsd: 0, spentUsd: 0, cumulativeCapExceeded: false, entries: [] }]);
    }
  });

  it("a unit recorded without a run is written and reserves nothing", async () => {
    const h = harness([() => ok(0.01), () => ok(0.01)], { recordWithoutRun: (u) => u === 0 });
    await h.run();
    expect(h.events.filter((e) => e.startsWith("run"))).toEqual(["run 1"]);
    expect(h.writes[0]).toMatchObject({ reservedUsd: 0, spentUsd: 0, entries: [] });
    expect(h.book.budget.spentUsd).toBe(0.01);
  });

  // contract: R257
  it("tells each unit whether it is the run's last, one at a time and with units in flight", async () => {
    for (const concurrency of [1, 2]) {
      const seen: boolean[] = [];
      const h = harness([0, 1, 2].map((u) => (ctx) => ((seen[u] = ctx.last), ok(0.01))));
      await h.run({ concurrency });
      expect(seen).toEqual([false, false, true]);
    }
  });

  describe("per-call reservations (a kind without an up-front limit)", () => {
    it("the unit is charged what its calls were charged; while it runs, its settled calls count as held by it", async () => {
      const h = harness(
        [
          async (ctx) => {
            const first = ctx.meter.reserve(0.04);
            if (!first.ok) throw new Error(first.reason);
            await ctx.persist();
            expect(h.writes.at(-1)).toMatchObject({ reservedUsd: 0.04, spentUsd: 0.04 });
            ctx.meter.settle(first.reservation, { status: "completed", reportedCostUsd: null, computedCostUsd: 0.003 });
            const second = ctx.meter.reserve(0.05);
            if (!second.ok) throw new Error(second.reason);
            ctx.entry.reservationUsd = 0.053;
            await ctx.persist();
            // The settled call's charge stays held by the open unit (its reservationUsd) until the unit settles.
            expect(h.writes.at(-1)).toMatchObject({ reservedUsd: 0.053, spentUsd: 0.053 });
            // The second call is left open: the loop settles it at its reservation.
            return fail("failed");
          },
        ],
        { limitUsd: null },
      );
      await h.run();
      expect(h.book.entries[0]).toMatchObject({ status: "failed", chargedUsd: 0.053 });
      expect(h.writes.at(-1)).toMatchObject({ status: "blocked", reservedUsd: 0, spentUsd: 0.053 });
    });

    it("a call that does not fit under the cap is refused and nothing is reserved for it", async () => {
      const h = harness(
        [
          (ctx) => {
            const r = ctx.meter.reserve(2);
            expect(r).toMatchObject({ ok: false, remainingUsd: 1 });
            return fail("budget-exceeded");
          },
        ],
        { limitUsd: null },
      );
      await h.run();
      expect(h.book.entries[0]).toMatchObject({ status: "budget-exceeded", chargedUsd: 0 });
    });

    it("a call that passes the cap marks the run and stops it after the unit", async () => {
      const h = harness(
        [
          (ctx) => {
            const r = ctx.meter.reserve(0.5);
            if (!r.ok) throw new Error(r.reason);
            const s = ctx.meter.settle(r.reservation, { status: "completed", reportedCostUsd: null, computedCostUsd: 1.2 });
            expect(s.cumulativeCapExceeded).toBe(true);
            return ok(0.001);
          },
          () => ok(0.001),
        ],
        { limitUsd: null },
      );
      const end = await h.run();
      expect(h.book.budget.cumulativeCapExceeded).toBe(true);
      expect(end.stopReason).toBe("the cumulative cap of 1 USD was passed after attempt 1");
      expect(h.events).not.toContain("run 1");
    });
  });
});

describe("the remaining cap, from the loop's own budget", () => {
  it("what the book spent before the loop (an earlier pass over the same record) counts against the run's cap", async () => {
    const h = harness([() => ok(0.02), () => ok(0.02)], { capUsd: 1 });
    h.book.budget.spentUsd = 0.85;
    const end = await h.run();
    // 1 - 0.85 - 0.02 leaves 0.13 for the second unit's 0.1, and then 0.11.
    expect(end.exitCode).toBe(ExitCode.ok);
    expect(h.book.budget).toEqual({ reservedUsd: 0, spentUsd: 0.89, cumulativeCapExceeded: false });
    const short = harness([() => ok(0.02), () => ok(0.02)], { capUsd: 1 });
    short.book.budget.spentUsd = 0.89;
    const refused = await short.run();
    expect(refused.exitCode).toBe(ExitCode.blocked);
    expect(short.book.statusReason).toMatch(/^attempt 2 refused: the per-attempt limit 0\.1 USD does not fit under the remaining budget 0\.09 USD/);
  });

  it("a unit that does not fit beside the spend carried in is refused, and a pass of the cap names the run's cap", async () => {
    const h = harness([() => ok(0.0001), () => ok(0.01)], { capUsd: 1, limitUsd: 0.05 });
    h.book.budget.spentUsd = 0.95;
    const end = await h.run();
    // The first unit's 0.05 fits exactly; after its charge of 0.0001 the second's does not.
    expect(end.stopReason).toMatch(/^attempt 2 refused: the per-attempt limit 0\.05 USD does not fit under the remaining budget 0\.0499 USD/);
    const over = harness(
      [
        (ctx) => {
          const r = ctx.meter.reserve(0.05);
          if (!r.ok) throw new Error(r.reason);
          ctx.meter.settle(r.reservation, { status: "completed", reportedCostUsd: null, computedCostUsd: 0.2 });
          return ok(0);
        },
      ],
      { capUsd: 1, limitUsd: null },
    );
    over.book.budget.spentUsd = 0.9;
    const passed = await over.run();
    expect(over.book.budget).toMatchObject({ spentUsd: 1.1, cumulativeCapExceeded: true });
    expect(passed.stopReason).toBe("the cumulative cap of 1 USD was passed after attempt 1");
  });

  it("tells a unit what it may still spend: the cap less every charge and every other unit's hold, its own hold added back", async () => {
    const seen: number[] = [];
    const h = harness([() => ok(0.03), (ctx) => (seen.push(ctx.remainingUsd()), ok(0.01))], { capUsd: 1 });
    h.book.budget.spentUsd = 0.2;
    await h.run();
    // 1 - 0.2 (before the loop) - 0.03 (unit 1): its own reservation of 0.1 is its to spend.
    expect(seen).toEqual([0.77]);
  });

  it("with units in flight, the others' reservations are not the unit's to spend", async () => {
    const seen: number[] = [];
    let release!: () => void;
    const first = new Promise<void>((r) => (release = r));
    const h = harness(
      [
        async () => {
          await first;
          return ok(0.01);
        },
        (ctx) => {
          seen.push(ctx.remainingUsd());
          release();
          return ok(0.01);
        },
      ],
      { capUsd: 1 },
    );
    await h.run({ concurrency: 2 });
    expect(seen).toEqual([0.9]);
  });

  it("a unit that reserves per call gets its open calls back, not its settled ones", async () => {
    const seen: number[] = [];
    const h = harness(
      [
        (ctx) => {
          seen.push(ctx.remainingUsd());
          const first = ctx.meter.reserve(0.2);
          if (!first.ok) throw new Error(first.reason);
          seen.push(ctx.remainingUsd());
          ctx.meter.settle(first.reservation, { status: "completed", reportedCostUsd: null, computedCostUsd: 0.05 });
          seen.push(ctx.remainingUsd());
          return ok(0);
        },
      ],
      { capUsd: 1, limitUsd: null },
    );
    h.book.budget.spentUsd = 0.3;
    await h.run();
    expect(seen).toEqual([0.7, 0.7, 0.65]);
  });
});

describe("the bookkeeping loop with units in flight (--concurrency)", () => {
  /** A unit the test ends by hand; `started` resolves when its runOne was called. */
  interface Gate {
    started: Promise<UnitContext<TestEntry>>;
    finish(outcome: UnitOutcome): void;
    fault(err: Error): void;
  }
  function gates(n: number): { gates: Gate[]; scripts: Script[]; inFlight: () => number; maxInFlight: () => number } {
    let now = 0;
    let max = 0;
    const list: Gate[] = [];
    const scripts: Script[] = [];
    for (let i = 0; i < n; i++) {
      let onStart!: (ctx: UnitContext<TestEntry>) => void;
      let settle!: (r: UnitOutcome | Error) => void;
      const started = new Promise<UnitContext<TestEntry>>((r) => (onStart = r));
      const result = new Promise<UnitOutcome | Error>((r) => (settle = r));
      list.push({ started, finish: (o) => settle(o), fault: (e) => settle(e) });
      scripts.push(async (ctx) => {
        now++;
        max = Math.max(max, now);
        onStart(ctx);
        const r = await result;
        now--;
        if (r instanceof Error) throw r;
        return r;
      });
    }
    return { gates: list, scripts, inFlight: () => now, maxInFlight: () => max };
  }
  const tick = () => new Promise((r) => setTimeout(r, 5));

  /** Every write: settled charges plus open reservations (what the cap must hold) and the open entries. */
  function atCap(w: Harness["writes"][number]) {
    const settled = w.entries.filter((e) => e.phase === "settled").reduce((s, e) => s + (e.chargedUsd ?? 0), 0);
    const open = w.entries.filter((e) => e.phase !== "settled").reduce((s, e) => s + e.reservationUsd, 0);
    return { total: settled + open, open: w.entries.filter((e) => e.phase !== "settled").length };
  }

  it("runs up to N units at once, opens them in plan order, settles each and ends done", async () => {
    const g = gates(6);
    const h = harness(g.scripts);
    const run = h.run({ concurrency: 3 });
    await Promise.all(g.gates.slice(0, 3).map((x) => x.started));
    await tick();
    // Three in flight, the fourth waits for room; the record shows the three open reservations.
    expect(h.events.filter((e) => e.startsWith("run"))).toEqual(["run 0", "run 1", "run 2"]);
    expect(h.writes.at(-1)).toMatchObject({ reservedUsd: 0.3, spentUsd: 0.3 });
    g.gates[1]!.finish(ok(0.01));
    await g.gates[3]!.started;
    for (const i of [0, 2, 3, 4, 5]) {
      g.gates[i]!.finish(ok(0.01));
      await tick();
    }
    const end = await run;
    expect(end).toEqual({ exitCode: ExitCode.ok, stopReason: null });
    expect(g.maxInFlight()).toBe(3);
    expect(h.book.entries.map((e) => e.unit)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(h.book.entries.every((e) => e.status === "completed" && e.chargedUsd === 0.01)).toBe(true);
    expect(h.writes.at(-1)).toMatchObject({ status: "done", reservedUsd: 0, spentUsd: 0.06 });
    expect(Math.max(...h.writes.map((w) => atCap(w).open))).toBe(3);
  });

  // contract: R108
  it("a unit starts only when its whole limit fits under the cap minus charges minus every open reservation; it waits for settlements rather than refusing", async () => {
    const g = gates(4);
    // Cap 0.25 and limit 0.1: two reservations fit, a third only after a settlement freed money.
    const h = harness(g.scripts, { capUsd: 0.25 });
    const run = h.run({ concurrency: 4 });
    await Promise.all(g.gates.slice(0, 2).map((x) => x.started));
    await tick();
    expect(g.inFlight()).toBe(2);
    g.gates[0]!.finish(ok(0.02));
    await g.gates[2]!.started;
    for (const i of [1, 2, 3]) {
      await g.gates[i]!.started;
      g.gates[i]!.finish(ok(0.02));
    }
    const end = await run;
    expect(end.exitCode).toBe(ExitCode.ok);
    expect(g.maxInFlight()).toBe(2);
    // The invariant on every write: settled charges plus open reservations never above the cap.
    for (const w of h.writes) expect(atCap(w).total).toBeLessThanOrEqual(0.25 + 1e-12);
    expect(h.book.budget.spentUsd).toBeCloseTo(0.08, 12);
  });

  // contract: R161
  it("a unit settled above its reservation while others are in flight marks the cap as soon as the spend with the open reservations passes it, before that write", async () => {
    const g = gates(4);
    const h = harness(g.scripts, { capUsd: 0.4 });
    const run = h.run({ concurrency: 4 });
    await Promise.all(g.gates.map((x) => x.started));
    // 0.3 USD settled, under the cap alone, with three reservations of 0.1 still open: 0.6 USD.
    g.gates[0]!.finish(ok(0.3));
    await tick();
    const after = h.writes.at(-1)!;
    expect(after.spentUsd).toBeCloseTo(0.6, 12);
    expect(after.cumulativeCapExceeded).toBe(true);
    for (const i of [1, 2, 3]) g.gates[i]!.finish(ok(0.01));
    const end = await run;
    expect(end.exitCode).toBe(ExitCode.blocked);
    expect(h.book.status).toBe("blocked");
    // On every write the flag says whether the spend passed the cap.
    for (const w of h.writes) if (w.spentUsd > 0.4 + 1e-12) expect(w.cumulativeCapExceeded).toBe(true);
  });

  it("refuses for the cap only when nothing is in flight: the same place as one at a time", async () => {
    const g = gates(3);
    const h = harness(g.scripts, { capUsd: 0.25 });
    const run = h.run({ concurrency: 3 });
    await Promise.all(g.gates.slice(0, 2).map((x) => x.started));
    g.gates[0]!.finish(ok(0.09));
    g.gates[1]!.finish(ok(0.09));
    const end = await run;
    expect(end.exitCode).toBe(ExitCode.blocked);
    expect(h.book.statusReason).toMatch(/^attempt 3 refused: the per-attempt limit 0\.1 USD does not fit under the remaining budget 0\.07 USD/);
    expect(h.notReached).toEqual([2]);
  });

  // contract: R108
  it("after the first unit that does not complete no new unit starts; the units in flight finish, are settled and recorded; blocked with the first failure, exit 1", async () => {
    const g = gates(6);
    const h = harness(g.scripts);
    const run = h.run({ concurrency: 3 });
    await Promise.all(g.gates.slice(0, 3).map((x) => x.started));
    g.gates[1]!.finish(fail("timed-out", 0.02));
    await tick();
    // A second failure after the first does not replace the reason.
    g.gates[2]!.finish(fail("failed"));
    await tick();
    expect(h.events.filter((e) => e.startsWith("run"))).toEqual(["run 0", "run 1", "run 2"]);
    g.gates[0]!.finish(ok(0.03));
    const end = await run;
    expect(end.exitCode).toBe(ExitCode.blocked);
    expect(h.book.statusReason).toBe("attempt 2 (task t1) ended timed-out: it timed-out");
    expect(h.book.entries.map((e) => [e.unit, e.phase, e.status, e.chargedUsd])).toEqual([
      [0, "settled", "completed", 0.03],
      [1, "settled", "timed-out", 0.1],
      [2, "settled", "failed", 0.1],
    ]);
    expect(h.notReached).toEqual([3, 4, 5]);
    expect(h.settledCalls).toEqual([
      { unit: 1, stopReason: "attempt 2 (task t1) ended timed-out: it timed-out" },
      { unit: 2, stopReason: null },
      { unit: 0, stopReason: null },
    ]);
    expect(h.writes.at(-1)).toMatchObject({ status: "blocked", reservedUsd: 0, spentUsd: 0.23 });
  });

  // contract: R108
  it("a signal stops new starts at once; the running units end (the kind stops them) and are charged by the rules", async () => {
    const g = gates(5);
    const controller = new AbortController();
    const h = harness(g.scripts);
    const run = h.run({ concurrency: 2, signal: controller.signal });
    await Promise.all(g.gates.slice(0, 2).map((x) => x.started));
    controller.abort("SIGTERM");
    // What the CLI stage does on the signal: the container is stopped, the attempt ends failed.
    g.gates[0]!.finish(fail("failed"));
    g.gates[1]!.finish(ok(0.01));
    const end = await run;
    expect(end.exitCode).toBe(ExitCode.sigterm);
    expect(h.events.filter((e) => e.startsWith("run"))).toEqual(["run 0", "run 1"]);
    expect(h.book.entries.map((e) => [e.status, e.chargedUsd])).toEqual([
      ["failed", 0.1],
      ["completed", 0.01],
    ]);
    expect(h.notReached).toEqual([2, 3, 4]);
  });

  it("a fault of the runner in one unit: no new starts, the others in flight are settled and written, then the fault propagates", async () => {
    const g = gates(4);
    const h = harness(g.scripts);
    const run = h.run({ concurrency: 2 });
    await Promise.all(g.gates.slice(0, 2).map((x) => x.started));
    g.gates[0]!.fault(new Error("Docker engine unreachable"));
    await tick();
    g.gates[1]!.finish(ok(0.01));
    await expect(run).rejects.toThrow("Docker engine unreachable");
    expect(h.events.filter((e) => e.startsWith("run"))).toEqual(["run 0", "run 1"]);
    expect(h.writes.at(-1)).toMatchObject({
      status: "blocked",
      reservedUsd: 0.1,
      spentUsd: 0.11,
      entries: [
        { unit: 0, phase: "reserved", chargedUsd: null },
        { unit: 1, phase: "settled", status: "completed", chargedUsd: 0.01 },
      ],
    });
  });

  // contract: R108
  it("one writer: settlements at the same moment never overlap two writes, and every write is a consistent record", async () => {
    const g = gates(8);
    const h = harness(g.scripts);
    let writing = 0;
    let overlapped = false;
    const run = h.run({
      concurrency: 4,
      async persist() {
        if (writing++) overlapped = true;
        // Copy at the start of the write, as the ledger store serialises before its first await.
        const snapshot = { status: h.book.status, ...h.book.budget, entries: h.book.entries.map((e) => ({ ...e })) };
        await tick();
        h.writes.push(snapshot);
        writing--;
      },
    });
    for (let round = 0; round < 2; round++) {
      await Promise.all(g.gates.slice(round * 4, round * 4 + 4).map((x) => x.started));
      // All four settle in the same turn of the event loop.
      for (const x of g.gates.slice(round * 4, round * 4 + 4)) x.finish(ok(0.01));
    }
    await run;
    expect(overlapped).toBe(false);
    for (const w of h.writes) {
      const open = w.entries.filter((e) => e.phase !== "settled").reduce((s, e) => s + e.reservationUsd, 0);
      const charged = w.entries.filter((e) => e.phase === "settled").reduce((s, e) => s + (e.chargedUsd ?? 0), 0);
      expect(w.reservedUsd).toBeCloseTo(open, 12);
      expect(w.spentUsd).toBeCloseTo(open + charged, 12);
    }
    expect(h.writes.at(-1)).toMatchObject({ status: "done", spentUsd: 0.08 });
  });

  // contract: R108
  it("pairs are dispatched together: both reserved and started before anything else, and a stop never leaves one half-run", async () => {
    const g = gates(6);
    const h = harness(g.scripts);
    // Units (0,1), (2,3), (4,5) are pairs; room for three: one pair runs, the next waits for room for both.
    const run = h.run({ concurrency: 3, groupKey: (u) => `pair ${Math.floor(u / 2)}` });
    await Promise.all(g.gates.slice(0, 2).map((x) => x.started));
    await tick();
    expect(g.inFlight()).toBe(2);
    // Both arms of a pair were reserved in one write before either ran.
    const firstWrite = h.writes[0]!;
    expect(firstWrite.entries.map((e) => e.unit)).toEqual([0, 1]);
    g.gates[0]!.finish(ok(0.01));
    await Promise.all(g.gates.slice(2, 4).map((x) => x.started));
    // Unit 1 fails while pair (2,3) runs: both arms of that pair finish, pair (4,5) never starts.
    g.gates[1]!.finish(fail("failed"));
    await tick();
    g.gates[2]!.finish(ok(0.01));
    g.gates[3]!.finish(ok(0.01));
    const end = await run;
    expect(end.exitCode).toBe(ExitCode.blocked);
    expect(h.book.entries.map((e) => [e.unit, e.status])).toEqual([
      [0, "completed"],
      [1, "failed"],
      [2, "completed"],
      [3, "completed"],
    ]);
    expect(h.notReached).toEqual([4, 5]);
  });

  it("without concurrency pairs run one after another exactly as before", async () => {
    const h = harness([() => fail("failed"), () => ok(0.01)]);
    const end = await h.run({ groupKey: () => "one pair" });
    expect(end.exitCode).toBe(ExitCode.blocked);
    expect(h.events.filter((e) => e.startsWith("run"))).toEqual(["run 0"]);
    expect(h.notReached).toEqual([1]);
  });

  // contract: R108
  it("a rate limit halves how many units may start, recorded; clean settlements bring it back", async () => {
    const g = gates(10);
    const h = harness(g.scripts);
    const events: Array<{ event: string; unit: number; httpStatus: number | null; concurrency: number }> = [];
    const run = h.run({ concurrency: 4, onRateEvent: (e) => void events.push(e) });
    const ctx0 = await g.gates[0]!.started;
    await Promise.all(g.gates.slice(1, 4).map((x) => x.started));
    ctx0.rateLimited(529);
    ctx0.rateLimited(529); // the CLI's next retry of the same unit is the same signal
    expect(events).toEqual([{ event: "backoff", unit: 0, httpStatus: 529, concurrency: 2 }]);
    // Four in flight, limit two: two must settle before the next starts.
    g.gates[0]!.finish(ok(0.01));
    g.gates[1]!.finish(ok(0.01));
    await tick();
    expect(h.events).not.toContain("run 4");
    g.gates[2]!.finish(ok(0.01));
    await g.gates[4]!.started;
    await tick();
    expect(g.inFlight()).toBe(2);
    // Units started after the back-off and settled without a limit raise it again, one at a time.
    for (let i = 3; i < 10; i++) {
      await g.gates[i]!.started;
      g.gates[i]!.finish(ok(0.01));
      await tick();
    }
    expect((await run).exitCode).toBe(ExitCode.ok);
    expect(events.filter((e) => e.event === "recover").map((e) => e.concurrency)).toEqual([3, 4]);
  });
});
