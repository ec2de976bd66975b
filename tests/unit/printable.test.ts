import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { formatPath } from "../../src/util/zod-errors.ts";
import { jsonLiteral, printable } from "../../src/util/printable.ts";

/** What may not reach a terminal or a prompt raw: a control character, a line or paragraph separator, a bidirectional control. */
const UNSAFE = /[\p{Cc}\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/u;

describe("the one escaping of echoed input", () => {
  // contract: R189
  it("leaves no control, separator or bidirectional character raw, changes nothing else, and its JSON form reads back exactly", () => {
    fc.assert(
      fc.property(fc.string({ unit: "binary", maxLength: 40 }), (text) => {
        const shown = printable(text);
        expect(shown).not.toMatch(UNSAFE);
        if (!UNSAFE.test(text)) expect(shown).toBe(text);
        const literal = jsonLiteral(text);
        expect(literal).not.toMatch(UNSAFE);
        expect(JSON.parse(literal)).toBe(text);
      }),
      { numRuns: 2000 },
    );
    expect(printable("evil\u202eeman\u0007\n")).toBe("evil\\u202eeman\\u0007\\u000a");
    expect(formatPath(["repositories", "evil\u202eeman"])).toBe('repositories["evil\\u202eeman"]');
  });
});
