import { describe, expect, it } from "vitest";
import { baseEvents, evaluate, toText, type Event } from "./transcript-fixtures.ts";

function text(edit: (events: Event[]) => unknown[] | void = () => {}): string {
  const events = baseEvents("repository");
  return toText(edit(events) ?? events);
}

/** The transcript a kill leaves: everything up to a line cut in the middle. */
function killedMidLine(): string {
  const events = baseEvents("repository");
  const cut = JSON.stringify(events[7]).slice(0, 40);
  return (
    events
      .slice(0, 7)
      .map((e) => JSON.stringify(e))
      .join("\n") +
    "\n" +
    cut
  );
}

const status = (t: string, run: Parameters<typeof evaluate>[2] = {}) => evaluate(t, "repository", run).classification.status;

describe("classifyAttempt precedence (seed 000)", () => {
  it("a clean success with exit 0 is completed", () => {
    expect(evaluate(text(), "repository").classification).toEqual({ status: "completed", reason: "success" });
  });

  it("a timeout is timed-out, even though the kill left no result and a cut line", () => {
    const ev = evaluate(killedMidLine(), "repository", { timedOut: true, exitCode: null });
    expect(ev.facts.setupProblemCodes.sort()).toEqual(["last-line-not-json", "no-result"]);
    expect(ev.classification.status).toBe("timed-out");
  });

  it("a kill before the CLI wrote its init (e.g. still connecting to MCP servers) is timed-out, not invalid-setup", () => {
    expect(status("", { timedOut: true, exitCode: null })).toBe("timed-out");
    expect(status('{"type":"sys', { timedOut: true, exitCode: null })).toBe("timed-out");
    expect(status("", { truncated: true, exitCode: null })).toBe("failed");
    // Without the kill, silence is a broken setup.
    expect(status("", { exitCode: 0 })).toBe("invalid-setup");
  });

  it("events without an init are not excused by a timeout", () => {
    expect(
      status(
        text((e) => e.slice(1, 4)),
        { timedOut: true, exitCode: null },
      ),
    ).toBe("invalid-setup");
  });

  it("a timeout after a complete transcript is still timed-out", () => {
    expect(status(text(), { timedOut: true, exitCode: null })).toBe("timed-out");
  });

  it("without a timeout, the same cut transcript is invalid-setup", () => {
    expect(status(killedMidLine(), { exitCode: 1 })).toBe("invalid-setup");
  });

  it("a setup problem from before the kill still wins over the timeout", () => {
    const t = killedMidLine().replace('"model":"claude-haiku-5-5"', '"model":"claude-sonnet-5"');
    expect(status(t, { timedOut: true })).toBe("invalid-setup");
  });

  it("a garbled line that is not the last is not excused by a timeout", () => {
    const t = text((e) => [e[0], "garbage", ...e.slice(1, 7)]);
    expect(status(t, { timedOut: true })).toBe("invalid-setup");
  });

  it("a result that is not last is not excused by a timeout", () => {
    expect(
      status(
        text((e) => [...e, { type: "rate_limit_event" }]),
        { timedOut: true },
      ),
    ).toBe("invalid-setup");
  });

  it("output cut at the 4 MiB bound is failed", () => {
    expect(status(killedMidLine(), { truncated: true, exitCode: null })).toBe("failed");
    expect(status(text(), { truncated: true })).toBe("failed");
  });

  it("timed-out wins over truncated", () => {
    expect(status(killedMidLine(), { truncated: true, timedOut: true })).toBe("timed-out");
  });

  it("an invalid cost is invalid-cost", () => {
    const ev = evaluate(
      text((e) => void (e[8]!.total_cost_usd = 0.01)),
      "repository",
    );
    expect(ev.classification.status).toBe("invalid-cost");
    expect(ev.classification.reason).toBe("total_cost_usd 0.01 is not within a factor of two of the list-price cost 0.000602");
  });

  it("setup is checked before cost", () => {
    const t = text((e) => {
      e[0]!.model = "claude-sonnet-5";
      e[8]!.total_cost_usd = 0.01;
    });
    expect(status(t)).toBe("invalid-setup");
  });

  it("a timeout is checked before cost", () => {
    expect(
      status(
        text((e) => void (e[8]!.total_cost_usd = 0.01)),
        { timedOut: true },
      ),
    ).toBe("timed-out");
  });

  it("error_max_budget_usd is budget-exceeded", () => {
    const t = text((e) => {
      e[8]!.subtype = "error_max_budget_usd";
      e[8]!.is_error = true;
      delete e[8]!.result;
    });
    expect(status(t, { exitCode: 1 })).toBe("budget-exceeded");
  });

  it("an invalid cost is checked before budget-exceeded", () => {
    const t = text((e) => {
      e[8]!.subtype = "error_max_budget_usd";
      e[8]!.total_cost_usd = -1;
    });
    expect(status(t)).toBe("invalid-cost");
  });

  const cases: Array<[string, (e: Event[]) => void, number | null, string]> = [
    ["a non-success subtype", (e) => void (e[8]!.subtype = "error_during_execution"), 0, 'result subtype "error_during_execution"'],
    ["is_error true", (e) => void (e[8]!.is_error = true), 0, "the result has is_error: true"],
    ["a non-zero exit", () => {}, 2, "exit code 2"],
    ["a kill by signal", () => {}, null, "killed by a signal"],
    ["a success without answer text", (e) => void delete e[8]!.result, 0, "the result has no answer text"],
  ];
  it.each(cases)("%s is failed", (_, edit, exitCode, reason) => {
    expect(evaluate(text(edit), "repository", { exitCode }).classification).toEqual({ status: "failed", reason });
  });

  it("a result read after a non-zero exit still yields its cost", () => {
    const ev = evaluate(text(), "repository", { exitCode: 1 });
    expect(ev.classification.status).toBe("failed");
    expect(ev.cost.reportedCostUsd).toBe(0.000602);
    expect(ev.cost.computedCostUsd).toBe(0.000602);
  });
});

describe("the reason of output cut at the stdout bound", () => {
  it("names the bound that cut it, also when a run configures one lower than 4 MiB", () => {
    expect(evaluate(text(), "repository", { truncated: true, stdoutLimitBytes: 64 * 1024 }).classification).toEqual({
      status: "failed",
      reason: "stdout reached the 64 KiB bound and was cut",
    });
    expect(evaluate(text(), "repository", { truncated: true, stdoutLimitBytes: 1000 }).classification.reason).toBe("stdout reached the 1000 bytes bound and was cut");
    expect(evaluate(text(), "repository", { truncated: true }).classification.reason).toBe("stdout reached the 4 MiB bound and was cut");
  });
});
