import { createHash } from "node:crypto";
import type { Ledger } from "../ledger/schema.ts";
import { LEDGER_STORE } from "../ledger/store.ts";
import { loadManifest, type LoadedManifest } from "../manifest/load.ts";
import { UsageError } from "../util/errors.ts";

/** A ledger as read, with the sha256 of the exact bytes the record and the report bind to. */
export interface LedgerInput {
  path: string;
  ledger: Ledger;
  sha256: string;
}

/** Reads the ledger once (hash and content from the same bytes); never quotes its content. */
export async function readLedgerInput(path: string): Promise<LedgerInput> {
  const { value, bytes } = await LEDGER_STORE.readWithBytes(path);
  return { path, ledger: value, sha256: createHash("sha256").update(bytes).digest("hex") };
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
