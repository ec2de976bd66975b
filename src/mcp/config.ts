import { isAbsolute, normalize } from "node:path";
import { z } from "zod";
import { ObjectReader, treeEntries, type TreeEntry } from "../corpus/git.ts";

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

async function blobText(objects: ObjectReader, entry: TreeEntry): Promise<string> {
  const blob = await objects.read(entry.oid);
  if (blob?.type !== "blob") throw new Error(`blob ${entry.oid} of ${entry.path} is not in the repository`);
  return blob.data.toString("utf8");
}

/** The entries of the tree `name` names (a pin's `<pin>^{tree}`, a folder's id); none when it names no tree. */
async function treeAt(objects: ObjectReader, name: string): Promise<TreeEntry[]> {
  const tree = await objects.read(name);
  return tree?.type === "tree" ? treeEntries(tree.data, tree.oid) : [];
}

/** The top of the tree at `pin`; throws when the checkout does not hold it. */
async function pinnedTree(objects: ObjectReader, checkout: string, pin: string): Promise<TreeEntry[]> {
  const tree = await objects.read(`${pin}^{tree}`);
  if (tree?.type !== "tree") throw new Error(`commit ${pin} is not in the repository at ${checkout}; fetch it first`);
  return treeEntries(tree.data, tree.oid);
}

/** Runs `fn` with `objects`, or with a reader of its own that it closes after. */
async function withObjects<T>(checkout: string, objects: ObjectReader | undefined, fn: (objects: ObjectReader) => Promise<T>): Promise<T> {
  if (objects) return fn(objects);
  const own = new ObjectReader(checkout);
  try {
    return await fn(own);
  } finally {
    own.close();
  }
}

/**
 * Which config the server would load at `pin`, or why there is none. Read from the commit,
 * never from the work tree: a work-tree file can be swapped for a symlink or edited after the
 * checks, the blob at the pin cannot. A candidate that is not a regular file at the pin (a
 * symlink, a folder) is refused rather than skipped, so a link cannot pick the config. Every
 * object comes from one `git cat-file --batch` (`objects`, or one of its own), checked against its id.
 */
export async function resolveConfigAtPin(checkout: string, pin: string, objects?: ObjectReader): Promise<ConfigResolution> {
  return withObjects(checkout, objects, async (reader) => {
    const top = new Map((await pinnedTree(reader, checkout, pin)).map((e) => [e.path, e]));
    for (const file of [...CONFIG_CANDIDATES, "package.json"]) {
      const entry = top.get(file);
      if (!entry) continue;
      if (!isRegular(entry)) return { ok: false, reason: `${file} at the pin ${pin.slice(0, 12)} is not a regular file (mode ${entry.mode}); a config must be an ordinary committed file` };
      if (file !== "package.json") return { ok: true, file, entry };
      let parsed: unknown;
      try {
        parsed = JSON.parse(await blobText(reader, entry));
      } catch (err) {
        return { ok: false, reason: `no doc-bridge config file, and package.json is not valid JSON (${(err as Error).message})` };
      }
      if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) && PACKAGE_JSON_KEY in parsed) return { ok: true, file, entry };
    }
    return {
      ok: false,
      reason: `no doc-bridge config at the pin ${pin.slice(0, 12)}: none of ${CONFIG_CANDIDATES.join(", ")} exists and package.json has no "${PACKAGE_JSON_KEY}" key`,
    };
  });
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
 * checkout through a committed link. Walks the trees on the path from `root` down, one tree read
 * per folder.
 */
async function checkIndexPath(index: string, objects: ObjectReader, root: readonly TreeEntry[], file: string): Promise<void> {
  const parts = normalize(index)
    .split(/[\\/]/)
    .filter((p) => p !== "" && p !== ".");
  let tree = root;
  for (let i = 0; i < parts.length; i++) {
    const entry = tree.find((e) => e.path === parts[i]);
    if (!entry) return;
    if (entry.mode === "120000") {
      throw new Error(
        `${file}: index path '${index}' runs through the symlink '${parts.slice(0, i + 1).join("/")}' committed at the pin; refusing (remove "index": the index lives in the runner's index folder)`,
      );
    }
    if (entry.type !== "tree") return;
    tree = await treeAt(objects, entry.oid);
  }
}

/**
 * Loads the config the reference server would use at `pin`; throws with a message naming the
 * file. Every object it reads comes through `objects` (or one `git cat-file --batch` of its own).
 */
export async function loadReferenceConfig(checkout: string, pin: string, objects?: ObjectReader): Promise<{ file: string; config: ReferenceConfig }> {
  return withObjects(checkout, objects, async (reader) => {
    const found = await resolveConfigAtPin(checkout, pin, reader);
    if (!found.ok) throw new Error(found.reason);
    if (found.file !== "doc-bridge.config.json" && found.file !== "package.json") {
      throw new Error(
        `${found.file} is unsupported by the reference server (it parses only doc-bridge.config.json and the "${PACKAGE_JSON_KEY}" key of package.json); ` +
          "use a JSON config or point the runner at a real doc-bridge engine",
      );
    }
    let raw: unknown;
    try {
      raw = JSON.parse(await blobText(reader, found.entry));
    } catch (err) {
      throw new Error(`${found.file} is not valid JSON (${(err as Error).message})`);
    }
    if (found.file === "package.json") raw = (raw as Record<string, unknown>)[PACKAGE_JSON_KEY];
    const parsed = ReferenceConfigSchema.safeParse(raw);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ");
      throw new Error(`${found.file} is not a valid doc-bridge config: ${issues}`);
    }
    // A committed symlink is an entry of mode 120000 in its folder's tree, so any link on the way shows up.
    if (parsed.data.index !== undefined) await checkIndexPath(parsed.data.index, reader, await pinnedTree(reader, checkout, pin), found.file);
    return { file: found.file, config: parsed.data };
  });
}
