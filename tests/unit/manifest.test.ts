import { describe, expect, it } from "vitest";
import { readFileSync } from "node:fs";
import { parseManifest } from "../../src/manifest/load.ts";
import { UsageError } from "../../src/util/errors.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";

const demo = () => JSON.parse(readFileSync(DEMO_MANIFEST, "utf8"));

function problemsOf(mutate: (m: any) => void): string[] {
  const m = demo();
  mutate(m);
  try {
    parseManifest(Buffer.from(JSON.stringify(m)), "test.json");
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return [...(err as UsageError).problems];
  }
  throw new Error("manifest was accepted");
}

describe("study manifest", () => {
  it("loads the bundled demo unchanged and hashes its bytes", () => {
    const bytes = readFileSync(DEMO_MANIFEST);
    const loaded = parseManifest(bytes, DEMO_MANIFEST);
    expect(loaded.manifest.tasks).toHaveLength(6);
    expect(loaded.manifest.repetitions).toBe(3);
    expect(loaded.protocolHash).toMatch(/^[0-9a-f]{64}$/);
    // One changed byte (whitespace only) is a different protocol.
    expect(parseManifest(Buffer.concat([bytes, Buffer.from(" ")]), "x").protocolHash).not.toBe(loaded.protocolHash);
  });

  it("accepts a maintainer-style manifest without this runner's optional fields", () => {
    const m = demo();
    delete m.answerKeys;
    delete m.title;
    m.version = "minimal-study-v1";
    expect(parseManifest(Buffer.from(JSON.stringify(m)), "x").manifest.version).toBe("minimal-study-v1");
  });

  it("refuses a duplicate task id, naming the field and the first occurrence", () => {
    const p = problemsOf((m) => (m.tasks[3].id = m.tasks[0].id));
    expect(p).toEqual([expect.stringMatching(/^tasks\[3\]\.id: duplicates tasks\[0\]\.id 'ledgerlite-rounding'/)]);
  });

  it("refuses a 39-hex pin", () => {
    const p = problemsOf((m) => (m.repositories.queuekit = m.repositories.queuekit.slice(1)));
    expect(p).toEqual([expect.stringMatching(/^repositories\.queuekit: must be a full 40-character lowercase hex commit id/)]);
  });

  it("refuses a task on an unpinned repository and a pinned repository no task uses", () => {
    const p = problemsOf((m) => (m.tasks[5].repository = "nowhere"));
    expect(p.some((l) => /^tasks\[5\]\.repository: 'nowhere' is not pinned/.test(l))).toBe(true);
    const q = problemsOf((m) => (m.repositories.extra = "a".repeat(40)));
    expect(q).toEqual([expect.stringMatching(/^repositories\.extra: is pinned but no task uses it/)]);
  });

  it.each([
    ["../x", /contains '\.\.'/],
    [".env", /dot-component '\.env'/],
    ["docs/.hidden/a.md", /dot-component '\.hidden'/],
    ["/etc/passwd", /is absolute/],
    ["a//b", /empty component/],
  ])("refuses the source path %s", (bad, why) => {
    const p = problemsOf((m) => (m.tasks[2].sources[1] = bad));
    expect(p).toHaveLength(1);
    expect(p[0]).toMatch(/^tasks\[2\]\.sources\[1\]: /);
    expect(p[0]).toMatch(why);
  });

  it("refuses three scenarios and two equal ones", () => {
    expect(problemsOf((m) => m.scenarios.push("third"))).toEqual([expect.stringMatching(/^scenarios: must name exactly two scenarios/)]);
    expect(problemsOf((m) => (m.scenarios[1] = m.scenarios[0]))).toEqual([expect.stringMatching(/^scenarios\[1\]: must differ/)]);
  });

  it("refuses zero and fractional repetitions", () => {
    expect(problemsOf((m) => (m.repetitions = 0))).toEqual([expect.stringMatching(/^repetitions: must be at least 1/)]);
    expect(problemsOf((m) => (m.repetitions = 1.5))).toEqual([expect.stringMatching(/^repetitions: must be a whole number/)]);
  });

  it("refuses unknown fields at the top level and in a task", () => {
    expect(problemsOf((m) => (m.repetitons = 3))).toEqual([expect.stringMatching(/^\(top level\): unknown field 'repetitons'/)]);
    expect(problemsOf((m) => (m.tasks[1].answer = "x"))).toEqual([expect.stringMatching(/^tasks\[1\]: unknown field 'answer'/)]);
  });

  it("names a missing required field", () => {
    expect(problemsOf((m) => delete m.tasks[0].expected)).toEqual([expect.stringMatching(/^tasks\[0\]\.expected: is required/)]);
  });

  it("reports every problem at once", () => {
    const p = problemsOf((m) => {
      m.repetitions = 0;
      m.tasks[0].sources[0] = "../x";
    });
    expect(p).toHaveLength(2);
  });

  it("says where the JSON is broken", () => {
    expect(() => parseManifest(Buffer.from('{"version": 1,'), "broken.json")).toThrow(/broken\.json is not valid JSON/);
  });
});
