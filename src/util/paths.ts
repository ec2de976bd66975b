import { fileURLToPath } from "node:url";
import { dirname, resolve } from "node:path";

/** The project's root folder (where package.json lives), independent of the cwd. */
export const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The bundled demo study's manifest. */
export const DEMO_MANIFEST = resolve(PROJECT_ROOT, "study", "demo", "manifest.json");
