/**
 * A manifest fuzzed through its schema (issue 10): arbitrary JSON, mutations of the demo manifest
 * and arbitrary bytes. parseManifest either returns a manifest that plans without error in bounded
 * time, or throws a UsageError that names a field; nothing else, whatever the input.
 */
import fc from "fast-check";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parseManifest } from "../../src/manifest/load.ts";
import { ManifestSchema } from "../../src/manifest/schema.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { UsageError } from "../../src/util/errors.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";

const DEMO = JSON.parse(readFileSync(DEMO_MANIFEST, "utf8")) as Record<string, unknown>;

/** What must hold for any input. Returns "valid" or "refused". */
function judge(bytes: Buffer): "valid" | "refused" {
  let loaded;
  try {
    loaded = parseManifest(bytes, "fuzzed.json");
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    const e = err as UsageError;
    expect(e.message).toMatch(/^manifest fuzzed\.json is (not valid JSON|invalid)/);
    expect(e.problems.length).toBeGreaterThan(0);
    for (const p of e.problems) expect(typeof p).toBe("string");
    return "refused";
  }
  // Accepted: it is a manifest by the schema, and the plan is made quickly, in the fixed order.
  expect(ManifestSchema.safeParse(loaded.manifest).success).toBe(true);
  const t0 = performance.now();
  for (const mode of ["pilot", "full"] as const) {
    const plan = planStudy(loaded.manifest, mode);
    expect(plan.length).toBe(mode === "pilot" ? 2 : loaded.manifest.tasks.length * loaded.manifest.repetitions * 2);
    expect(plan.map((a) => a.index)).toEqual(plan.map((_, i) => i));
  }
  expect(performance.now() - t0).toBeLessThan(1_000);
  expect(loaded.protocolHash).toMatch(/^[0-9a-f]{64}$/);
  return "valid";
}

const text = (v: unknown) => Buffer.from(JSON.stringify(v), "utf8");

/** Sets or deletes the value at a random path (indexes into the keys met on the way). */
function mutate(root: unknown, path: readonly number[], value: unknown, del: boolean): unknown {
  if (typeof root !== "object" || root === null) return value;
  let node: any = root;
  for (let d = 0; d < path.length; d++) {
    const keys = Object.keys(node);
    if (keys.length === 0) return root;
    const key = keys[path[d]! % keys.length]!;
    if (d === path.length - 1 || typeof node[key] !== "object" || node[key] === null) {
      if (del) {
        if (Array.isArray(node)) node.splice(Number(key), 1);
        else delete node[key];
      } else node[key] = value;
      return root;
    }
    node = node[key];
  }
  return root;
}

const value = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.string({ maxLength: 30, unit: "binary" }),
  fc.constantFrom(
    0,
    -1,
    1.5,
    1e9,
    Number.MAX_SAFE_INTEGER,
    2 ** 53 + 2,
    1e308,
    "",
    "..",
    "../etc/passwd",
    "/abs",
    "a\\b",
    ".hidden",
    "a//b",
    "x".repeat(7000),
    "__proto__",
    "constructor",
    "0000000000000000000000000000000000000000",
    "E2FF563DC35B3DA1D8B11AB55F4447489DB3F3E5",
    [],
    {},
    null,
    true,
  ),
);

describe("manifest fuzzing", () => {
  it("3,000 mutations of the demo manifest: a UsageError naming the field, or a manifest that plans in bounded time", () => {
    const outcomes = { valid: 0, refused: 0 };
    fc.assert(
      fc.property(fc.array(fc.record({ path: fc.array(fc.nat(40), { minLength: 1, maxLength: 5 }), value, del: fc.boolean() }), { minLength: 1, maxLength: 4 }), (edits) => {
        let m: unknown = structuredClone(DEMO);
        for (const e of edits) m = mutate(m, e.path, e.value, e.del);
        outcomes[judge(text(m))]++;
      }),
      { numRuns: 3000 },
    );
    // Both sides are reached: some mutations keep a valid manifest (e.g. a changed question).
    expect(outcomes.valid).toBeGreaterThan(50);
    expect(outcomes.refused).toBeGreaterThan(1000);
  });

  it("2,000 arbitrary JSON values, and objects with the manifest's keys holding arbitrary values: only UsageError", () => {
    const keyed = fc.record({ version: value, repetitions: value, scenarios: value, repositories: value, tasks: value, answerKeys: value, title: value }, { requiredKeys: [] });
    fc.assert(
      fc.property(fc.oneof(fc.jsonValue(), keyed), (v) => {
        judge(text(v));
      }),
      { numRuns: 2000 },
    );
  });

  it("1,000 arbitrary byte strings, BOMs and truncations of the demo manifest: only UsageError", () => {
    const demo = text(DEMO);
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 500 }).map((b) => Buffer.from(b)),
          fc.nat(demo.length - 1).map((n) => demo.subarray(0, n)),
          fc.constant(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), demo])),
          fc.constant(Buffer.from([0xff, 0xfe, 0x7b, 0x00])),
        ),
        (bytes) => {
          judge(bytes);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it("an absurd repetition count is refused before any plan is made", () => {
    for (const repetitions of [1e6, 1e9, Number.MAX_SAFE_INTEGER]) {
      expect(judge(text({ ...DEMO, repetitions }))).toBe("refused");
    }
  });

  it("keys named __proto__ or constructor never reach Object.prototype", () => {
    const hostile = `{"__proto__":{"polluted":1},"version":1,"repetitions":1,"scenarios":["a","b"],"repositories":{"__proto__":"${"a".repeat(40)}","constructor":"${"b".repeat(40)}"},"tasks":[]}`;
    judge(Buffer.from(hostile));
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.hasOwn(Object.prototype, "polluted")).toBe(false);
  });
});
