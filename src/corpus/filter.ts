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

export type ExclusionReason = "not-a-regular-file" | "too-large" | "hidden" | "build-or-dependency-dir" | "lockfile" | "answer-key" | "manifest" | "instruction-file" | "not-utf8-path";

export interface PublicPathOptions {
  /** Paths (relative to the repository root) that hold answer keys. */
  answerKeys?: readonly string[];
  /** Repository-relative paths of the study manifest, if it lives in the corpus. */
  manifestPaths?: readonly string[];
  /**
   * Git blob ids of the manifest's own bytes: a copy of the manifest committed anywhere in the
   * corpus carries the expected answers as surely as the file the runner was given.
   */
  manifestBlobIds?: readonly string[];
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

/** Format and ignorable characters that render as nothing (zero-width space, BOM, bidi marks, soft hyphen, …). */
const INVISIBLE = /[\p{Cf}\p{Default_Ignorable_Code_Point}]/gu;
const EDGE_SPACE = /^\p{White_Space}+|\p{White_Space}+$/gu;
const PLAIN_ASCII = /^[!-~]*$/;

/**
 * The form answer keys are compared in, per path component: Unicode NFC, invisible characters
 * removed, surrounding whitespace removed, case folded. A name that looks the same to a reader
 * (or to a case-insensitive file system) as a key is the key.
 */
export function matchForm(path: string): string {
  // Printable ASCII without spaces has nothing to normalize, strip or fold beyond case: the
  // common case, kept cheap because every entry of every export takes this path.
  if (PLAIN_ASCII.test(path)) return path.toLowerCase();
  return path
    .split("/")
    .map((c) => c.normalize("NFC").replace(INVISIBLE, "").replace(EDGE_SPACE, "").toUpperCase().toLowerCase().normalize("NFC"))
    .join("/");
}

/** Git's id of the empty blob in both object formats: empty files are everywhere and hold nothing. */
const EMPTY_BLOBS = new Set(["e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", "473a0f4c3be8a93681a267e3b1e9a7dcda1185436fe141f7749120a303721813"]);

interface PreparedOptions {
  keys: string[];
  excludeInstructionFiles: boolean;
  manifestPaths: readonly string[];
  /** Blob id → "answer-key" or "manifest": any entry with that content is kept out wherever it lies. */
  blobs: Map<string, "answer-key" | "manifest">;
}

function matchesKey(form: string, keys: readonly string[]): string | undefined {
  return keys.find((k) => form === k || form.startsWith(`${k}/`));
}

function reasonFor(entry: TreeEntry, o: PreparedOptions): ExclusionReason | undefined {
  if (entry.type !== "blob" || (entry.mode !== "100644" && entry.mode !== "100755")) return "not-a-regular-file";
  if (!Buffer.from(entry.path, "utf8").equals(entry.rawPath)) return "not-utf8-path";
  const parts = entry.path.split("/");
  if (parts.some((p) => p.startsWith("."))) return "hidden";
  if (parts.some((p) => EXCLUDED_DIRS.has(p))) return "build-or-dependency-dir";
  if (LOCKFILES.has(parts[parts.length - 1]!)) return "lockfile";
  if (o.keys.length && matchesKey(matchForm(entry.path), o.keys) !== undefined) return "answer-key";
  if (o.manifestPaths.includes(entry.path)) return "manifest";
  if (o.excludeInstructionFiles && isInstructionFile(entry.path)) return "instruction-file";
  const byContent = o.blobs.get(entry.oid);
  if (byContent) return byContent;
  if ((entry.size ?? Infinity) > MAX_PUBLIC_BYTES) return "too-large";
  return undefined;
}

function prepare(opts: PublicPathOptions, blobs: Map<string, "answer-key" | "manifest"> = new Map()): PreparedOptions {
  for (const id of opts.manifestBlobIds ?? []) if (!EMPTY_BLOBS.has(id)) blobs.set(id, "manifest");
  return { keys: (opts.answerKeys ?? []).map(matchForm), manifestPaths: opts.manifestPaths ?? [], blobs, excludeInstructionFiles: opts.excludeInstructionFiles ?? false };
}

/**
 * The path rules alone, for one entry: regular blobs only (100644/100755), at most 200000
 * bytes, no dot-component, no dependency or build directory, no lockfile, no answer key (in
 * its match form), never the manifest. `CLAUDE.md` and `AGENTS.md` pass. It cannot see copies
 * of an answer key under other names: use `publicFilter` on the whole tree for that.
 */
export function exclusionReason(entry: TreeEntry, opts: PublicPathOptions = {}): ExclusionReason | undefined {
  return reasonFor(entry, prepare(opts));
}

export interface AnswerKeyMatch {
  /** The key as the manifest spells it. */
  key: string;
  /** Tree paths whose match form is the key's, or lies under it. */
  byName: string[];
  /** Other tree paths holding the same blob as one of those (copies under another name). */
  byContent: string[];
}

export interface PublicFilter {
  /** Why `entry` is kept out, or undefined when the agent (and the doc-bridge index) may see it. */
  reason(entry: TreeEntry): ExclusionReason | undefined;
  /** Per answer key, in manifest order, what it matched in this tree. */
  answerKeys: AnswerKeyMatch[];
}

/**
 * The public-path filter over a whole pinned tree: the one filter every export, every
 * client-side tool and the doc-bridge index apply. On top of the path rules it keeps out
 * every blob whose content is an answer key's or the manifest's, wherever it lies.
 */
export function publicFilter(entries: readonly TreeEntry[], opts: PublicPathOptions = {}): PublicFilter {
  const prepared = prepare(opts);
  const answerKeys: AnswerKeyMatch[] = (opts.answerKeys ?? []).map((key) => ({ key, byName: [], byContent: [] }));
  if (prepared.keys.length === 0) return { reason: (e) => reasonFor(e, prepared), answerKeys };

  const owner = new Map<string, AnswerKeyMatch>();
  for (const e of entries) {
    const key = matchesKey(matchForm(e.path), prepared.keys);
    if (key === undefined) continue;
    const match = answerKeys[prepared.keys.indexOf(key)]!;
    match.byName.push(e.path);
    if (e.type === "blob" && !EMPTY_BLOBS.has(e.oid)) {
      prepared.blobs.set(e.oid, "answer-key");
      if (!owner.has(e.oid)) owner.set(e.oid, match);
    }
  }
  for (const e of entries) {
    const match = owner.get(e.oid);
    if (match && e.type === "blob" && !match.byName.includes(e.path) && matchesKey(matchForm(e.path), prepared.keys) === undefined) match.byContent.push(e.path);
  }
  return { reason: (e) => reasonFor(e, prepared), answerKeys };
}

export function publicEntries(entries: readonly TreeEntry[], opts: PublicPathOptions = {}): TreeEntry[] {
  const filter = publicFilter(entries, opts);
  return entries.filter((e) => filter.reason(e) === undefined);
}
