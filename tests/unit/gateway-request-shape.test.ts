/**
 * The strict JSON parse and the request-shape check the gateway admits requests by
 * (src/util/strict-json.ts, src/gateway/request-shape.ts), on generated values.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { headerProblem, parseTarget, shapeProblem, targetProblem } from "../../src/gateway/request-shape.ts";
import { inferShape } from "../../src/calibrate/infer-shape.ts";
import { parseStrictJson, StrictJsonError, type JsonValue } from "../../src/util/strict-json.ts";
import { activeProfile } from "../../src/profile/load.ts";

const CLI_REQUEST_SHAPES = activeProfile().requestShapes;

const json = fc.jsonValue() as fc.Arbitrary<JsonValue>;

describe("the strict JSON parse", () => {
  it("reads every JSON text with unique keys as JSON.parse does", () => {
    fc.assert(
      fc.property(json, fc.boolean(), (v, pretty) => {
        const text = JSON.stringify(v, null, pretty ? 2 : undefined);
        expect(parseStrictJson(text)).toEqual(JSON.parse(text));
      }),
    );
  });

  it("refuses a key repeated in any object at any depth, also when spelled with an escape", () => {
    fc.assert(
      fc.property(json, fc.string({ minLength: 1, maxLength: 8 }), fc.boolean(), (v, key, escaped) => {
        // The repeated member goes into an object nested inside the generated value.
        const first = JSON.stringify(key);
        const second = escaped ? `"${[...key].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("")}"` : first;
        const text = `{"wrap":[${JSON.stringify(v)},{${first}:1,"other":${JSON.stringify(v)},${second}:2}]}`;
        expect(() => parseStrictJson(text)).toThrow(StrictJsonError);
        expect(() => parseStrictJson(text)).toThrow(/appears twice in the object at wrap\[1\]/);
      }),
    );
  });

  it("refuses text that is not JSON (comments, trailing commas, NaN, single quotes)", () => {
    for (const t of ['{"a":1,}', "[1]//x", "{'a':1}", "[NaN]", '{"a":1} x', ""]) expect(() => parseStrictJson(t), t).toThrow(StrictJsonError);
  });
});

describe("the request shape", () => {
  it("admits every value it was inferred from, and refuses a member or a type value never seen", () => {
    fc.assert(
      fc.property(fc.array(json, { minLength: 1, maxLength: 5 }), (values) => {
        const shape = inferShape(values);
        for (const v of values) expect(shapeProblem(shape, v)).toBeNull();
        const object = { never_measured_member: 1 };
        const typed = { type: "never_measured_type" };
        expect(shapeProblem({ array: shape }, [object])).not.toBeNull();
        expect(shapeProblem({ array: shape }, [typed])).not.toBeNull();
      }),
    );
  });

  // contract: R135
  it("a measured member named __proto__ or constructor is the node's own, and no measurement reaches a prototype", () => {
    const measured = parseStrictJson('{"type":"message","__proto__":{"boolean":true,"array":[1]},"constructor":1}');
    const shape = inferShape([measured]);
    const inherited: string[] = [];
    for (const k in {}) inherited.push(k);
    expect(inherited).toEqual([]);
    expect(Object.keys(shape.object!.message!).sort()).toEqual(["__proto__", "constructor"]);
    expect(shapeProblem(shape, measured)).toBeNull();
    // The same names with what was never measured in them.
    expect(shapeProblem(shape, parseStrictJson('{"type":"message","__proto__":{"boolean":"s"}}'))).toMatch(/__proto__/);
    expect(shapeProblem(shape, parseStrictJson('{"type":"message","constructor":"s"}'))).toMatch(/constructor/);
  });

  // contract: R135
  it("an object type or a member the CLI never sent is refused when it names a member every object inherits", () => {
    const shape = inferShape([{ type: "message", content: "a" }]);
    for (const type of ["constructor", "__proto__", "toString", "hasOwnProperty"]) {
      expect(shapeProblem(shape, parseStrictJson(`{"type":${JSON.stringify(type)}}`)), type).toMatch(/never sends there/);
      expect(shapeProblem(shape, parseStrictJson(`{"type":"message",${JSON.stringify(type)}:{}}`)), type).toMatch(/never sends there/);
    }
  });

  it("reads the target with a URL parser and admits only the measured one, as the parser serializes it", () => {
    expect(targetProblem(CLI_REQUEST_SHAPES, "POST", "/v1/messages?beta=true")).toBeNull();
    expect(parseTarget("/v1/messages?beta=true?&foo=bar")).toEqual({ path: "/v1/messages", search: "?beta=true?&foo=bar" });
    for (const t of [
      "/v1/messages?beta=true?&foo=bar",
      "/v1/messages?beta=true#x",
      "/v1/%6Dessages?beta=true",
      "/v1/messages/?beta=true",
      "http://x/v1/messages?beta=true",
      "//x/v1/messages?beta=true",
      "/v1/messages?beta=true ",
    ]) {
      expect(targetProblem(CLI_REQUEST_SHAPES, "POST", t), t).not.toBeNull();
    }
    expect(targetProblem(CLI_REQUEST_SHAPES, "GET", "/v1/messages?beta=true")).not.toBeNull();
  });

  it("admits the measured header names and beta values, whatever their case and spacing, and nothing else", () => {
    expect(headerProblem(CLI_REQUEST_SHAPES, ["Content-Type", "application/json", "anthropic-beta", CLI_REQUEST_SHAPES.anthropicBeta.join(" , ")])).toBeNull();
    expect(headerProblem(CLI_REQUEST_SHAPES, ["anthropic-beta", "oauth-2025-04-20", "anthropic-beta", "files-api-2025-04-14"])).toMatch(/files-api-2025-04-14/);
    expect(headerProblem(CLI_REQUEST_SHAPES, ["X-Api-Key", "k"])).toMatch(/x-api-key/);
  });
});
