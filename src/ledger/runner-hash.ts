import { createHash } from "node:crypto";
import { readdir, readFile, stat } from "node:fs/promises";
import { join, relative, sep } from "node:path";

/** Every file under `dir` (recursively), as project-relative POSIX paths; none if `dir` is absent. */
async function filesUnder(projectRoot: string, dir: string, keep: (rel: string) => boolean): Promise<string[]> {
  let entries: string[];
  try {
    entries = await readdir(join(projectRoot, dir), { recursive: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
  const out: string[] = [];
  for (const entry of entries) {
    const abs = join(projectRoot, dir, entry);
    if (!(await stat(abs)).isFile()) continue;
    const rel = relative(projectRoot, abs).split(sep).join("/");
    if (keep(rel)) out.push(rel);
  }
  return out;
}

/** The files whose content defines what the runner does: sources, image build inputs, dependency pins. */
export async function runnerFiles(projectRoot: string): Promise<string[]> {
  const files = [...(await filesUnder(projectRoot, "src", (rel) => rel.endsWith(".ts"))), ...(await filesUnder(projectRoot, "docker", () => true)), "package.json", "package-lock.json"];
  return [...new Set(files)].sort();
}

/**
 * sha256 over the runner's shipped files, sorted by path; each file contributes its path, its
 * length and its bytes, so that moving content between files or renaming one changes the hash.
 * A missing package.json or package-lock.json throws: the hash would not describe a runner.
 */
export async function computeRunnerHash(projectRoot: string): Promise<string> {
  const hash = createHash("sha256");
  for (const rel of await runnerFiles(projectRoot)) {
    const bytes = await readFile(join(projectRoot, rel));
    hash.update(`${rel}\0${bytes.length}\0`);
    hash.update(bytes);
  }
  return hash.digest("hex");
}
