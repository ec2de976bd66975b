import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DOC_TOOLS, MODEL, REPO_TOOLS, baseEvents, evaluate, toText, type Arm, type Event } from "./transcript-fixtures.ts";
import { setOwn } from "../../src/util/own-keys.ts";

/**
 * Random corruptions of a valid transcript. Line-level corruptions are checked against an
 * independent oracle of which rules they break; field-level corruptions are drawn only from
 * changes that always break a rule; arbitrary garbling must never throw.
 */

const STATUSES = ["completed", "failed", "timed-out", "budget-exceeded", "invalid-setup", "invalid-cost"];
const arm = fc.constantFrom<Arm>("repository", "mcp");

// Base line indexes (see baseEvents): 0 init, 1-3 msg_01 (text, call A, call B), 4 result of A,
// 5 result of B, 6 rate_limit_event, 7 msg_02, 8 result.
type LineOp = { kind: "drop" | "dup"; at: number } | { kind: "swap"; at: number; with: number };

function applyOps(ops: readonly LineOp[], allowDrop: boolean, lines = 9): number[] {
  const seq = [...Array(lines).keys()];
  for (const op of ops) {
    if (seq.length === 0) break;
    const i = op.at % seq.length;
    if (op.kind === "drop" && allowDrop) seq.splice(i, 1);
    else if (op.kind === "dup") seq.splice(i, 0, seq[i]!);
    else if (op.kind === "swap") {
      const j = op.with % seq.length;
      [seq[i], seq[j]] = [seq[j]!, seq[i]!];
    }
  }
  return seq;
}

const lineOp: fc.Arbitrary<LineOp> = fc.oneof(
  fc.record({ kind: fc.constantFrom("drop" as const, "dup" as const), at: fc.nat(20) }),
  fc.record({ kind: fc.constant("swap" as const), at: fc.nat(20), with: fc.nat(20) }),
);

/** The status the rules give a reordering of the base lines, derived from the rules alone. */
function oracle(seq: readonly number[]): "completed" | "invalid-setup" | "invalid-cost" {
  const count = (i: number) => seq.filter((x) => x === i).length;
  const first = (i: number) => seq.indexOf(i);
  const resultBeforeCall = (res: number, call: number) => count(res) > 0 && (count(call) === 0 || first(res) < first(call));
  const setupBroken = count(0) !== 1 || count(8) !== 1 || seq.at(-1) !== 8 || resultBeforeCall(4, 2) || resultBeforeCall(5, 3);
  if (setupBroken) return "invalid-setup";
  // Each message's usage must be seen once for the per-message sums to equal modelUsage.
  const costBroken = !(count(1) + count(2) + count(3) > 0) || count(7) === 0;
  return costBroken ? "invalid-cost" : "completed";
}

describe("line-level corruptions (drop, duplicate, reorder)", () => {
  it("give exactly the status an independent oracle predicts", () => {
    fc.assert(
      fc.property(arm, fc.array(lineOp, { maxLength: 5 }), (a, ops) => {
        const seq = applyOps(ops, true);
        const events = baseEvents(a);
        const ev = evaluate(toText(seq.map((i) => events[i])), a);
        expect(ev.classification.status).toBe(oracle(seq));
      }),
      { numRuns: 1000 },
    );
  });
});

/** Changes that each break a rule of seed 000, whatever else happens to the transcript. */
type Breaker = (events: Event[], arm: Arm, pick: number, text: string, num: number) => void;

const notIn = (set: readonly string[], s: string) => (set.includes(s) ? `${s}-x` : s);

const BREAKERS: Record<string, Breaker> = {
  "init model": (e, _a, _p, s) => void (e[0]!.model = s === MODEL ? "claude-sonnet-5" : s),
  // Removes one of the arm's expected tools (never a name another breaker added, which would undo it).
  "init tool missing": (e, a, p) => {
    const expected: string[] = a === "mcp" ? [...REPO_TOOLS, ...DOC_TOOLS] : [...REPO_TOOLS];
    const gone = expected[p % expected.length];
    e[0]!.tools = e[0]!.tools.filter((t: string) => t !== gone);
  },
  "init tool extra": (e, a, _p, s) => void e[0]!.tools.push(notIn(a === "mcp" ? [...REPO_TOOLS, ...DOC_TOOLS] : [...REPO_TOOLS], s)),
  "init tool duplicated": (e, _a, p) => void e[0]!.tools.push(e[0]!.tools[p % e[0]!.tools.length]),
  "mcp servers": (e, a, _p, s) => {
    if (a === "mcp") e[0]!.mcp_servers[0].status = s === "connected" ? "failed" : s;
    else e[0]!.mcp_servers.push({ name: "doc-bridge", status: "connected" });
  },
  "tool outside the set": (e, a, _p, s) => void (e[2]!.message.content[0].name = notIn(a === "mcp" ? [...REPO_TOOLS, ...DOC_TOOLS] : [...REPO_TOOLS], s)),
  "denied non-read tool": (e, _a, _p, s) => void e[8]!.permission_denials.push({ tool_name: notIn(["Read", "Grep", "Glob"], s), tool_use_id: "toolu_01", tool_input: {} }),
  "all doc-bridge calls failed": (e, a) => {
    if (a === "mcp") {
      e[4]!.message.content[0].is_error = true;
      e[5]!.message.content[0].is_error = true;
    } else {
      e[0]!.model = "claude-sonnet-5";
    }
  },
  "non-success subtype": (e, _a, _p, s) => void (e[8]!.subtype = s === "success" ? "error_during_execution" : s),
  is_error: (e) => void (e[8]!.is_error = true),
  "no answer": (e) => void delete e[8]!.result,
  "reported cost too high": (e, _a, _p, _s, n) => void (e[8]!.total_cost_usd = 0.000602 * 2 + 1e-9 + n),
  "reported cost too low": (e, _a, _p, _s, n) => void (e[8]!.total_cost_usd = (0.000602 / 2) * Math.min(0.999, n)),
  "reported cost missing": (e) => void delete e[8]!.total_cost_usd,
  // Defined, not assigned: a drawn name "__proto__" assigned would set the object's prototype and
  // leave no key in the JSON, where a transcript carries it as a key like any other.
  "foreign model": (e, _a, _p, s) => void setOwn(e[8]!.modelUsage, notIn([MODEL], s), { inputTokens: 1, outputTokens: 1, cacheReadInputTokens: 0, cacheCreationInputTokens: 0, costBasis: "list" }),
  "costBasis not list": (e, _a, _p, s) => void (e[8]!.modelUsage[MODEL].costBasis = s === "list" ? "unknown" : s),
  "per-message sum off": (e, _a, p) => void (e[7]!.message.usage.input_tokens += 1 + p),
  "not JSON": (e, _a, p) => {
    const line = JSON.stringify(e[p % e.length]);
    e.splice(p % e.length, 0, line.slice(0, 1 + (p % (line.length - 1))) as unknown as Event);
  },
};

describe("field-level corruptions that always break a rule", () => {
  it("never yield completed, never throw", () => {
    const breaker = fc.record({
      name: fc.constantFrom(...Object.keys(BREAKERS)),
      pick: fc.nat(1000),
      text: fc.string({ maxLength: 12 }),
      num: fc.double({ min: 0, max: 10, noNaN: true }),
    });
    fc.assert(
      fc.property(arm, fc.array(breaker, { minLength: 1, maxLength: 4 }), fc.array(lineOp, { maxLength: 4 }), fc.boolean(), (a, breakers, ops, badExit) => {
        const events = baseEvents(a);
        // "not JSON" inserts a line, so it goes last, when the others have found their lines.
        const ordered = [...breakers].sort((x, y) => Number(x.name === "not JSON") - Number(y.name === "not JSON"));
        for (const b of ordered) BREAKERS[b.name]!(events, a, b.pick, b.text, b.num);
        // Duplicates and swaps only: a dropped line could remove the very field that was broken.
        const seq = applyOps(ops, false, events.length);
        const ev = evaluate(toText(seq.map((i) => events[i])), a, { exitCode: badExit ? 1 : 0 });
        expect(ev.classification.status).not.toBe("completed");
      }),
      { numRuns: 1000 },
    );
  });

  it("each breaker alone breaks its rule on the untouched base", () => {
    for (const a of ["repository", "mcp"] as const) {
      for (const [name, breaker] of Object.entries(BREAKERS)) {
        const events = baseEvents(a);
        breaker(events, a, 1, "Bash", 1);
        expect({ name, a, status: evaluate(toText(events), a).classification.status }).not.toMatchObject({ status: "completed" });
      }
    }
  });
});

describe("arbitrary garbling", () => {
  it("byte-level edits never throw, and a line that is no longer JSON is never completed", () => {
    const edit = fc.record({ line: fc.nat(100), pos: fc.nat(10_000), del: fc.nat(3), ins: fc.string({ maxLength: 3, unit: "binary" }) });
    fc.assert(
      fc.property(arm, fc.array(edit, { minLength: 1, maxLength: 4 }), (a, edits) => {
        const lines = toText(baseEvents(a)).split("\n").slice(0, -1);
        for (const ed of edits) {
          const i = ed.line % lines.length;
          const l = lines[i]!;
          const p = ed.pos % (l.length + 1);
          lines[i] = l.slice(0, p) + ed.ins + l.slice(p + ed.del);
        }
        const text = lines.join("\n") + "\n";
        const ev = evaluate(text, a);
        expect(STATUSES).toContain(ev.classification.status);
        const broken = text
          .split("\n")
          .filter((l) => l !== "")
          .some((l) => {
            try {
              const v = JSON.parse(l);
              return typeof v !== "object" || v === null || Array.isArray(v);
            } catch {
              return true;
            }
          });
        if (broken) expect(ev.classification.status).toBe("invalid-setup");
      }),
      { numRuns: 1000 },
    );
  });

  it("any JSON value put anywhere in any event never throws", () => {
    fc.assert(
      fc.property(arm, fc.nat(8), fc.array(fc.nat(50), { minLength: 1, maxLength: 5 }), fc.jsonValue(), (a, line, path, value) => {
        const events = baseEvents(a);
        let node: Event = events[line]!;
        for (let d = 0; d < path.length - 1; d++) {
          const keys = Object.keys(node);
          const next = node[keys[path[d]! % Math.max(keys.length, 1)] ?? ""];
          if (typeof next !== "object" || next === null) break;
          node = next;
        }
        const keys = Object.keys(node);
        node[keys[path.at(-1)! % Math.max(keys.length, 1)] ?? "x"] = value;
        const ev = evaluate(toText(events), a, {});
        expect(STATUSES).toContain(ev.classification.status);
      }),
      { numRuns: 1000 },
    );
  });

  it("random text never throws and is never completed", () => {
    fc.assert(
      fc.property(arm, fc.string({ maxLength: 400, unit: "binary" }), (a, text) => {
        expect(evaluate(text, a).classification.status).not.toBe("completed");
      }),
      { numRuns: 300 },
    );
  });
});
