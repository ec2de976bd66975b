import { isAscii } from "node:buffer";
import { createHash } from "node:crypto";
import { UsageError } from "../util/errors.ts";
import { readBlobs, type TreeEntry } from "./git.ts";

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
  /** Normalized-content digests of the answer keys (see `normalizedDigest`). */
  keyDigests: Set<string>;
  /** Blob id → its normalized-content digest, when the tree's contents were read. */
  digests: ReadonlyMap<string, string>;
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
  const digest = o.digests.get(entry.oid);
  if (digest !== undefined && o.keyDigests.has(digest)) return "answer-key";
  if ((entry.size ?? Infinity) > MAX_PUBLIC_BYTES) return "too-large";
  return undefined;
}

function prepare(opts: PublicPathOptions, facts: TreeFacts = NO_FACTS): PreparedOptions {
  const blobs = new Map<string, "answer-key" | "manifest">();
  for (const id of opts.manifestBlobIds ?? []) if (!EMPTY_BLOBS.has(id)) blobs.set(id, "manifest");
  return {
    keys: (opts.answerKeys ?? []).map(matchForm),
    manifestPaths: opts.manifestPaths ?? [],
    blobs,
    keyDigests: new Set(),
    digests: facts.digests,
    excludeInstructionFiles: opts.excludeInstructionFiles ?? false,
  };
}

export interface AnswerKeyMatch {
  /** The key as the manifest spells it. */
  key: string;
  /**
   * Where the key's committed symlinks lead, followed inside the tree at the pin (a symlinked key,
   * a key under a symlinked folder, a symlink inside a key folder): each target is a key too.
   */
  resolvedTo: string[];
  /** Tree paths whose match form is the key's or a resolved target's, or lies under one. */
  byName: string[];
  /** Other tree paths holding the same content as one of those, exactly or once normalized (copies under another name). */
  byContent: string[];
}

export interface PublicFilter {
  /** Why `entry` is kept out, or undefined when the agent (and the doc-bridge index) may see it. */
  reason(entry: TreeEntry): ExclusionReason | undefined;
  /** Per answer key, in manifest order, what it matched in this tree. */
  answerKeys: AnswerKeyMatch[];
}

/**
 * What the filter needs from the tree's blobs, read once by `readTreeFacts`: where each committed
 * symlink points, and the normalized-content digest of each regular blob an export could hold.
 */
export interface TreeFacts {
  /** Symlink path (as in the tree) → the target it stores. */
  links: ReadonlyMap<string, string>;
  /** Blob id → `normalizedDigest` of its bytes (undefined digests are not stored). */
  digests: ReadonlyMap<string, string>;
}

const NO_FACTS: TreeFacts = { links: new Map(), digests: new Map() };

const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * The one normalisation answer-key copies are compared in (docs/export.md): the bytes decoded as
 * UTF-8 (bytes that are not UTF-8 are compared exactly), a leading BOM removed, Unicode NFC, CRLF
 * and lone CR made LF, whitespace at the end of every line removed, newlines at the end removed.
 * Returns the sha256 of the result, or undefined when nothing is left (an empty or blank file
 * holds no answer).
 */
export function normalizedDigest(data: Buffer): string | undefined {
  const ascii = asciiNormalized(data);
  if (ascii !== null) return ascii.length ? createHash("sha256").update("text\0").update(ascii).digest("hex") : undefined;
  let text: string;
  try {
    text = UTF8.decode(data);
  } catch {
    return data.length ? createHash("sha256").update("raw\0").update(data).digest("hex") : undefined;
  }
  const normal = text
    .replace(/^\uFEFF/, "")
    .normalize("NFC")
    .replace(/\r\n?/g, "\n")
    .replace(/[^\S\n]+$/gm, "")
    .replace(/\n+$/, "");
  return normal === "" ? undefined : createHash("sha256").update("text\0").update(normal, "utf8").digest("hex");
}

/** A blank at the end of a line: space, tab, vertical tab or form feed before a line feed (the ASCII of `\s` but LF and CR). */
const BLANK_BEFORE_LF = [" \n", "\t\n", "\v\n", "\f\n"].map((s) => Buffer.from(s, "latin1"));
const isBlankOrLf = (b: number) => b === 0x20 || b === 0x09 || b === 0x0b || b === 0x0c || b === 0x0a;

/**
 * `normalizedDigest`'s normal form of ASCII bytes without a CR (most source files; the string
 * path decodes, normalizes and runs three expressions over each): such bytes decode to
 * themselves, have no BOM and are their own NFC, so only the blanks at the end of each line and
 * the line feeds at the end go. Found with native searches; a file with a blank before a line
 * feed is copied without them byte by byte. Null for any other bytes.
 */
function asciiNormalized(data: Buffer): Buffer | null {
  if (!isAscii(data) || data.indexOf(0x0d) !== -1) return null;
  if (BLANK_BEFORE_LF.every((pair) => data.indexOf(pair) === -1)) {
    let end = data.length;
    while (end > 0 && isBlankOrLf(data[end - 1]!)) end--;
    return data.subarray(0, end);
  }
  const out = Buffer.allocUnsafe(data.length);
  let o = 0;
  let kept = 0; // `out` up to the last byte of the current line that is not a blank
  for (let i = 0; i < data.length; i++) {
    const b = data[i]!;
    if (b === 0x0a) {
      o = kept;
      out[o++] = b;
      kept = o;
    } else {
      out[o++] = b;
      if (!isBlankOrLf(b)) kept = o;
    }
  }
  o = kept;
  while (o > 0 && out[o - 1] === 0x0a) o--;
  return out.subarray(0, o);
}

const isSymlink = (e: TreeEntry) => e.mode === "120000" && e.type === "blob";
const isRegular = (e: TreeEntry) => e.type === "blob" && (e.mode === "100644" || e.mode === "100755");
/** A blob whose normalized digest `readTreeFacts` takes: regular, at most MAX_PUBLIC_BYTES, not empty. */
const digestable = (e: TreeEntry) => isRegular(e) && (e.size ?? Infinity) <= MAX_PUBLIC_BYTES && !EMPTY_BLOBS.has(e.oid);

/**
 * Reads what `publicFilter` needs to resolve answer keys: every symlink's target and the
 * normalized digest of every regular blob of at most MAX_PUBLIC_BYTES (one `git cat-file
 * --batch`). Without answer keys nothing is read.
 */
export async function readTreeFacts(repoDir: string, entries: readonly TreeEntry[], opts: PublicPathOptions): Promise<TreeFacts> {
  if (!opts.answerKeys?.length) return NO_FACTS;
  const links = new Map<string, string>();
  const digests = new Map<string, string>();
  const wanted = entries.filter((e) => isSymlink(e) || digestable(e));
  const unique: TreeEntry[] = [];
  const seen = new Set<string>();
  for (const e of wanted) {
    if (isSymlink(e)) unique.push(e);
    else if (!seen.has(e.oid)) {
      seen.add(e.oid);
      unique.push(e);
    }
  }
  await readBlobs(
    repoDir,
    unique.map((e) => e.oid),
    (i, data) => {
      const e = unique[i]!;
      if (isSymlink(e)) links.set(e.path, data.toString("utf8"));
      else {
        const d = normalizedDigest(data);
        if (d !== undefined) digests.set(e.oid, d);
      }
    },
  );
  return { links, digests };
}

/** Symlinks followed in one resolution before it counts as a loop (Linux's MAXSYMLINKS). */
const MAX_LINK_HOPS = 40;

/**
 * Follows committed symlinks in `path` inside the tree, component by component, the way the
 * kernel would in a checkout. Returns the resolved path, or throws a UsageError when a link is
 * absolute, climbs above the root or loops.
 */
function resolveInTree(path: string, links: ReadonlyMap<string, string>, what: string): string {
  const out: string[] = [];
  let queue = path.split("/");
  let hops = 0;
  while (queue.length) {
    const c = queue.shift()!;
    if (c === "" || c === ".") continue;
    if (c === "..") {
      if (out.length === 0) throw new UsageError(`${what} resolves through '..' above the repository's root; an answer key must resolve inside the tree at the pin: correct the key or the symlink`);
      out.pop();
      continue;
    }
    const here = [...out, c].join("/");
    const target = links.get(matchForm(here));
    if (target === undefined) {
      out.push(c);
      continue;
    }
    if (++hops > MAX_LINK_HOPS) throw new UsageError(`${what} loops: the symlink '${here}' is followed more than ${MAX_LINK_HOPS} times; correct the symlinks or the key`);
    if (target.startsWith("/"))
      throw new UsageError(`${what}: the symlink '${here}' points to the absolute path '${target}', outside the repository; an answer key must resolve inside the tree at the pin`);
    queue = [...target.split("/"), ...queue];
  }
  if (out.length === 0) throw new UsageError(`${what} resolves to the repository's root; name the answer files or folders themselves`);
  return out.join("/");
}

/**
 * The public-path filter over a whole pinned tree: the one filter every export, every
 * client-side tool and the doc-bridge index apply. On top of the path rules it resolves each
 * answer key through the committed symlinks (given `facts`; contract R119) and keeps out every
 * blob whose content is an answer key's or the manifest's, exactly or once normalized
 * (`normalizedDigest`), wherever it lies.
 */
export function publicFilter(entries: readonly TreeEntry[], opts: PublicPathOptions = {}, facts: TreeFacts = NO_FACTS): PublicFilter {
  const prepared = prepare(opts, facts);
  const answerKeys: AnswerKeyMatch[] = (opts.answerKeys ?? []).map((key) => ({ key, resolvedTo: [], byName: [], byContent: [] }));
  if (prepared.keys.length === 0) return { reason: (e) => reasonFor(e, prepared), answerKeys };

  // Links by match form, so that a key spelt in another case still finds its symlink.
  const links = new Map<string, string>();
  const linkPaths: string[] = [];
  for (const [path, target] of facts.links) {
    links.set(matchForm(path), target);
    linkPaths.push(path);
  }
  // Each key's forms: its own, and every target its symlinks (or symlinks inside it) resolve to.
  const ownerOfForm = new Map<string, number>();
  for (const [i, key] of prepared.keys.entries()) {
    const work = [key];
    const what = `answer key '${answerKeys[i]!.key}'`;
    while (work.length) {
      const form = work.pop()!;
      if (ownerOfForm.has(form)) continue;
      ownerOfForm.set(form, i);
      const inside = linkPaths.filter((p) => matchesKey(matchForm(p), [form]) !== undefined);
      const starts = [form, ...inside.map(matchForm)];
      for (const start of starts) {
        const resolved = matchForm(resolveInTree(start, links, start === form ? what : `${what} (its symlink '${start}')`));
        if (resolved !== start && !ownerOfForm.has(resolved) && !answerKeys[i]!.resolvedTo.includes(resolved)) {
          answerKeys[i]!.resolvedTo.push(resolved);
          work.push(resolved);
        }
      }
    }
  }
  prepared.keys = [...ownerOfForm.keys()];

  const owner = new Map<string, AnswerKeyMatch>();
  const digestOwner = new Map<string, AnswerKeyMatch>();
  for (const e of entries) {
    const key = matchesKey(matchForm(e.path), prepared.keys);
    if (key === undefined) continue;
    const match = answerKeys[ownerOfForm.get(key)!]!;
    match.byName.push(e.path);
    if (isRegular(e) && !EMPTY_BLOBS.has(e.oid)) {
      prepared.blobs.set(e.oid, "answer-key");
      if (!owner.has(e.oid)) owner.set(e.oid, match);
      const digest = facts.digests.get(e.oid);
      if (digest !== undefined) {
        prepared.keyDigests.add(digest);
        if (!digestOwner.has(digest)) digestOwner.set(digest, match);
      }
    }
  }
  for (const e of entries) {
    if (e.type !== "blob" || isSymlink(e)) continue;
    const digest = facts.digests.get(e.oid);
    const match = owner.get(e.oid) ?? (digest === undefined ? undefined : digestOwner.get(digest));
    if (match && !match.byName.includes(e.path) && matchesKey(matchForm(e.path), prepared.keys) === undefined) match.byContent.push(e.path);
  }
  return { reason: (e) => reasonFor(e, prepared), answerKeys };
}

/**
 * Lists nothing itself: reads the tree's facts for `entries` (symlink targets, content digests)
 * and builds the filter, the way every production caller must (the export, the dry run and
 * doctor, the doc-bridge index and its preflight).
 */
export async function loadPublicFilter(repoDir: string, entries: readonly TreeEntry[], opts: PublicPathOptions = {}): Promise<PublicFilter> {
  return publicFilter(entries, opts, await readTreeFacts(repoDir, entries, opts));
}

/**
 * The public-path filter and the public blobs' bytes in one read of each blob (the export's
 * pass): what `loadPublicFilter` reads to build the filter is what an export then writes, so it
 * is read once. `candidates` is known before any content is read: every entry the path rules,
 * the answer keys' names (through the committed symlinks) and the keys' and manifest's blob ids
 * keep, sorted by the bytes of their path; only a copy of a key's content elsewhere can still
 * drop one of them. `run` reads every blob once, candidates first in that order, hands each
 * candidate whose content is no key's to `onPublic`, and returns the filter `loadPublicFilter`
 * builds (the same facts, so the same answer-key report).
 */
export interface PublicBlobPass {
  candidates: TreeEntry[];
  /** Each answer key with the entries it names (`byName`), known before any content is read. */
  keysByName: AnswerKeyMatch[];
  run(onPublic: (index: number, data: Buffer) => void): Promise<PublicFilter>;
}

export async function publicBlobPass(repoDir: string, entries: readonly TreeEntry[], opts: PublicPathOptions = {}): Promise<PublicBlobPass> {
  const byPath = (list: TreeEntry[]) => list.sort((a, b) => Buffer.compare(a.rawPath, b.rawPath));
  if (!opts.answerKeys?.length) {
    const filter = publicFilter(entries, opts);
    const candidates = byPath(entries.filter((e) => filter.reason(e) === undefined));
    return {
      candidates,
      keysByName: filter.answerKeys,
      run: async (onPublic) => {
        await readBlobs(
          repoDir,
          candidates.map((e) => e.oid),
          onPublic,
        );
        return filter;
      },
    };
  }
  // The symlinks first: they say what the keys resolve to, hence which blobs are keys.
  const symlinks = entries.filter(isSymlink);
  const links = new Map<string, string>();
  await readBlobs(
    repoDir,
    symlinks.map((e) => e.oid),
    (i, data) => {
      links.set(symlinks[i]!.path, data.toString("utf8"));
    },
  );
  const byName = publicFilter(entries, opts, { links, digests: new Map() });
  const keyPaths = new Set(byName.answerKeys.flatMap((m) => m.byName));
  const digests = new Map<string, string>();
  const unique = (list: TreeEntry[]) => [...new Map(list.map((e) => [e.oid, e])).values()];
  const keys = unique(entries.filter((e) => digestable(e) && keyPaths.has(e.path)));
  await readBlobs(
    repoDir,
    keys.map((e) => e.oid),
    (i, data) => {
      const d = normalizedDigest(data);
      if (d !== undefined) digests.set(keys[i]!.oid, d);
    },
  );
  const keyDigests = new Set(digests.values());
  const candidates = byPath(entries.filter((e) => byName.reason(e) === undefined));
  return {
    candidates,
    keysByName: byName.answerKeys,
    run: async (onPublic) => {
      // Then every other blob `readTreeFacts` reads (a copy of a key may lie anywhere), once.
      const taken = new Set([...candidates.map((e) => e.oid), ...keys.map((e) => e.oid)]);
      const order = [...candidates, ...unique(entries.filter((e) => digestable(e) && !taken.has(e.oid)))];
      await readBlobs(
        repoDir,
        order.map((e) => e.oid),
        (i, data) => {
          const e = order[i]!;
          let d = digests.get(e.oid);
          if (d === undefined && digestable(e)) {
            d = normalizedDigest(data);
            if (d !== undefined) digests.set(e.oid, d);
          }
          if (i < candidates.length && (d === undefined || !keyDigests.has(d))) onPublic(i, data);
        },
      );
      return publicFilter(entries, opts, { links, digests });
    },
  };
}
