import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import type { Ledger } from "../ledger/schema.ts";
import { LEDGER_STORE } from "../ledger/store.ts";
import { loadManifest, type LoadedManifest } from "../manifest/load.ts";
import { isSessionLedgerFile } from "../session/check.ts";
import { UsageError } from "../util/errors.ts";
import { printable } from "../util/printable.ts";

/** A ledger as read, with the sha256 of the exact bytes the record and the report bind to. */
export interface LedgerInput {
  path: string;
  ledger: Ledger;
  sha256: string;
}

/**
 * Reads the ledger once (hash and content from the same bytes); never quotes its content. A
 * session ledger is named as one, with the command that reads it, instead of listing how it
 * differs from a study's ledger (contract R191).
 */
export async function readLedgerInput(path: string): Promise<LedgerInput> {
  try {
    const { value, bytes } = await LEDGER_STORE.readWithBytes(path);
    return { path, ledger: value, sha256: createHash("sha256").update(bytes).digest("hex") };
  } catch (err) {
    if (err instanceof UsageError && isSessionLedgerFile(await readFile(path).catch(() => Buffer.alloc(0)))) {
      throw new UsageError(
        `${printable(path)} is a session ledger, not a study's ledger: adjudication and reports are made from a study run's ledger. ` +
          `See the sessions with \`study-runner sessions status ${printable(path)}\`, and check it with \`study-runner ledger verify ${printable(path)}\``,
      );
    }
    throw err;
  }
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
