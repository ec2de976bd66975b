import { ExitCode, UsageError } from "../util/errors.ts";

/**
 * `study-runner report`: reads a ledger and, when given, its adjudication record (neither is
 * modified) and prints Markdown, JSON or a self-contained HTML page, or writes all three.
 * Reports carry no answer and no verdict text: they are meant to be published.
 */
export interface ReportFlags {
  ledger?: string;
  adjudication?: string;
  manifest?: string;
  format?: "markdown" | "json" | "html" | "inspect";
  outDir?: string;
  /** The same as outDir. */
  out?: string;
  seed?: string;
  effect?: string[];
  private?: boolean;
}

function parseSeed(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(n) || n > 0xffffffff) throw new UsageError(`--seed ${text} is not an integer from 0 to 4294967295; give e.g. --seed 20261201`);
  return n;
}

function parseEffects(texts: string[] | undefined): number[] | undefined {
  return texts?.map((t) => {
    const n = Number(t);
    if (!Number.isFinite(n) || n <= 0 || n > 1) throw new UsageError(`--effect ${t} is not a score difference above 0 and at most 1 (points); give e.g. --effect 0.2`);
    return n;
  });
}

export async function reportCommand(flags: ReportFlags): Promise<number> {
  if (!flags.ledger) throw new UsageError("--ledger PATH is required: the ledger of the run to report");
  const { loadReport, renderJson, writeReportFiles, writePrivateViewer, writeInspectLogs } = await import("../report/write.ts");
  if (flags.out !== undefined && flags.outDir !== undefined && flags.out !== flags.outDir) throw new UsageError("--out and --out-dir name the same folder; give one of them");
  const outDir = flags.outDir ?? flags.out;
  if (flags.format === "inspect") {
    if (flags.private) throw new UsageError("--private writes the pair viewer and --format inspect the Inspect logs; give one of them (both are private)");
    const written = await writeInspectLogs({
      ledger: flags.ledger,
      adjudication: flags.adjudication,
      manifest: flags.manifest,
      seed: parseSeed(flags.seed),
      effects: parseEffects(flags.effect),
      outDir,
    });
    process.stdout.write(
      `${JSON.stringify({ inspect: written.dir, logs: written.logs, view: `inspect view --log-dir ${written.dir}`, note: "private: holds answers and transcripts; mode 600; do not publish" }, null, 2)}\n`,
    );
    return ExitCode.ok;
  }
  if (flags.private) {
    const written = await writePrivateViewer({ ledger: flags.ledger, adjudication: flags.adjudication, manifest: flags.manifest, seed: parseSeed(flags.seed), effects: parseEffects(flags.effect) });
    process.stdout.write(
      `${JSON.stringify({ private: written.path, pairs: written.pairs, attempts: written.attempts, note: "private: holds answers and tool inputs; mode 600; do not publish" }, null, 2)}\n`,
    );
    return ExitCode.ok;
  }
  const report = await loadReport({ ledger: flags.ledger, adjudication: flags.adjudication, manifest: flags.manifest, seed: parseSeed(flags.seed), effects: parseEffects(flags.effect) });
  if (outDir) {
    const files = await writeReportFiles(outDir, report);
    process.stdout.write(`${JSON.stringify(files, null, 2)}\n`);
    return ExitCode.ok;
  }
  if (flags.format === "json") process.stdout.write(renderJson(report));
  else if (flags.format === "html") process.stdout.write((await import("../report/html.ts")).renderHtml(report));
  else process.stdout.write((await import("../report/markdown.ts")).renderMarkdown(report));
  return ExitCode.ok;
}
