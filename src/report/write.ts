import { mkdir, stat, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { readLedgerInput, loadLedgerManifest } from "../adjudicate/input.ts";
import { readRecord } from "../adjudicate/store.ts";
import { errorMessage, UsageError } from "../util/errors.ts";
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
  let manifestNote: string | undefined;
  try {
    manifest = (await loadLedgerManifest(input.ledger, sources.manifest && resolve(sources.manifest))).manifest;
  } catch (err) {
    if (sources.manifest) throw err;
    manifestNote = errorMessage(err);
  }
  return buildReport({ ledger: input.ledger, ledgerSha256: input.sha256, record, manifest, manifestNote, seed: sources.seed, effects: sources.effects });
}

export function renderJson(report: ReportData): string {
  return `${JSON.stringify(report, null, 2)}\n`;
}

export interface ReportFiles {
  markdown: string;
  json: string;
  html: string;
}

/** Writes report.md, report.json and report.html into `dir` (created if needed); never overwrites. */
export async function writeReportFiles(dir: string, report: ReportData): Promise<ReportFiles> {
  await mkdir(dir, { recursive: true });
  const files: ReportFiles = { markdown: join(resolve(dir), "report.md"), json: join(resolve(dir), "report.json"), html: join(resolve(dir), "report.html") };
  const existing: string[] = [];
  for (const path of Object.values(files)) if (await stat(path).then(() => true, () => false)) existing.push(path);
  if (existing.length) throw new UsageError(`${existing.join(", ")} already exists; a report is never overwritten: choose another --out-dir`);
  await writeFile(files.markdown, renderMarkdown(report), { flag: "wx", mode: 0o644 });
  await writeFile(files.json, renderJson(report), { flag: "wx", mode: 0o644 });
  await writeFile(files.html, renderHtml(report), { flag: "wx", mode: 0o644 });
  return files;
}
