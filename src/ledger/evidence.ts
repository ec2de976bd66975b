import { createHash } from "node:crypto";
import { join } from "node:path";
import { canonicalJson } from "../transcript/content.ts";
import { readEvidenceFile, TRANSCRIPT_MAX_BYTES, transcriptDir, transcriptNames } from "./transcripts.ts";

/**
 * The public report's commitment to the private evidence (contract R158, docs/report.md,
 * "Evidence digest"): a Merkle root over the sha256 of every private file a report is made from
 * (the ledger, every transcript beside it, the manifest, the adjudication record and its
 * transcripts). The report prints the root and each file's role name and hash, never a path or a
 * byte of the files; `ledger verify --report` recomputes them from the files and names each file
 * that changed since the report was written.
 */

export const EVIDENCE_ALGORITHM = "sha256-merkle-v1";

export interface EvidenceFile {
  /** The file's role, never its path: `ledger`, `manifest`, `adjudication`, `ledger.transcripts/0000.jsonl`, `adjudication.transcripts/0000.jsonl`. */
  name: string;
  sha256: string;
}

export interface Evidence {
  algorithm: typeof EVIDENCE_ALGORITHM;
  /** The Merkle root over `files`, sorted by name. */
  root: string;
  files: EvidenceFile[];
}

export interface EvidenceSources {
  ledger: string;
  /** The manifest the report read (its hash already checked against the ledger), or null when it could not be read. */
  manifest: string | null;
  adjudication: string | null;
}

const sha256 = (bytes: Buffer | string) => createHash("sha256").update(bytes).digest();

/**
 * RFC 6962's tree shape with sha256: a leaf is sha256(0x00 ‖ name ‖ 0x00 ‖ hex sha256 of the
 * file), an inner node sha256(0x01 ‖ left ‖ right); the leaves are sorted by name and an odd node
 * at the end of a level is carried up unchanged. The root of no files is sha256 of nothing.
 */
export function merkleRoot(files: readonly EvidenceFile[]): string {
  let level = [...files]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((f) => sha256(Buffer.concat([Buffer.from([0]), Buffer.from(f.name, "utf8"), Buffer.from([0]), Buffer.from(f.sha256, "ascii")])));
  if (level.length === 0) return sha256(Buffer.alloc(0)).toString("hex");
  while (level.length > 1) {
    const next: Buffer[] = [];
    for (let i = 0; i < level.length; i += 2) next.push(i + 1 < level.length ? sha256(Buffer.concat([Buffer.from([1]), level[i]!, level[i + 1]!])) : level[i]!);
    level = next;
  }
  return level[0]!.toString("hex");
}

/** The digest of the private files as they are now, and every file that could not be read as one (named). */
export interface CollectedEvidence {
  evidence: Evidence;
  problems: string[];
}

/**
 * One private file's sha256, read with the evidence reader (readEvidenceFile). The ledger, the
 * manifest and the record are the paths the user gave (a link to them is followed); a transcript
 * is read without following a link and within the transcript bound.
 */
async function hashFile(path: string, transcript: boolean, problems: string[]): Promise<string | null> {
  const read = await readEvidenceFile(path, transcript ? { maxBytes: TRANSCRIPT_MAX_BYTES } : { maxBytes: Number.MAX_SAFE_INTEGER, followLinks: true });
  if (read.kind === "file") return createHash("sha256").update(read.bytes).digest("hex");
  problems.push(`${path}: ${read.kind === "missing" ? "is missing" : read.problem}`);
  return null;
}

/** Every transcript of `<privateFile>.transcripts/`, by name; none when the folder does not exist. */
async function transcriptFiles(privateFile: string, role: string, problems: string[]): Promise<EvidenceFile[]> {
  const dir = transcriptDir(privateFile);
  const out: EvidenceFile[] = [];
  const listed = await transcriptNames(privateFile);
  problems.push(...listed.problems);
  for (const name of listed.names) {
    const sha256 = await hashFile(join(dir, name), true, problems);
    if (sha256 !== null) out.push({ name: `${role}.transcripts/${name}`, sha256 });
  }
  return out;
}

/**
 * The digest of the private files as they are now. A file that cannot be read as evidence (not a
 * regular file, a link in a transcripts folder, above the bound, a name the runner never writes)
 * is left out of the digest and named in `problems`: a digest over it would not be the evidence.
 */
export async function collectEvidence(sources: EvidenceSources): Promise<CollectedEvidence> {
  const problems: string[] = [];
  const files: EvidenceFile[] = [];
  const add = async (name: string, path: string) => {
    const sha256 = await hashFile(path, false, problems);
    if (sha256 !== null) files.push({ name, sha256 });
  };
  await add("ledger", sources.ledger);
  files.push(...(await transcriptFiles(sources.ledger, "ledger", problems)));
  if (sources.manifest !== null) await add("manifest", sources.manifest);
  if (sources.adjudication !== null) {
    await add("adjudication", sources.adjudication);
    files.push(...(await transcriptFiles(sources.adjudication, "adjudication", problems)));
  }
  files.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { evidence: { algorithm: EVIDENCE_ALGORITHM, root: merkleRoot(files), files }, problems };
}

/**
 * What differs between the evidence a report committed to and the files now: one line per file
 * that changed, went missing or was added, naming it. Empty when the roots agree.
 */
export function compareEvidence(published: Evidence, now: Evidence): string[] {
  if (published.root === now.root && published.algorithm === now.algorithm) return [];
  const before = new Map(published.files.map((f) => [f.name, f.sha256]));
  const after = new Map(now.files.map((f) => [f.name, f.sha256]));
  const out: string[] = [];
  for (const [name, hash] of before) {
    const current = after.get(name);
    if (current === undefined) out.push(`${name}: the report committed to it (sha256 ${hash}), but it is not there now`);
    else if (current !== hash) out.push(`${name}: changed since the report was written (sha256 ${hash} then, ${current} now)`);
  }
  for (const [name, hash] of after) if (!before.has(name)) out.push(`${name}: was not part of the report's evidence (sha256 ${hash}); it was added since, or the report was made without it`);
  if (out.length === 0)
    out.push(`evidence.root: the report gives ${published.root}, its own file list gives ${merkleRoot(published.files)}, the files give ${now.root} (the report's digest was edited)`);
  return out;
}

/**
 * The anchor published before the report (contract R177): the digest of a study ledger's settled
 * state after its first `count` observations, which the run prints each time the settled prefix
 * grows (on stderr and in its summary). The same Merkle tree as the report's digest, over leaves
 * that the final files still hold: `run` (the run id and protocol hash), then for each of the
 * first `count` observations its entry (`observations/0000`, the sha256 of its canonical JSON)
 * and its transcript (`ledger.transcripts/0000.jsonl`, the file's sha256). An observation never
 * changes once settled, so `ledger verify --digest` recomputes every prefix from the files and
 * finds the state a digest was printed at.
 */
export function settledStateDigest(
  ledger: { runId: string; protocol: { protocolHash: string }; observations: readonly object[] },
  count: number,
  transcriptSha256: (index: number) => string | undefined,
): string {
  const files: EvidenceFile[] = [{ name: "run", sha256: sha256(canonicalJson({ runId: ledger.runId, protocolHash: ledger.protocol.protocolHash })).toString("hex") }];
  for (let i = 0; i < count; i++) {
    const stem = String(i).padStart(4, "0");
    files.push({ name: `observations/${stem}`, sha256: sha256(canonicalJson(ledger.observations[i])).toString("hex") });
    const t = transcriptSha256(i);
    if (t !== undefined) files.push({ name: `ledger.transcripts/${stem}.jsonl`, sha256: t });
  }
  return merkleRoot(files);
}

/** How many observations from the first on are settled: the states a run prints a digest for. */
export function settledPrefix(observations: ReadonlyArray<{ phase: string }>): number {
  let n = 0;
  while (n < observations.length && observations[n]!.phase === "settled") n++;
  return n;
}

/** The digests a run printed, one per settled state (contract R177). */
export interface SettledDigest {
  /** The state after this many observations, from the first on, were settled. */
  observations: number;
  digest: string;
}

/**
 * Prints the digest of each settled state once, after the ledger holding it was written: called
 * after every write, it adds one line per observation the settled prefix grew by.
 */
export class SettledAnchors {
  readonly printed: SettledDigest[] = [];

  constructor(private readonly note: (line: string) => void) {}

  after(ledger: { runId: string; protocol: { protocolHash: string }; observations: ReadonlyArray<{ phase: string; transcriptSha256?: string }> }): void {
    const k = settledPrefix(ledger.observations);
    for (let n = (this.printed.at(-1)?.observations ?? 0) + 1; n <= k; n++) {
      const digest = settledStateDigest(ledger, n, (i) => ledger.observations[i]!.transcriptSha256);
      this.printed.push({ observations: n, digest });
      this.note(`evidence digest after observation ${n - 1} settled: ${digest} (\`study-runner ledger verify LEDGER --digest ${digest}\` tells whether the files changed since)`);
    }
  }
}
