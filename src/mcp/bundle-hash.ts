import { createHash } from "node:crypto";
import { access, constants, realpath, stat } from "node:fs/promises";
import { basename, delimiter, isAbsolute, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { fileSha256 } from "../image/context.ts";
import { RefusalError } from "../util/errors.ts";
import { PROJECT_ROOT, RUNNER_EXT } from "../util/paths.ts";
import { isReferenceBundle, projectLockFile, relativeImportClosure } from "./reference-bundle.ts";

/**
 * Provenance of the doc-bridge engine: the sha256 of what its command runs, so a ledger says
 * which engine build served the treatment. Defined in docs/doc-bridge.md ("Provenance"):
 *
 * - the executable, `command[0]`, resolved as spawning it resolves it (a bare name through the
 *   runner's PATH, a path against the checkout the engine runs in), symlinks followed;
 * - every later argument that names an existing regular file (a path, absolute or relative to the
 *   checkout, or a file: URL), in argument order: the engine's script, a loader;
 * - when one of those is the bundled reference server (the package's bundle of its compiled
 *   server, or the clone's bundle of the sources, src/mcp/reference-bundle.ts), every project
 *   file the server reaches through relative imports, and the lock file, which pins the packages
 *   it imports (package-lock.json; npm-shrinkwrap.json in the installed package).
 *
 * Each file contributes the line `<sha256 of its bytes>  <label>\n`, where the label is the
 * argument position and file name (`argv[0] node`), or the project-relative path of a reference
 * server file, so the same build installed under another folder hashes the same. The bundle hash
 * is the sha256 of those lines. What another engine's script loads in turn is not hashed: an
 * engine that wants it covered ships as one bundled file or binary.
 */

/** The bundled reference server in the form the runner runs: src/…/reference-server.ts in a clone, dist/…/reference-server.js in the package. */
export const REFERENCE_SERVER = fileURLToPath(new URL(`./reference-server${RUNNER_EXT}`, import.meta.url));

export interface BundleFile {
  label: string;
  path: string;
  sha256: string;
}

export interface EngineBundle {
  bundleHash: string;
  files: BundleFile[];
}

/** The sha256 of each resolved file, read once however many checkouts' commands name it. */
type FileHashes = Map<string, Promise<string>>;

function hashOnce(hashes: FileHashes, path: string): Promise<string> {
  let sha256 = hashes.get(path);
  if (!sha256) hashes.set(path, (sha256 = fileSha256(path)));
  return sha256;
}

async function isRegularFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

async function resolveExecutable(name: string, cwd: string, env: NodeJS.ProcessEnv): Promise<string | undefined> {
  if (name.includes("/")) {
    const path = resolve(cwd, name);
    return (await isRegularFile(path)) ? realpath(path) : undefined;
  }
  for (const dir of (env.PATH ?? "").split(delimiter)) {
    if (!dir) continue;
    const path = resolve(cwd, dir, name);
    if (!(await isRegularFile(path))) continue;
    try {
      await access(path, constants.X_OK);
      return await realpath(path);
    } catch {}
  }
  return undefined;
}

async function argumentFile(arg: string, cwd: string): Promise<string | undefined> {
  let path: string;
  if (arg.startsWith("file:")) {
    try {
      path = fileURLToPath(arg);
    } catch {
      return undefined;
    }
  } else if (arg.startsWith("-") || arg.length === 0) {
    return undefined;
  } else path = isAbsolute(arg) ? arg : resolve(cwd, arg);
  return (await isRegularFile(path)) ? realpath(path) : undefined;
}

/**
 * The bundle of `command` as run with `cwd`; refuses an executable that cannot be found. `hashes`
 * carries the files already hashed for another checkout of the same preflight.
 */
export async function engineBundle(command: readonly string[], cwd: string, env: NodeJS.ProcessEnv = process.env, hashes: FileHashes = new Map()): Promise<EngineBundle> {
  const [exe, ...args] = command;
  if (!exe) throw new RefusalError('the doc-bridge engine command is empty; pass --doc-bridge-command as a JSON array such as ["node","/opt/doc-bridge/dist/cli.js","mcp"]');
  const exePath = await resolveExecutable(exe, cwd, env);
  if (!exePath) throw new RefusalError(`the doc-bridge engine executable ${JSON.stringify(exe)} is not a file${exe.includes("/") ? "" : " on PATH"}; give its absolute path in --doc-bridge-command`);
  const files: BundleFile[] = [{ label: `argv[0] ${basename(exePath)}`, path: exePath, sha256: await hashOnce(hashes, exePath) }];
  let reference = false;
  for (const [i, arg] of args.entries()) {
    const path = await argumentFile(arg, cwd);
    if (!path) continue;
    files.push({ label: `argv[${i + 1}] ${basename(path)}`, path, sha256: await hashOnce(hashes, path) });
    if (path === (await realpath(REFERENCE_SERVER)) || isReferenceBundle(path)) reference = true;
  }
  if (reference) {
    // The server as the runner runs it and every project file it reaches through relative imports.
    for (const path of [...relativeImportClosure(REFERENCE_SERVER), projectLockFile()]) {
      files.push({ label: relative(PROJECT_ROOT, path), path, sha256: await hashOnce(hashes, path) });
    }
  }
  const bundleHash = createHash("sha256")
    .update(files.map((f) => `${f.sha256}  ${f.label}\n`).join(""))
    .digest("hex");
  return { bundleHash, files };
}

/**
 * The ledger's engine provenance of a preflight: the bundle (the same in every checkout, or the
 * run is refused: the two arms of different repositories would be served by different builds)
 * and each checkout's engine revision as its doc.search reported it.
 */
export async function engineProvenance(
  command: readonly string[],
  checkouts: ReadonlyArray<{ repository: string; dir: string; engineRevision: string | undefined }>,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ bundleHash: string; engineRevision: string | null; engineRevisions: Record<string, string | null> }> {
  let first: { repository: string; bundle: EngineBundle } | undefined;
  // Each checkout resolves the command on its own (a relative path names another file in each);
  // a file that resolves to the same path in several is read and hashed once.
  const hashes: FileHashes = new Map();
  for (const c of checkouts) {
    const bundle = await engineBundle(command, c.dir, env, hashes);
    if (!first) first = { repository: c.repository, bundle };
    else if (bundle.bundleHash !== first.bundle.bundleHash) {
      throw new RefusalError(
        `the doc-bridge engine command runs different files in checkout ${first.repository} and ${c.repository} (a path relative to the checkout?); give absolute paths in --doc-bridge-command so every checkout is served by the same build; nothing was charged`,
      );
    }
  }
  if (!first) throw new RefusalError("doc-bridge provenance: no checkout");
  const engineRevisions = Object.fromEntries(checkouts.map((c) => [c.repository, c.engineRevision ?? null]));
  const distinct = new Set(Object.values(engineRevisions));
  return { bundleHash: first.bundle.bundleHash, engineRevision: distinct.size === 1 ? [...distinct][0]! : null, engineRevisions };
}
