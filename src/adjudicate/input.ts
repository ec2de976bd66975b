import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { LedgerSchema, type Ledger } from "../ledger/schema.ts";
import { loadManifest, type LoadedManifest } from "../manifest/load.ts";
import { UsageError } from "../util/errors.ts";
import { formatIssues } from "../util/zod-errors.ts";

/** A ledger as read, with the sha256 of the exact bytes the record and the report bind to. */
export interface LedgerInput {
  path: string;
  ledger: Ledger;
  sha256: string;
}

/** Reads the ledger once (hash and content from the same bytes); never quotes its content. */
export async function readLedgerInput(path: string): Promise<LedgerInput> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (err) {
    throw new UsageError(`cannot read ledger ${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}; check the path given to --ledger`);
  }
  let json: unknown;
  try {
    json = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw new UsageError(`ledger ${path} is not valid JSON; it was not written by this runner or is damaged`);
  }
  const parsed = LedgerSchema.safeParse(json);
  if (!parsed.success) {
    const problems = formatIssues(parsed.error.issues);
    throw new UsageError(`ledger ${path} does not match the ledger schema:\n  ${problems.join("\n  ")}`, problems);
  }
  return { path, ledger: parsed.data, sha256: createHash("sha256").update(bytes).digest("hex") };
}

/**
 * The manifest the ledger was run with: `--manifest`, else the path the ledger records. Its
 * bytes must hash to the ledger's protocol hash, or the questions and propositions are not the
 * ones the answers were given to.
 */
export async function loadLedgerManifest(ledger: Ledger, manifestPath?: string): Promise<LoadedManifest> {
  const path = manifestPath ?? ledger.protocol.manifestPath;
  const loaded = await loadManifest(path);
  if (loaded.protocolHash !== ledger.protocol.protocolHash) {
    throw new UsageError(`manifest ${path} has protocol hash ${loaded.protocolHash}, but the ledger was run with ${ledger.protocol.protocolHash}; pass --manifest with the manifest the run used`);
  }
  return loaded;
}
