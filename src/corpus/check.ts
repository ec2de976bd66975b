import { realpath, stat } from "node:fs/promises";
import type { Manifest } from "../manifest/schema.ts";
import { publicFilter, type AnswerKeyMatch } from "./filter.ts";
import { gitHead, gitStatus, gitTopLevel, hasCommit, lsTree } from "./git.ts";

export interface RootCheck {
  repository: string;
  pin: string;
  root: string;
  /** Number of task sources verified as public files at the pin. */
  sources: number;
  /** What each answer key of this repository keeps out of every export at the pin. */
  answerKeys: AnswerKeyMatch[];
  problems: string[];
}

/**
 * Checks one checkout for a run: it is the top of a git work tree, clean (no changes, no
 * untracked files), HEAD is the pin, and every task's sources are public files at the pin.
 */
export async function checkRoot(manifest: Manifest, repository: string, root: string): Promise<RootCheck> {
  const pin = manifest.repositories[repository]!;
  const result: RootCheck = { repository, pin, root, sources: 0, answerKeys: [], problems: [] };
  const fail = (p: string) => (result.problems.push(`root '${repository}' (${root}): ${p}`), result);

  try {
    if (!(await stat(root)).isDirectory()) return fail("is not a directory");
  } catch {
    return fail("does not exist; pass --root " + repository + "=<path of its checkout>");
  }
  const top = await gitTopLevel(root);
  if (!top) return fail("is not a git checkout");
  if ((await realpath(top)) !== (await realpath(root))) return fail(`is inside the checkout ${top}; pass the top of the checkout`);
  if (!(await hasCommit(root, pin))) return fail(`does not contain the pinned commit ${pin}; fetch it`);

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

  const entries = await lsTree(root, pin);
  const byPath = new Map(entries.map((e) => [e.path, e]));
  const filter = publicFilter(entries, { answerKeys: manifest.answerKeys?.[repository] ?? [] });
  result.answerKeys = filter.answerKeys;
  // A key that names nothing is most likely misspelt, and then the file it meant is public.
  for (const [i, match] of filter.answerKeys.entries()) {
    if (match.byName.length === 0) {
      fail(`answerKeys.${repository}[${i}] '${match.key}' matches no entry at the pin ${pin.slice(0, 12)}; correct the path (it is compared case- and Unicode-insensitively) or remove the key`);
    }
  }
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
