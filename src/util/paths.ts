import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, extname, resolve } from "node:path";

/**
 * The project's root folder (where package.json lives), independent of the cwd: the clone, or
 * the installed package, whose compiled dist/ mirrors src/ at the same depth.
 */
export const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The bundled demo study's manifest. */
export const DEMO_MANIFEST = resolve(PROJECT_ROOT, "study", "demo", "manifest.json");

/**
 * How the runner itself runs: ".ts" when the clone's launcher runs the sources through tsx,
 * ".js" when the installed package runs its compiled dist/. A module the runner starts as its
 * own process (the reference doc-bridge server) is started the same way.
 */
export const RUNNER_EXT = extname(fileURLToPath(import.meta.url));

/**
 * The dependency lock file: package-lock.json in a clone; the installed package ships the same
 * bytes as npm-shrinkwrap.json, the only name npm publishes a lock file under (its prepack copies it).
 */
export const LOCKFILE_NAMES = ["package-lock.json", "npm-shrinkwrap.json"] as const;

/** The runner's version, from its package.json. */
export function runnerVersion(): string {
  const { version } = JSON.parse(readFileSync(resolve(PROJECT_ROOT, "package.json"), "utf8")) as { version?: unknown };
  if (typeof version !== "string") throw new Error(`${resolve(PROJECT_ROOT, "package.json")} has no "version"`);
  return version;
}
