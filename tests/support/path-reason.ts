import { publicFilter, type ExclusionReason, type PublicPathOptions } from "../../src/corpus/filter.ts";
import type { TreeEntry } from "../../src/corpus/git.ts";

/**
 * The public-path filter's reason for one entry judged on its own: the path rules (regular blobs
 * only, at most 200000 bytes, no dot-component, no dependency or build directory, no lockfile, no
 * answer key by name, never the manifest). It cannot see copies of an answer key under other
 * names: that takes the whole tree.
 */
export function exclusionReason(entry: TreeEntry, opts: PublicPathOptions = {}): ExclusionReason | undefined {
  return publicFilter([entry], opts).reason(entry);
}
