import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { hashExport, planExport } from "../export/export.ts";
import { exportSourceFor } from "../export/options.ts";
import type { Ledger } from "../ledger/schema.ts";
import { parseManifest } from "../manifest/load.ts";
import { errorMessage } from "../util/errors.ts";

/** Verification checks what was exported, never whether a limit would refuse it now. */
const NO_LIMITS = { maxFiles: Number.MAX_SAFE_INTEGER, maxBytes: Number.MAX_SAFE_INTEGER };

/**
 * `ledger verify`'s exportHash check (contract R118): every observation's exportHash recomputed
 * from the pin, with the export's own code (the manifest the ledger names, checked against its
 * protocol hash, and the checkout the ledger records). Returns the differences; a hash that
 * cannot be recomputed (manifest changed or gone, checkout gone) is one too, naming why.
 */
export async function verifyExportHashes(ledger: Ledger, manifest?: string): Promise<string[]> {
  const observed = ledger.observations.filter((o) => o.exportHash !== null);
  if (observed.length === 0) return [];
  const differences: string[] = [];
  const manifestPath = manifest ?? ledger.protocol.manifestPath;
  let bytes: Buffer;
  try {
    bytes = await readFile(manifestPath);
  } catch (err) {
    return [`exportHash: cannot be recomputed: the manifest ${manifestPath} cannot be read (${errorMessage(err)})`];
  }
  if (createHash("sha256").update(bytes).digest("hex") !== ledger.protocol.protocolHash) {
    return [`exportHash: cannot be recomputed: the manifest ${manifestPath} has changed since the run (its sha256 is not protocol.protocolHash)`];
  }
  const loaded = parseManifest(bytes, manifestPath);
  const recomputed = new Map<string, Promise<string>>();
  const hashOf = (repository: string, pin: string, root: string): Promise<string> => {
    const key = `${repository}\0${pin}`;
    let hash = recomputed.get(key);
    if (!hash) {
      hash = (async () => {
        const source = { ...(await exportSourceFor(loaded, repository, root)), pin, limits: NO_LIMITS };
        return hashExport(root, (await planExport(source)).files);
      })();
      recomputed.set(key, hash);
    }
    return hash;
  };
  for (const o of observed) {
    const where = `observations[${o.index}] (${o.task}, ${o.scenario}, repetition ${o.repetition}).exportHash`;
    const root = ledger.corpus.find((c) => c.repository === o.repository)?.root;
    if (root === undefined) {
      differences.push(`${where}: cannot be recomputed: the ledger records no checkout of ${o.repository}`);
      continue;
    }
    let hash: string;
    try {
      hash = await hashOf(o.repository, o.pin, root);
    } catch (err) {
      differences.push(`${where}: cannot be recomputed from ${root} at ${o.pin} (${errorMessage(err)})`);
      continue;
    }
    if (hash !== o.exportHash) differences.push(`${where}: ledger ${o.exportHash}, the export at the pin hashes to ${hash}`);
  }
  return differences;
}
