import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

/**
 * The eval log JSON schema Inspect published (tests/fixtures/inspect/log-schema.json, with its
 * commit and licence), for checking the logs `report --format inspect` writes.
 */

export const INSPECT_SCHEMA_PATH = resolve(dirname(fileURLToPath(import.meta.url)), "..", "fixtures", "inspect", "log-schema.json");

/** A validator for Inspect's EvalLog schema; `errors` lists the first problems in words. */
export function inspectLogValidator(): (log: unknown) => { valid: boolean; errors: string[] } {
  // pydantic writes JSON Schema draft 2020-12; its formats (date-time) are checked too.
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats.default(ajv);
  const validate = ajv.compile(JSON.parse(readFileSync(INSPECT_SCHEMA_PATH, "utf8")));
  return (log) => {
    const valid = validate(log) as boolean;
    return { valid, errors: (validate.errors ?? []).slice(0, 20).map((e) => `${e.instancePath || "/"} ${e.message ?? ""} ${JSON.stringify(e.params)}`) };
  };
}
