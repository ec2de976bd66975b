import { readFile } from "node:fs/promises";
import type { z } from "zod";
import { UsageError } from "./errors.ts";
import { parseJsonStrict } from "./strict-json.ts";
import { formatIssues } from "./zod-errors.ts";

/**
 * One reader for every JSON file the runner reads back and validates with zod: the manifests a
 * person writes and the private records the runner wrote (ledgers, adjudication records, session
 * ledgers). Each refusal is a UsageError naming the file, and for a schema mismatch every field
 * (`field.path: message`, one problem each).
 */
export interface JsonFileWords {
  /** The file as messages name it, e.g. `ledger /x/pilot.json` or `the session manifest m.json`. */
  name: string;
  /** What to do when the file cannot be read, e.g. `pass --manifest PATH`. */
  readFix: string;
  /** How a schema mismatch is said, e.g. `does not match the ledger schema` or `is invalid`. */
  mismatch: string;
  /**
   * A file a person wrote: a key that repeats is refused (parseJsonStrict) and a syntax error
   * quotes the parser. Otherwise a private record: the parser's message quotes part of the input,
   * which may be a private answer, so it is never shown.
   */
  written?: "by-hand" | "by-runner";
}

/** The code of a failed read (ENOENT, EACCES), or its message. */
function readProblem(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? (err as Error).message ?? String(err);
}

function parseText(text: string, words: JsonFileWords): unknown {
  if (words.written !== "by-hand") {
    try {
      return JSON.parse(text);
    } catch {
      throw new UsageError(`${words.name} is not valid JSON; it was not written by this runner or is damaged`);
    }
  }
  let strict: ReturnType<typeof parseJsonStrict>;
  try {
    strict = parseJsonStrict(text);
  } catch (err) {
    throw new UsageError(`${words.name} is not valid JSON: ${(err as Error).message}`);
  }
  if (!strict.ok) throw new UsageError(`${words.name} repeats a key:\n  ${strict.problems.join("\n  ")}`, strict.problems);
  return strict.value;
}

/** `bytes` as JSON of `schema`, or a UsageError naming the file (and each field that does not match). */
export function parseJsonAs<S extends z.ZodType>(bytes: Buffer | string, schema: S, words: JsonFileWords): z.output<S> {
  const json = parseText(typeof bytes === "string" ? bytes : bytes.toString("utf8"), words);
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    const problems = formatIssues(parsed.error.issues);
    throw new UsageError(`${words.name} ${words.mismatch}:\n  ${problems.join("\n  ")}`, problems);
  }
  return parsed.data;
}

/** The bytes of `path`, or a UsageError naming the file, why and what to do. */
export async function readFileFor(path: string, words: Pick<JsonFileWords, "name" | "readFix">): Promise<Buffer> {
  try {
    return await readFile(path);
  } catch (err) {
    throw new UsageError(`cannot read ${words.name}: ${readProblem(err)}; ${words.readFix}`);
  }
}

/** The file at `path` read and validated (parseJsonAs), with the exact bytes read (for their hash). */
export async function readJsonAs<S extends z.ZodType>(path: string, schema: S, words: JsonFileWords): Promise<{ value: z.output<S>; bytes: Buffer }> {
  const bytes = await readFileFor(path, words);
  return { value: parseJsonAs(bytes, schema, words), bytes };
}
