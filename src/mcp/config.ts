import { readFile, stat } from "node:fs/promises";
import { isAbsolute, join, normalize } from "node:path";
import { z } from "zod";

/**
 * The doc-bridge server's own config discovery order (contract R14): the first file that exists wins; `package.json` counts only when it has a
 * `docBridge` key.
 */
export const CONFIG_CANDIDATES = [
  "doc-bridge.config.ts",
  "doc-bridge.config.mts",
  "doc-bridge.config.js",
  "doc-bridge.config.mjs",
  "doc-bridge.config.json",
  "doc-bridge.config.yaml",
  "doc-bridge.config.yml",
] as const;

export const PACKAGE_JSON_KEY = "docBridge";

export type ConfigResolution =
  | { ok: true; /** Absolute path of the config file. */ path: string; /** Its name in the checkout. */ file: string }
  | { ok: false; reason: string };

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/** Which config the server would load in `checkout`, or why there is none. */
export async function resolveConfigPath(checkout: string): Promise<ConfigResolution> {
  for (const file of CONFIG_CANDIDATES) {
    const path = join(checkout, file);
    if (await isFile(path)) return { ok: true, path, file };
  }
  const pkg = join(checkout, "package.json");
  if (await isFile(pkg)) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(await readFile(pkg, "utf8"));
    } catch (err) {
      return { ok: false, reason: `no doc-bridge config file, and package.json is not valid JSON (${(err as Error).message})` };
    }
    if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) && PACKAGE_JSON_KEY in parsed) {
      return { ok: true, path: pkg, file: "package.json" };
    }
  }
  return {
    ok: false,
    reason: `no doc-bridge config: none of ${CONFIG_CANDIDATES.join(", ")} exists and package.json has no "${PACKAGE_JSON_KEY}" key`,
  };
}

const relativeInside = z
  .string()
  .min(1)
  .refine((p) => !isAbsolute(p) && !normalize(p).split(/[\\/]/).includes(".."), "must be a relative path inside the checkout");

/**
 * The reference server's config. `docs` are globs (`*`, `?`, `**`) over paths of the
 * commit at HEAD; `index` is where the index is written (keep it git-ignored, or the
 * clean-checkout check fails). `handoffs` maps handoff ids to targets. `extraTools`
 * registers more trivial tools, for tests of a server whose tool list differs.
 */
export const ReferenceConfigSchema = z.strictObject({
  docs: z.array(z.string().min(1)).min(1),
  index: relativeInside.default(".doc-bridge/index.json"),
  handoffs: z.record(z.string(), z.string()).optional(),
  extraTools: z.array(z.string().regex(/^[A-Za-z0-9._-]{1,64}$/)).optional(),
});
export type ReferenceConfig = z.infer<typeof ReferenceConfigSchema>;

/** Loads the config the reference server would use; throws with a message naming the file. */
export async function loadReferenceConfig(checkout: string): Promise<{ file: string; config: ReferenceConfig }> {
  const found = await resolveConfigPath(checkout);
  if (!found.ok) throw new Error(found.reason);
  if (found.file !== "doc-bridge.config.json" && found.file !== "package.json") {
    throw new Error(
      `${found.file} is unsupported by the reference server (it parses only doc-bridge.config.json and the "${PACKAGE_JSON_KEY}" key of package.json); ` +
        "use a JSON config or point the runner at a real doc-bridge engine",
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(found.path, "utf8"));
  } catch (err) {
    throw new Error(`${found.file} is not valid JSON (${(err as Error).message})`);
  }
  if (found.file === "package.json") raw = (raw as Record<string, unknown>)[PACKAGE_JSON_KEY];
  const parsed = ReferenceConfigSchema.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ");
    throw new Error(`${found.file} is not a valid doc-bridge config: ${issues}`);
  }
  return { file: found.file, config: parsed.data };
}
