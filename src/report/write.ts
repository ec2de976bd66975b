import { randomBytes } from "node:crypto";
import { link, mkdir, open, realpath, rm, stat, unlink } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import { fsyncDirectory } from "../util/atomic-file.ts";
import { printable } from "../util/printable.ts";
import { createPrivateFile } from "../ledger/store.ts";
import { collectEvidence } from "../ledger/evidence.ts";
import { readTranscriptFile, sha256Hex, transcriptLines } from "../ledger/transcripts.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { renderViewer } from "./viewer.ts";
import { buildInspectLogs } from "./inspect.ts";
import { readLedgerInput, loadLedgerManifest } from "../adjudicate/input.ts";
import { readRecord } from "../adjudicate/store.ts";
import { errorMessage, EvidenceError, FaultError, UsageError } from "../util/errors.ts";
import type { Ledger } from "../ledger/schema.ts";
import { buildReport, type ReportData } from "./build.ts";
import { renderHtml } from "./html.ts";
import { renderMarkdown } from "./markdown.ts";

export interface ReportSources {
  ledger: string;
  adjudication?: string;
  /** Default: the path the ledger records; a flag that fails is an error, a default that fails is a gap. */
  manifest?: string;
  seed?: number;
  effects?: readonly number[];
}

/** Reads the ledger, the record and the manifest, checks that they belong together, and builds the report. */
export async function loadReport(sources: ReportSources): Promise<ReportData> {
  const input = await readLedgerInput(resolve(sources.ledger));
  const record = sources.adjudication ? await readRecord(resolve(sources.adjudication)) : null;
  let manifest = null;
  let manifestPath: string | null = null;
  let manifestNote: string | undefined;
  try {
    const loaded = await loadLedgerManifest(input.ledger, sources.manifest && resolve(sources.manifest));
    manifest = loaded.manifest;
    manifestPath = loaded.path;
  } catch (err) {
    if (sources.manifest) throw err;
    manifestNote = errorMessage(err);
  }
  const report = buildReport({ ledger: input.ledger, ledgerSha256: input.sha256, record, manifest, manifestNote, seed: sources.seed, effects: sources.effects });
  // The commitment to the private files (contract R158); the ledger's bytes are the ones just read.
  const { evidence, problems } = await collectEvidence({ ledger: resolve(sources.ledger), manifest: manifestPath, adjudication: sources.adjudication ? resolve(sources.adjudication) : null });
  if (problems.length) {
    const lines = problems.map((p) => `${p} (the report's evidence digest covers the private files as the runner wrote them; remove what it did not write, then \`study-runner ledger verify\`)`);
    throw new EvidenceError(lines.join("\n"), lines);
  }
  const ledgerEntry = evidence.files.find((f) => f.name === "ledger");
  if (ledgerEntry?.sha256 !== input.sha256) throw new UsageError(`the ledger ${sources.ledger} changed while the report was made; make it again`);
  return { ...report, evidence };
}

/** `<ledger>.pairs.html`: beside the ledger, as private as it. */
export const viewerPath = (ledgerRealPath: string) => `${ledgerRealPath}.pairs.html`;

/** The ledger's real path (links resolved), or the path as given when it cannot be resolved. */
const ledgerRealPath = (sources: ReportSources) => realpath(resolve(sources.ledger)).catch(() => resolve(sources.ledger));

const exists = (path: string) =>
  stat(path).then(
    () => true,
    () => false,
  );

/** The corpus checkouts of the run: no private file is written inside one. */
const checkoutRoots = (ledger: Ledger) => ledger.corpus.flatMap((c) => (c.root ? [c.root] : []));

/**
 * What the private files show besides the ledger: the report, the adjudication record, and each
 * kept transcript whose bytes match the ledger's hash (observation index -> lines).
 */
async function readPrivateParts(sources: ReportSources, ledgerPath: string, ledger: Ledger) {
  const report = await loadReport(sources);
  const record = sources.adjudication ? await readRecord(resolve(sources.adjudication)) : null;
  const transcripts = new Map<number, string[]>();
  for (const o of ledger.observations) {
    const file = await readTranscriptFile(ledgerPath, o.index);
    if (file.kind === "file" && o.transcriptSha256 === sha256Hex(file.bytes)) transcripts.set(o.index, transcriptLines(file.bytes));
  }
  return { report, record, transcripts };
}

/**
 * Writes the private pair viewer beside the ledger: created exclusively, mode 600, refused inside
 * a checkout or the project. A transcript whose bytes do not match the ledger's hash is not
 * shown (the viewer says so); `ledger verify` says why.
 */
export async function writePrivateViewer(sources: ReportSources): Promise<{ path: string; pairs: number; attempts: number }> {
  const ledgerPath = await ledgerRealPath(sources);
  const input = await readLedgerInput(ledgerPath);
  const { report, record, transcripts } = await readPrivateParts(sources, ledgerPath, input.ledger);
  const html = renderViewer({ report, ledger: input.ledger, record, transcripts });
  const path = viewerPath(ledgerPath);
  if (await exists(path)) throw new UsageError(`${path} already exists; the pair viewer is never overwritten: remove it first (it is private: rm, do not publish)`);
  const real = await createPrivateFile(path, html, { checkouts: checkoutRoots(input.ledger), projectRoot: PROJECT_ROOT }, "pair viewer");
  const pairs = new Set(input.ledger.observations.map((o) => `${o.task}\0${o.repetition}`)).size;
  return { path: real, pairs, attempts: input.ledger.observations.length };
}

/** `<ledger>.inspect/`: the default folder of the Inspect logs, beside the ledger. */
export const inspectDir = (ledgerRealPath: string) => `${ledgerRealPath}.inspect`;

/**
 * Writes the study as Inspect eval logs (src/report/inspect.ts), one `.json` per arm, into
 * `outDir` (default: beside the ledger). They hold answers and transcripts, so each is a private
 * file like the pair viewer: created exclusively, mode 600, refused inside a checkout or the
 * project; the folder is created mode 700. The questions come from the manifest, which must be
 * the one the run used.
 */
export async function writeInspectLogs(sources: ReportSources & { outDir?: string }): Promise<{ dir: string; logs: Array<{ arm: string; path: string; samples: number }> }> {
  const ledgerPath = await ledgerRealPath(sources);
  const input = await readLedgerInput(ledgerPath);
  const { manifest } = await loadLedgerManifest(input.ledger, sources.manifest && resolve(sources.manifest)).catch((err: unknown) => {
    throw new UsageError(`--format inspect takes each sample's question from the manifest the run used: ${errorMessage(err)}`);
  });
  const { report, record, transcripts } = await readPrivateParts(sources, ledgerPath, input.ledger);
  const logs = buildInspectLogs({ report, ledger: input.ledger, ledgerFileSha256: input.sha256, record, manifest, transcripts });
  const dir = resolve(sources.outDir ?? inspectDir(ledgerPath));
  const flag = sources.outDir ? "--out-dir" : "the default folder beside the ledger";
  // A folder this call creates is removed again when a log is refused: nothing is left inside a checkout or the project.
  const created = await mkdir(dir, { recursive: true, mode: 0o700 });
  const checkouts = checkoutRoots(input.ledger);
  const written: Array<{ arm: string; path: string; samples: number }> = [];
  try {
    for (const l of logs) {
      const path = await createPrivateFile(join(dir, l.name), `${JSON.stringify(l.log)}\n`, { checkouts, projectRoot: PROJECT_ROOT }, "Inspect log");
      written.push({ arm: l.arm, path, samples: (l.log.samples as unknown[]).length });
    }
  } catch (err) {
    if (created) await rm(created, { recursive: true, force: true });
    if (!(err instanceof UsageError)) throw err;
    // The shared check names the ledger's --output flag; here the folder is --out-dir's or the default.
    const problems = err.problems.map((p) => `${p.replaceAll("--output ", "")} (the Inspect logs' folder: ${flag})`);
    throw new UsageError(problems.join("\n"), problems);
  }
  return { dir, logs: written };
}

export function renderJson(report: ReportData): string {
  return `${JSON.stringify(report, null, 2)}\n`;
}

export interface ReportFiles {
  markdown: string;
  json: string;
  html: string;
}

/**
 * Writes report.md, report.json and report.html into `dir` (created if needed), all of them or
 * none (contract R188): each is rendered, then written to a temporary file in `dir` (created
 * exclusively, fsynced); only when the three are on disk is each linked to its name (a link never
 * replaces a file, so a report is never overwritten) and the folder fsynced. When anything fails
 * (a full disk, a file size limit, a name taken meanwhile) every temporary file and every name
 * this call made is removed again, with the folder when this call created it, and the error says
 * that no report was written.
 */
export async function writeReportFiles(dir: string, report: ReportData): Promise<ReportFiles> {
  const root = resolve(dir);
  const files: ReportFiles = { markdown: join(root, "report.md"), json: join(root, "report.json"), html: join(root, "report.html") };
  const existing: string[] = [];
  for (const path of Object.values(files)) if (await exists(path)) existing.push(path);
  if (existing.length) throw new UsageError(`${existing.join(", ")} already exists; a report is never overwritten: choose another --out-dir`);
  const contents: Array<[string, string]> = [
    [files.markdown, renderMarkdown(report)],
    [files.json, renderJson(report)],
    [files.html, renderHtml(report)],
  ];
  const made: string[] = [];
  let created: string | undefined;
  try {
    created = await mkdir(root, { recursive: true });
    const temps: Array<[string, string]> = [];
    for (const [path, text] of contents) {
      const temp = join(root, `.${basename(path)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
      const handle = await open(temp, "wx", 0o644);
      made.push(temp);
      try {
        await handle.writeFile(text);
        await handle.sync();
      } finally {
        await handle.close();
      }
      temps.push([temp, path]);
    }
    for (const [temp, path] of temps) {
      await link(temp, path);
      made.push(path);
    }
    for (const [temp] of temps) await unlink(temp);
    await fsyncDirectory(root);
    return files;
  } catch (err) {
    await Promise.all(made.map((path) => unlink(path).catch(() => undefined)));
    if (created) await rm(created, { recursive: true, force: true });
    if ((err as NodeJS.ErrnoException).code === "EEXIST")
      throw new UsageError(`${printable(root)}: another report was written there meanwhile; a report is never overwritten: choose another --out-dir`);
    throw new FaultError(
      `the report was not written to ${printable(root)}: ${errorMessage(err)}; nothing of it is left there (no report.md, report.json or report.html). ` +
        `The ledger and the adjudication record were only read. Make room (free space, or raise the file size limit) and make the report again`,
    );
  }
}
