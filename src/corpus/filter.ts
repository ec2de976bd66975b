import type { TreeEntry } from "./git.ts";

/** Largest blob an export (and any client-side tool) ever holds. */
export const MAX_PUBLIC_BYTES = 200_000;

/** Path components that mark dependencies or build output. */
const EXCLUDED_DIRS = new Set(["node_modules", "dist", "build", "coverage"]);

/** Lockfiles of the common ecosystems: the one list, used by every filter. */
export const LOCKFILES = new Set([
  "package-lock.json",
  "npm-shrinkwrap.json",
  "yarn.lock",
  "pnpm-lock.yaml",
  "bun.lockb",
  "bun.lock",
  "deno.lock",
  "Cargo.lock",
  "Gemfile.lock",
  "poetry.lock",
  "Pipfile.lock",
  "pdm.lock",
  "uv.lock",
  "composer.lock",
  "go.sum",
  "mix.lock",
  "pubspec.lock",
  "Package.resolved",
  "packages.lock.json",
  "flake.lock",
  "gradle.lockfile",
  "conda-lock.yml",
]);

export type ExclusionReason =
  | "not-a-regular-file"
  | "too-large"
  | "hidden"
  | "build-or-dependency-dir"
  | "lockfile"
  | "answer-key"
  | "manifest"
  | "instruction-file"
  | "not-utf8-path";

export interface PublicPathOptions {
  /** Paths (relative to the repository root) that hold answer keys. */
  answerKeys?: readonly string[];
  /** Repository-relative paths of the study manifest, if it lives in the corpus. */
  manifestPaths?: readonly string[];
  /**
   * Drop every file the CLI takes as instructions (isInstructionFile). Attempts keep them: they
   * are part of the corpus the agent is measured on. The adjudicator must not: a corpus could
   * tell it how to grade.
   */
  excludeInstructionFiles?: boolean;
}

/**
 * Names the pinned CLI loads into its prompt as instructions (measured,
 * tests/conformance/instruction-files.test.ts: CLAUDE.md and CLAUDE.local.md of the working
 * folder; `.claude/` is already hidden) plus the ones it may load later or that other agents
 * read (a nested CLAUDE.md when the CLI reads in its folder, AGENTS.md), at any depth, in any case.
 */
const INSTRUCTION_FILE_NAMES = new Set(["claude.md", "claude.local.md", "agents.md"]);

export function isInstructionFile(path: string): boolean {
  const parts = path.split("/");
  return INSTRUCTION_FILE_NAMES.has(parts[parts.length - 1]!.normalize("NFC").toLowerCase()) || parts.some((p) => p.toLowerCase() === ".claude");
}

/** The adjudicator's export: the attempts' filter without the files the CLI would take as instructions. */
export function adjudicatorFilterOptions<T extends PublicPathOptions>(opts: T): T & { excludeInstructionFiles: true } {
  return { ...opts, excludeInstructionFiles: true };
}

/** Which instruction files an export holds (for the ledger): the paths isInstructionFile picks. */
export function instructionFilesIn(paths: readonly string[]): string[] {
  return paths.filter(isInstructionFile).sort();
}

/**
 * The public-path filter: why an entry of the pinned tree is not shown to the agent, or
 * undefined when it is. Regular blobs only (100644/100755), at most 200000 bytes, no
 * dot-component, no dependency or build directory, no lockfile, no answer key, never the
 * manifest. `CLAUDE.md` and `AGENTS.md` pass.
 */
export function exclusionReason(entry: TreeEntry, opts: PublicPathOptions = {}): ExclusionReason | undefined {
  if (entry.type !== "blob" || (entry.mode !== "100644" && entry.mode !== "100755")) return "not-a-regular-file";
  if (!Buffer.from(entry.path, "utf8").equals(entry.rawPath)) return "not-utf8-path";
  const parts = entry.path.split("/");
  if (parts.some((p) => p.startsWith("."))) return "hidden";
  if (parts.some((p) => EXCLUDED_DIRS.has(p))) return "build-or-dependency-dir";
  if (LOCKFILES.has(parts[parts.length - 1]!)) return "lockfile";
  if (opts.answerKeys?.some((k) => entry.path === k || entry.path.startsWith(`${k}/`))) return "answer-key";
  if (opts.manifestPaths?.includes(entry.path)) return "manifest";
  if (opts.excludeInstructionFiles && isInstructionFile(entry.path)) return "instruction-file";
  if ((entry.size ?? Infinity) > MAX_PUBLIC_BYTES) return "too-large";
  return undefined;
}

export function publicEntries(entries: readonly TreeEntry[], opts: PublicPathOptions = {}): TreeEntry[] {
  return entries.filter((e) => exclusionReason(e, opts) === undefined);
}
