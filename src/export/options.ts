import { createHash } from "node:crypto";
import { realpath } from "node:fs/promises";
import { isAbsolute, relative, sep } from "node:path";
import type { ExportSource } from "./export.ts";

/**
 * The manifest's repository-relative path when the manifest file lives inside the checkout
 * whose top is `checkoutTop` (it is never exported).
 */
export async function manifestPathsInCheckout(checkoutTop: string, manifestPath: string): Promise<string[]> {
  let rel: string;
  try {
    rel = relative(await realpath(checkoutTop), await realpath(manifestPath));
  } catch {
    return [];
  }
  if (rel === "" || rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel)) return [];
  return [rel.split(sep).join("/")];
}

/** Git's blob ids of `bytes` in both object formats (SHA-1 and SHA-256 repositories). */
export function gitBlobIds(bytes: Buffer): string[] {
  const header = Buffer.from(`blob ${bytes.length}\0`);
  return ["sha1", "sha256"].map((algo) => createHash(algo).update(header).update(bytes).digest("hex"));
}

/** What of a manifest (a study's or a session manifest) the export needs. */
export interface ManifestSource {
  path: string;
  bytes: Buffer;
  manifest: { repositories: Readonly<Record<string, string>>; answerKeys?: Readonly<Record<string, readonly string[]>> };
}

/**
 * What an export of `repository` must leave out, built the same way for every caller: the
 * `export` command, the CLI and http attempts, the adjudicator and a session's worktree. A second
 * hand-built copy is how the manifest once reached attempts while `export` (which claims to show
 * exactly what an attempt sees) left it out.
 */
export async function exportSourceFor(loaded: ManifestSource, repository: string, repoDir: string): Promise<ExportSource> {
  const pin = loaded.manifest.repositories[repository];
  if (pin === undefined) throw new Error(`exportSourceFor: '${repository}' is not pinned in ${loaded.path}`);
  return {
    repoDir,
    pin,
    answerKeys: loaded.manifest.answerKeys?.[repository] ?? [],
    manifestPaths: await manifestPathsInCheckout(repoDir, loaded.path),
    manifestBlobIds: gitBlobIds(loaded.bytes),
  };
}
