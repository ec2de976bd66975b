/**
 * The reference doc-bridge server as one bundled file, for a clone. A clone runs its TypeScript
 * through tsx, and an engine started as `node --import tsx reference-server.ts` pays tsx's own
 * start (its loader thread, esbuild, the transforms) before the server's: measured 0.57 s to
 * import the server that way against 0.19 s for the same code as one esbuild bundle
 * (docs/performance.md, "doc-bridge"). Every doc-bridge attempt starts a fresh engine, so the
 * clone runs the bundle; the installed package runs the bundle its build made of its compiled
 * dist/ (PACKAGED_ENGINE, below).
 *
 * The bundle is derived from the bytes it is made of, never trusted from an earlier run: its
 * folder is named by the sha256 of every project file the server reaches through relative
 * imports, the lock file (which pins the packages it bundles), the bundler's version and this
 * file (the bundle's options). A changed source is a new folder, made at once; an unchanged one
 * is reused.
 */
import { createHash, randomUUID } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, realpathSync, renameSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { basename, dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { LOCKFILE_NAMES, PROJECT_ROOT } from "../util/paths.ts";

/** The server's source: what a clone bundles (in a clone, also bundle-hash.ts's REFERENCE_SERVER). */
export const REFERENCE_SERVER_SOURCE = fileURLToPath(new URL("./reference-server.ts", import.meta.url));
/** Where a clone keeps its bundles (the tool cache convention of node_modules). */
export const REFERENCE_BUNDLE_CACHE = join(PROJECT_ROOT, "node_modules", ".cache", "study-runner", "reference-engine");
/** The bundle's file name inside its folder. */
export const REFERENCE_BUNDLE_NAME = "reference-server.mjs";

const RELATIVE_IMPORT = /(?:\bfrom|\bimport)\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/g;

function isRegularFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/**
 * `from` and every project file it reaches through relative imports, sorted. `imports` finds them
 * (its first group the relative path, flag `g`): by default every `from "./x"` and `import("./x")`.
 */
export function relativeImportClosure(from: string, imports: RegExp = RELATIVE_IMPORT): string[] {
  const seen = new Set<string>();
  const queue = [from];
  while (queue.length) {
    const file = queue.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const m of readFileSync(file, "utf8").matchAll(imports)) {
      const target = resolve(dirname(file), m[1]!);
      if (isRegularFile(target)) queue.push(target);
    }
  }
  return [...seen].sort();
}

/** The project's lock file: package-lock.json in a clone, npm-shrinkwrap.json in the package. */
export function projectLockFile(root: string = PROJECT_ROOT): string {
  for (const name of LOCKFILE_NAMES) if (isRegularFile(resolve(root, name))) return resolve(root, name);
  return resolve(root, LOCKFILE_NAMES[0]);
}

const sha256 = (bytes: Buffer | string) => createHash("sha256").update(bytes).digest("hex");

/** The part of esbuild's API the bundlers use (esbuild's own types are those of a development dependency). */
export interface Esbuild {
  version: string;
  buildSync(options: Record<string, unknown>): { errors: Array<{ text: string }> };
  build(options: Record<string, unknown> & { plugins?: EsbuildPlugin[] }): Promise<{ errors: Array<{ text: string }> }>;
  transform(code: string, options: Record<string, unknown>): Promise<{ code: string }>;
}

/** An esbuild plugin that supplies some modules' contents. */
interface EsbuildPlugin {
  name: string;
  setup(build: { onLoad(options: { filter: RegExp }, callback: (args: { path: string }) => Promise<{ contents: string; loader: "js" } | undefined>): void }): void;
}

/**
 * The first line of an ES module bundle of CommonJS packages: their code calls require(), which an
 * ES module has not. Not bundled code: its import.meta.url is the bundle's own.
 */
export const BUNDLE_REQUIRE_BANNER = 'import { createRequire as __bundleRequire } from "node:module"; const require = __bundleRequire(import.meta.url);';

/** esbuild, a development dependency of a clone (tsx runs on it); absent from the installed package, whose build made its bundles. */
export function loadEsbuild(): Esbuild {
  try {
    return createRequire(import.meta.url)("esbuild") as Esbuild;
  } catch (err) {
    throw new Error(`bundling needs esbuild, which cannot be loaded (${(err as Error).message}); run \`npm ci\` in ${PROJECT_ROOT}`);
  }
}

/** What to bundle and where: the reference server of this project, unless a test says otherwise. */
export interface BundleTarget {
  /** The entry point. */
  source: string;
  /** The project root: the lock file's folder, and what the hashed paths are relative to. */
  root: string;
  /** The folder the bundles' folders are made in. */
  cache: string;
}

const REFERENCE_TARGET: BundleTarget = { source: REFERENCE_SERVER_SOURCE, root: PROJECT_ROOT, cache: REFERENCE_BUNDLE_CACHE };

/** The server's source relative to a bundle's folder (`<cache>/<key>/`), as a URL path. */
function sourceFromBundle(target: BundleTarget): string {
  return relative(join(target.cache, "key"), target.source).split(sep).join("/");
}

/** The folder name of the bundle made from today's bytes: what it is made of, hashed. */
function bundleKey(target: BundleTarget, esbuildVersion: string): string {
  const files = [...relativeImportClosure(target.source), projectLockFile(target.root)].filter(isRegularFile);
  const lines = files.map((file) => `${sha256(readFileSync(file))}  ${file.slice(target.root.length + 1)}\n`);
  // This file too: how the bundle is made (its options, its entry) is part of what it is.
  // The source's place relative to the bundle too: the bundle names it (import.meta.url).
  return sha256(`esbuild ${esbuildVersion}\nbundler ${sha256(readFileSync(fileURLToPath(import.meta.url)))}\nsource ${sourceFromBundle(target)}\n${lines.join("")}`);
}

/**
 * The server at `source` and everything it imports as one ES module at `outfile`, made by esbuild
 * with the project's packages resolved from `root`. `sourceFromBundle` is the source's place
 * relative to the bundle, as a URL path: the server inside names itself by it.
 */
function writeBundle(esbuild: Esbuild, o: { source: string; root: string; outfile: string; sourceFromBundle: string }): void {
  const result = esbuild.buildSync({
    // The bundle's own entry: run the server's main() with this process's arguments and exit
    // with its code (the server's "am I the entry point" check compares with its source path).
    stdin: {
      contents: `import { main } from ${JSON.stringify(`./${basename(o.source)}`)};\nconst code = await main();\nif (code !== 0) process.exit(code);\n`,
      resolveDir: dirname(o.source),
      sourcefile: "reference-engine-entry.ts",
      loader: "ts",
    },
    outfile: o.outfile,
    absWorkingDir: o.root,
    bundle: true,
    platform: "node",
    format: "esm",
    // Comments and whitespace out (they carry paths), names kept for the engine's stack traces.
    minifyWhitespace: true,
    minifySyntax: true,
    logLevel: "silent",
    // The server names itself by its source (its revision is the sha256 of that file), so the
    // bundle is the same engine revision as the source the runner imports (and builds the
    // demo's indexes with). Every bundled module that reads import.meta.url gets that URL,
    // found relative to the bundle at run time, so the bundle's bytes name no folder.
    define: { "import.meta.url": "__referenceSourceUrl" },
    // The banner is not bundled code (its import.meta.url is the bundle's own). The packages'
    // CommonJS code calls require(), which an ES module bundle does not have.
    banner: {
      js: `${BUNDLE_REQUIRE_BANNER} const __referenceSourceUrl = new URL(${JSON.stringify(o.sourceFromBundle)}, import.meta.url).href;`,
    },
  });
  if (result.errors.length > 0) throw new Error(result.errors.map((e) => e.text).join("; "));
}

/**
 * The bundle of today's sources, made if it does not exist yet (into a fresh folder renamed into
 * place, so a reader never sees half a bundle and two runners making it at once both end with
 * one). Readable by everyone: the engine may run under another uid (src/mcp/engine-sandbox.ts).
 */
export function ensureReferenceBundle(target: BundleTarget = REFERENCE_TARGET): string {
  const esbuild = loadEsbuild();
  const dir = join(target.cache, bundleKey(target, esbuild.version));
  const file = join(dir, REFERENCE_BUNDLE_NAME);
  if (isRegularFile(file)) return file;
  mkdirSync(target.cache, { recursive: true, mode: 0o755 });
  const temp = `${dir}.${process.pid}-${randomUUID()}`;
  mkdirSync(temp, { mode: 0o755 });
  chmodSync(temp, 0o755);
  try {
    writeBundle(esbuild, { source: target.source, root: target.root, outfile: join(temp, REFERENCE_BUNDLE_NAME), sourceFromBundle: sourceFromBundle(target) });
    chmodSync(join(temp, REFERENCE_BUNDLE_NAME), 0o644);
    try {
      renameSync(temp, dir);
    } catch (err) {
      // Another runner made the same bundle first: theirs is the same bytes' bundle.
      if (!existsSync(file)) throw err;
    }
  } catch (err) {
    throw new Error(`the reference doc-bridge engine could not be bundled from ${target.source}: ${(err as Error).message}`);
  } finally {
    rmSync(temp, { recursive: true, force: true });
  }
  return file;
}

/**
 * The installed package's engine: its compiled server bundled into one file beside it
 * (`dist/mcp/reference-engine.mjs`) by the package's build, so that every doc-bridge attempt's
 * engine starts from one module, as a clone's does, and not from the compiled tree's many
 * (0.19-0.21 s of CPU to import against 0.10-0.11 s, docs/performance.md, "The test suite").
 */
export const PACKAGED_ENGINE = fileURLToPath(new URL("./reference-engine.mjs", import.meta.url));

/**
 * Bundles a compiled tree's reference server (`<mcpDir>/reference-server.js`) into
 * `<mcpDir>/reference-engine.mjs`, its PACKAGED_ENGINE, with the packages resolved from `root`:
 * what the package's build (scripts/package.mjs) and the tests' compiled runner do after tsc.
 * The server inside names itself by the compiled file beside it, so its revision is that file's.
 */
export function bundleCompiledServer(mcpDir: string, root: string): string {
  const outfile = join(mcpDir, basename(PACKAGED_ENGINE));
  try {
    writeBundle(loadEsbuild(), { source: join(mcpDir, "reference-server.js"), root, outfile, sourceFromBundle: "./reference-server.js" });
  } catch (err) {
    throw new Error(`the reference doc-bridge engine could not be bundled in ${mcpDir}: ${(err as Error).message}`);
  }
  chmodSync(outfile, 0o644);
  return outfile;
}

/** True for a bundle this module made, or the package's (bundle-hash.ts then hashes the sources it was made from). */
export function isReferenceBundle(path: string): boolean {
  try {
    if (basename(path) === basename(PACKAGED_ENGINE)) return realpathSync(path) === realpathSync(PACKAGED_ENGINE);
    if (basename(path) !== REFERENCE_BUNDLE_NAME) return false;
    return realpathSync(dirname(dirname(path))) === realpathSync(REFERENCE_BUNDLE_CACHE);
  } catch {
    return false;
  }
}
