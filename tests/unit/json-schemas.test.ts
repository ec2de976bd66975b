import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { generateSchemas, schemaFileText } from "../../src/schemas/json-schemas.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

const DIR = join(PROJECT_ROOT, "docs", "schemas");

describe("docs/schemas", () => {
  it("holds exactly what the zod schemas generate (regenerate with `npm run schemas`)", async () => {
    const generated = generateSchemas();
    expect((await readdir(DIR)).filter((f) => f.endsWith(".schema.json")).sort()).toEqual(Object.keys(generated).sort());
    for (const [name, schema] of Object.entries(generated)) {
      expect(await readFile(join(DIR, name), "utf8"), name).toBe(schemaFileText(schema));
    }
  });

  it("documents the strictness of the ledger: unknown fields refused, usage fields required but nullable", () => {
    const ledger = generateSchemas()["ledger.schema.json"] as {
      additionalProperties: boolean;
      required: string[];
      properties: { observations: { items: { additionalProperties: boolean; required: string[]; properties: Record<string, unknown> } } };
    };
    expect(ledger.additionalProperties).toBe(false);
    expect(ledger.required).toEqual(expect.arrayContaining(["runId", "runnerHash", "budget", "adjudication", "observations"]));
    const observation = ledger.properties.observations.items;
    expect(observation.additionalProperties).toBe(false);
    expect(observation.required).toEqual(expect.arrayContaining(["inputTokens", "answer", "correctness", "adjudication"]));
    expect(observation.properties.correctness).toEqual({ type: "null" });
    expect(JSON.stringify(observation.properties.inputTokens)).toContain('"null"');
  });
});
