import { describe, expect, it } from "vitest";
import { duplicateKeys, parseJsonStrict, parseStrictJson, StrictJsonError } from "../../src/util/strict-json.ts";

describe("the one strict JSON reader (manifests and gateway bodies)", () => {
  // contract: R123
  it("names every repeated key with its object's path and both lines, at any depth, escapes decoded", () => {
    const text = ["{", '  "answerKeys": {"a": ["x"]},', '  "tasks": [{"id": "t", "category": "c",', '    "category": "d"}],', '  "\\u0061nswerKeys": {"corpus": []}', "}"].join("\n");
    expect(duplicateKeys(text)).toEqual([
      { key: "category", at: "tasks[0]", firstLine: 3, line: 4 },
      { key: "answerKeys", at: "", firstLine: 2, line: 5 },
    ]);
    const parsed = parseJsonStrict(text);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.problems[1]).toMatch(/^the key "answerKeys" at the top level appears twice \(line 2 and line 5\)/);
    expect(() => parseStrictJson(text)).toThrow(StrictJsonError);
  });

  it("keeps equal keys in different objects, and keys inside strings are not keys", () => {
    const text = '{"a": {"k": 1}, "b": {"k": "\\"k\\": 2, \\"k\\": 3"}, "c": [{"k": 1}, {"k": 2}]}';
    expect(duplicateKeys(text)).toEqual([]);
    expect(parseStrictJson(text)).toEqual(JSON.parse(text));
  });
});
