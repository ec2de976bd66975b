import { describe, expect, it } from "vitest";
import { initOf } from "../../src/calibrate/init.ts";
import { jsonObjectLine } from "../../src/util/json-line.ts";

describe("a JSON-lines stream's line", () => {
  it("is an object, or passed over: not JSON, null, an array, a string", () => {
    expect(jsonObjectLine('{"type":"result","n":1}')).toEqual({ type: "result", n: 1 });
    for (const line of ["", "not json", "null", '["init"]', '"init"', "42", '{"type":"result"']) expect(jsonObjectLine(line), line).toBeUndefined();
  });

  it("the init event is found among lines that are not JSON or not objects", () => {
    const init = { type: "system", subtype: "init", model: "m" };
    expect(initOf(['["init"]', "{broken init", '"init"', JSON.stringify(init)])).toEqual(init);
    expect(initOf(['["init"]', '"init"'])).toBeNull();
  });
});
