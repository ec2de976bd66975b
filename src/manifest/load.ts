import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { ManifestSchema, type Manifest } from "./schema.ts";
import { formatIssues } from "../util/zod-errors.ts";
import { UsageError } from "../util/errors.ts";
import { parseJsonStrict } from "../util/strict-json.ts";

export interface LoadedManifest {
  path: string;
  manifest: Manifest;
  /** sha256 of the manifest file's bytes: the protocol hash. */
  protocolHash: string;
  bytes: Buffer;
}

export function parseManifest(bytes: Buffer, path: string): LoadedManifest {
  let json: unknown;
  try {
    const parsed = parseJsonStrict(bytes.toString("utf8"));
    if (!parsed.ok) throw new UsageError(`manifest ${path} repeats a key:\n  ${parsed.problems.join("\n  ")}`, parsed.problems);
    json = parsed.value;
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`manifest ${path} is not valid JSON: ${(err as Error).message}`);
  }
  const parsed = ManifestSchema.safeParse(json);
  if (!parsed.success) {
    const problems = formatIssues(parsed.error.issues);
    throw new UsageError(`manifest ${path} is invalid:\n  ${problems.join("\n  ")}`, problems);
  }
  return { path, manifest: parsed.data, bytes, protocolHash: createHash("sha256").update(bytes).digest("hex") };
}

export async function loadManifest(path: string): Promise<LoadedManifest> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (err) {
    throw new UsageError(`cannot read manifest ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}; pass --manifest PATH`);
  }
  return parseManifest(bytes, path);
}
