import { createHash } from "node:crypto";
import { readdir, readFile, stat } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import { LOCKFILE_NAMES } from "../util/paths.ts";

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

/** The lock file's name in `projectRoot`: package-lock.json in a clone, npm-shrinkwrap.json in the installed package. */
async function lockFileName(projectRoot: string): Promise<string> {
  for (const name of LOCKFILE_NAMES) {
    if (
      await stat(join(projectRoot, name)).then(
        (s) => s.isFile(),
        () => false,
      )
    )
      return name;
  }
  return LOCKFILE_NAMES[0];
}

/** The files whose content defines what the runner does: sources, image build inputs, dependency pins. */
export async function runnerFiles(projectRoot: string): Promise<string[]> {
  const files = [...(await filesUnder(projectRoot, "src", (rel) => rel.endsWith(".ts"))), ...(await filesUnder(projectRoot, "docker", () => true)), "package.json", await lockFileName(projectRoot)];
  return [...new Set(files)].sort();
}

/**
 * sha256 over the runner's shipped files, sorted by path; each file contributes its path, its
 * length and its bytes, so that moving content between files or renaming one changes the hash.
 * The installed package ships the sources it was compiled from and the lock file (as
 * npm-shrinkwrap.json, hashed under the name package-lock.json), so it records the same hash
 * as the clone it was packed from. A missing package.json or lock file throws: the hash would
 * not describe a runner.
 */
export async function computeRunnerHash(projectRoot: string): Promise<string> {
  const hash = createHash("sha256");
  for (const rel of await runnerFiles(projectRoot)) {
    const bytes = await readFile(join(projectRoot, rel));
    const label = (LOCKFILE_NAMES as readonly string[]).includes(rel) ? LOCKFILE_NAMES[0] : rel;
    hash.update(`${label}\0${bytes.length}\0`);
    hash.update(bytes);
  }
  return hash.digest("hex");
}
