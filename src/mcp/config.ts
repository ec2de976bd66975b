import { isAbsolute, normalize } from "node:path";
import { z } from "zod";
import { git, lsTree, type TreeEntry } from "../corpus/git.ts";

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

export type ConfigResolution = { ok: true /** Its name at the repository root. */; file: string /** The blob at the pin. */; entry: TreeEntry } | { ok: false; reason: string };

const isRegular = (e: TreeEntry) => e.type === "blob" && (e.mode === "100644" || e.mode === "100755");

async function blobText(checkout: string, entry: TreeEntry): Promise<string> {
  return (await git(checkout, ["cat-file", "blob", entry.oid])).toString("utf8");
}

/**
 * Which config the server would load at `pin`, or why there is none. Read from the commit,
 * never from the work tree: a work-tree file can be swapped for a symlink or edited after the
 * checks, the blob at the pin cannot. A candidate that is not a regular file at the pin (a
 * symlink, a folder) is refused rather than skipped, so a link cannot pick the config.
 */
export async function resolveConfigAtPin(checkout: string, pin: string): Promise<ConfigResolution> {
  const top = new Map((await lsTree(checkout, pin, { recursive: false })).map((e) => [e.path, e]));
  for (const file of [...CONFIG_CANDIDATES, "package.json"]) {
    const entry = top.get(file);
    if (!entry) continue;
    if (!isRegular(entry)) return { ok: false, reason: `${file} at the pin ${pin.slice(0, 12)} is not a regular file (mode ${entry.mode}); a config must be an ordinary committed file` };
    if (file !== "package.json") return { ok: true, file, entry };
    let parsed: unknown;
    try {
      parsed = JSON.parse(await blobText(checkout, entry));
    } catch (err) {
      return { ok: false, reason: `no doc-bridge config file, and package.json is not valid JSON (${(err as Error).message})` };
    }
    if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) && PACKAGE_JSON_KEY in parsed) return { ok: true, file, entry };
  }
  return {
    ok: false,
    reason: `no doc-bridge config at the pin ${pin.slice(0, 12)}: none of ${CONFIG_CANDIDATES.join(", ")} exists and package.json has no "${PACKAGE_JSON_KEY}" key`,
  };
}

const relativeInside = z
  .string()
  .min(1)
  .superRefine((p, ctx) => {
    if (isAbsolute(p) || normalize(p).split(/[\\/]/).includes("..")) {
      ctx.addIssue({ code: "custom", message: `index path '${p}' leaves the checkout; refusing (remove "index": the index lives in the runner's index folder)` });
    }
  });

/**
 * The reference server's config. `docs` are globs (`*`, `?`, `**`) over paths of the commit
 * at the pin. `index` is accepted from older configs and never written to: the index lives in
 * the runner's own folder (src/mcp/index-store.ts); a value that leaves the checkout or runs
 * through a symlink is still refused, naming it, since it shows a config written to escape.
 * `handoffs` maps handoff ids to targets. `extraTools` registers more trivial tools, for
 * tests of a server whose tool list differs.
 */
export const ReferenceConfigSchema = z.strictObject({
  docs: z.array(z.string().min(1)).min(1),
  index: relativeInside.optional(),
  handoffs: z.record(z.string(), z.string()).optional(),
  extraTools: z.array(z.string().regex(/^[A-Za-z0-9._-]{1,64}$/)).optional(),
});
export type ReferenceConfig = z.infer<typeof ReferenceConfigSchema>;

/**
 * Refuses an `index` value any of whose leading components is a symlink (or anything but a
 * folder) in the tree at the pin: the shape of the attack that wrote the index outside the
 * checkout through a committed link.
 */
function checkIndexPath(index: string, entries: readonly TreeEntry[], file: string): void {
  const byPath = new Map(entries.map((e) => [e.path, e]));
  const parts = normalize(index)
    .split(/[\\/]/)
    .filter((p) => p !== "" && p !== ".");
  for (let i = 1; i <= parts.length; i++) {
    const prefix = parts.slice(0, i).join("/");
    const entry = byPath.get(prefix);
    if (entry && entry.mode === "120000") {
      throw new Error(`${file}: index path '${index}' runs through the symlink '${prefix}' committed at the pin; refusing (remove "index": the index lives in the runner's index folder)`);
    }
  }
}

/** Loads the config the reference server would use at `pin`; throws with a message naming the file. */
export async function loadReferenceConfig(checkout: string, pin: string): Promise<{ file: string; config: ReferenceConfig }> {
  const found = await resolveConfigAtPin(checkout, pin);
  if (!found.ok) throw new Error(found.reason);
  if (found.file !== "doc-bridge.config.json" && found.file !== "package.json") {
    throw new Error(
      `${found.file} is unsupported by the reference server (it parses only doc-bridge.config.json and the "${PACKAGE_JSON_KEY}" key of package.json); ` +
        "use a JSON config or point the runner at a real doc-bridge engine",
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(await blobText(checkout, found.entry));
  } catch (err) {
    throw new Error(`${found.file} is not valid JSON (${(err as Error).message})`);
  }
  if (found.file === "package.json") raw = (raw as Record<string, unknown>)[PACKAGE_JSON_KEY];
  const parsed = ReferenceConfigSchema.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ");
    throw new Error(`${found.file} is not a valid doc-bridge config: ${issues}`);
  }
  // A committed symlink is a leaf of the recursive tree listing (mode 120000), so any link on the way shows up.
  if (parsed.data.index !== undefined) checkIndexPath(parsed.data.index, await lsTree(checkout, pin), found.file);
  return { file: found.file, config: parsed.data };
}
