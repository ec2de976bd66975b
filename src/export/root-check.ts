import { realpath, stat } from "node:fs/promises";
import { inspectExport, type ExportInspection, type ExportLimits } from "./export.ts";
import { exportSourceFor, type ManifestSource } from "./options.ts";
import type { Manifest } from "../manifest/schema.ts";
import { UsageError } from "../util/errors.ts";
import { printable } from "../util/printable.ts";
import type { AnswerKeyMatch } from "../corpus/filter.ts";
import { checkPin, gitHead, gitStatus, gitTopLevel } from "../corpus/git.ts";

export interface RootCheck {
  repository: string;
  pin: string;
  root: string;
  /** Number of task sources verified as public files at the pin. */
  sources: number;
  /** What each answer key of this repository keeps out of every export at the pin. */
  answerKeys: AnswerKeyMatch[];
  /** Files and bytes the export of this repository holds (checked against the limits). */
  exportFiles: number;
  exportBytes: number;
  problems: string[];
}

/** What the preflight checks an export against: the run's limits and where its exports go. */
export interface ExportCheckOptions {
  limits?: ExportLimits;
  parentDir?: string;
}

/**
 * One problem per answer key of `repository` that matches no entry at the pin: a key that names
 * nothing is most likely misspelt, and then the file it meant is public. The dry run, the run's
 * preflight and `export` refuse the same keys with the same words.
 */
export function unmatchedAnswerKeys(repository: string, pin: string, matches: readonly AnswerKeyMatch[]): string[] {
  return matches.flatMap((match, i) =>
    match.byName.length === 0
      ? [
          `answerKeys.${repository}[${i}] '${printable(match.key)}' matches no entry at the pin ${pin.slice(0, 12)}; correct the path (it is compared case- and Unicode-insensitively) or remove the key`,
        ]
      : [],
  );
}

/**
 * Checks one checkout for a run: it is the top of a git work tree, clean (no changes, no
 * untracked files), HEAD is the pin (one pin rule, contract R124), and the export's file list,
 * computed once here with the export's own code, holds every task's sources and stays inside
 * every limit (contract R121).
 */
export async function checkRoot(loaded: ManifestSource & { manifest: Manifest }, repository: string, root: string, o: ExportCheckOptions = {}): Promise<RootCheck> {
  const { manifest } = loaded;
  const pin = manifest.repositories[repository]!;
  const result: RootCheck = { repository, pin, root, sources: 0, answerKeys: [], exportFiles: 0, exportBytes: 0, problems: [] };
  const fail = (p: string) => (result.problems.push(`root '${repository}' (${printable(root)}): ${p}`), result);

  try {
    if (!(await stat(root)).isDirectory()) return fail("is not a directory");
  } catch {
    return fail("does not exist; pass --root " + repository + "=<path of its checkout>");
  }
  const top = await gitTopLevel(root);
  if (!top) return fail("is not a git checkout");
  if ((await realpath(top)) !== (await realpath(root))) return fail(`is inside the checkout ${top}; pass the top of the checkout`);
  const wrongPin = await checkPin(root, pin);
  if (wrongPin) return fail(wrongPin);

  const head = await gitHead(root);
  if (head !== pin) fail(`HEAD is ${head}, not the pin ${pin}; run \`git checkout ${pin}\` there`);
  const dirty = await gitStatus(root);
  if (dirty.length > 0) {
    const shown = dirty
      .slice(0, 3)
      .map((l) => l.trim())
      .join(", ");
    fail(`checkout is not clean (${dirty.length} change${dirty.length > 1 ? "s" : ""}: ${shown}${dirty.length > 3 ? ", …" : ""}); commit, stash or remove them`);
  }

  let inspection: ExportInspection;
  try {
    inspection = await inspectExport({ ...(await exportSourceFor(loaded, repository, root)), ...o }, { repository });
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    for (const p of err.problems.length ? err.problems : [err.message]) fail(p);
    return result;
  }
  const { plan, entries, filter } = inspection;
  result.answerKeys = plan.answerKeys;
  result.exportFiles = plan.files.length;
  result.exportBytes = plan.files.reduce((n, f) => n + f.size, 0);
  for (const p of unmatchedAnswerKeys(repository, pin, plan.answerKeys)) fail(p);
  const byPath = new Map(entries.map((e) => [e.path, e]));
  for (const [i, task] of manifest.tasks.entries()) {
    if (task.repository !== repository) continue;
    for (const [j, source] of task.sources.entries()) {
      const entry = byPath.get(source);
      const where = `tasks[${i}].sources[${j}] '${source}'`;
      if (!entry) {
        fail(`${where} does not exist at the pin ${pin.slice(0, 12)}`);
        continue;
      }
      const reason = filter.reason(entry);
      if (reason) fail(`${where} is not a public file at the pin (${reason}); the agent could never read it`);
      else result.sources++;
    }
  }
  return result;
}
