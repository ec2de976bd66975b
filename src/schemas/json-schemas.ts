import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import { AdjudicationRecordSchema } from "../adjudicate/schema.ts";
import { LedgerSchema } from "../ledger/schema.ts";
import { ManifestSchema } from "../manifest/schema.ts";
import { ProfileSchema } from "../profile/schema.ts";
import { SessionLedgerSchema, SessionManifestSchema } from "../session/schema.ts";

/**
 * JSON Schema files in docs/schemas are generated from the zod schemas that validate the files,
 * never kept by hand (architecture: "the same zod schema validates, types and documents"). A test
 * compares the committed files with this output. Cross-field rules (superRefine) cannot be
 * expressed in JSON Schema and are only enforced by the runner.
 */
function document(schema: z.ZodType, io: "input" | "output", title: string, description: string): object {
  const { $schema, ...rest } = z.toJSONSchema(schema, { io }) as Record<string, unknown>;
  return { $schema, title, description, ...rest };
}

/** file name -> JSON Schema document. */
export function generateSchemas(): Record<string, object> {
  return {
    // The manifest is what people write, so it documents the accepted input.
    "manifest.schema.json": document(ManifestSchema, "input", "study-runner manifest", "A paired study: pinned repositories, tasks with their questions and expected propositions, two scenarios."),
    // The ledger is what the runner writes.
    "ledger.schema.json": document(
      LedgerSchema,
      "output",
      "study-runner ledger",
      "The private ledger of one run: provenance, prices, budget, one observation per attempt. Holds private answers; never publish it as is.",
    ),
    // The adjudication record is what `study-runner adjudicate` writes beside a ledger.
    "adjudication.schema.json": document(
      AdjudicationRecordSchema,
      "output",
      "study-runner adjudication record",
      "The private agent adjudication of one ledger (method agent, no human review): one item per observation, bound to the ledger's run, protocol hash and bytes, with the adjudicator runs' budget. Holds verdicts that quote answers; never publish it as is.",
    ),
    "session-manifest.schema.json": document(
      SessionManifestSchema,
      "input",
      "study-runner session manifest",
      "Session tasks (kind session): a working agent with edit tools that finishes or asks one question, is answered, and resumes the same CLI session in a fresh container.",
    ),
    "session-ledger.schema.json": document(
      SessionLedgerSchema,
      "output",
      "study-runner session ledger",
      "The private ledger of session tasks: each session's id, calls, questions (untrusted text) and answers, costs per call, and the harness events. Holds private text; never publish it as is.",
    ),
    // The calibration profile of a CLI version (contract R220).
    "profile.schema.json": document(
      ProfileSchema,
      "output",
      "study-runner calibration profile",
      "What one Claude Code version was measured to do on its real binary: the init event of each kind of run, the request shapes the gateway admits, the price table, the runner's flags in its --help; the binary's sha256, the runner version that measured it, and the profile's own sha256 over its canonical body.",
    ),
  };
}

/** The exact bytes of a generated schema file. */
export function schemaFileText(schema: object): string {
  return `${JSON.stringify(schema, null, 2)}\n`;
}

/** Write every generated schema into `dir`; returns the paths written. */
export async function writeSchemas(dir: string): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const written: string[] = [];
  for (const [name, schema] of Object.entries(generateSchemas())) {
    const path = join(dir, name);
    await writeFile(path, schemaFileText(schema));
    written.push(path);
  }
  return written;
}
