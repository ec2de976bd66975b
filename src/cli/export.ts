import { mkdir } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import type { ExclusionReason } from "../corpus/filter.ts";
import { gitTopLevel } from "../corpus/git.ts";
import { loadManifest } from "../manifest/load.ts";
import { ExitCode, UsageError } from "../util/errors.ts";
import { writePinnedExport } from "../export/export.ts";
import { exportSourceFor } from "../export/options.ts";
import { parseExportLimits, parseRoots } from "./config/fields.ts";
import { unmatchedAnswerKeys } from "../export/root-check.ts";
import { printable } from "../util/printable.ts";
import type { FlagsOf } from "./config/flags.ts";

export interface ExportCommandOptions {
  /** The study manifest: it pins the repository and lists its answer keys. */
  manifest: string;
  /** Checkout path per repository name (`--root name=path`). */
  roots: Readonly<Record<string, string>>;
  repository: string;
  /** A folder that does not exist yet; its parent must. */
  out: string;
  maxExportFiles?: string;
  maxExportBytes?: string;
}

/** What `study-runner export` prints: counts and hashes only, never file contents. */
export interface ExportSummary {
  repository: string;
  pin: string;
  out: string;
  files: number;
  bytes: number;
  excluded: Record<ExclusionReason, number>;
  exportHash: string;
}

/**
 * `study-runner export`: writes exactly what an attempt on `repository` would see (same
 * filter, same code, same modes) into `out`, so a person can inspect it.
 */
export async function exportCommand(opts: ExportCommandOptions): Promise<ExportSummary> {
  const loaded = await loadManifest(opts.manifest);
  const { manifest } = loaded;
  const pinned = Object.keys(manifest.repositories);
  const pin = manifest.repositories[opts.repository];
  if (pin === undefined) {
    throw new UsageError(`--repository '${printable(opts.repository)}' is not pinned in ${printable(opts.manifest)}; use one of: ${pinned.join(", ")}`);
  }
  const root = opts.roots[opts.repository];
  if (root === undefined) throw new UsageError(`no checkout for '${opts.repository}'; pass --root ${opts.repository}=PATH`);
  const top = await gitTopLevel(resolve(root));
  if (top === undefined) throw new UsageError(`--root ${opts.repository}=${root} is not inside a git checkout`);

  const out = resolve(opts.out);
  const source = { ...(await exportSourceFor(loaded, opts.repository, top)), limits: parseExportLimits(opts), parentDir: dirname(out) };
  const { plan, exportHash } = await writePinnedExport(source, async (keysByName) => {
    // Refused like the dry run and the run, before any folder is made (contract R190).
    const unmatched = unmatchedAnswerKeys(opts.repository, pin, keysByName);
    if (unmatched.length) throw new UsageError(unmatched.join("\n"), unmatched);
    try {
      await mkdir(out, { mode: 0o700 });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "EEXIST") throw new UsageError(`--out ${opts.out} already exists; name a folder that does not exist yet`);
      if (code === "ENOENT") throw new UsageError(`--out ${opts.out}: its parent folder does not exist`);
      throw err;
    }
    return out;
  });
  return {
    repository: opts.repository,
    pin,
    out,
    files: plan.files.length,
    bytes: plan.files.reduce((n, f) => n + f.size, 0),
    excluded: plan.excluded,
    exportHash,
  };
}

/** `study-runner export` from its flags: the checkouts parsed (src/cli/config/), the summary printed as JSON. */
export async function exportFlagsCommand(flags: FlagsOf<"export">): Promise<number> {
  const summary = await exportCommand({ ...flags, roots: Object.fromEntries(parseRoots(flags.root)) });
  process.stdout.write(JSON.stringify(summary, null, 2) + "\n");
  return ExitCode.ok;
}
