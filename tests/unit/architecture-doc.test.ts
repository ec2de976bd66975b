import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

/** The layer table of .dependency-cruiser.cjs (the rules `npm run deps` applies are generated from it). */
const LAYERS = (createRequire(import.meta.url)(join(PROJECT_ROOT, ".dependency-cruiser.cjs")) as { layers: Array<{ layer: string; folders: string[] }> }).layers;
const doc = readFileSync(join(PROJECT_ROOT, "docs", "architecture.md"), "utf8");
const srcFolders = readdirSync(join(PROJECT_ROOT, "src"), { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .map((d) => d.name)
  .sort();

/** The rows of the doc's folder table: `| layer | \`folder/\` | what it owns |`. */
const docRows = [...doc.matchAll(/^\| ([a-z ]+) \| `([a-z-]+)\/` \| (.+) \|$/gm)].map((m) => ({ layer: m[1]!, folder: m[2]!, owns: m[3]! }));

describe("docs/architecture.md, the map of src/", () => {
  it("names every folder under src/, each in one row of its folder table", () => {
    expect(srcFolders.length).toBeGreaterThan(20);
    const rowFolders = docRows.map((r) => r.folder).sort();
    expect(srcFolders.filter((f) => !rowFolders.includes(f))).toEqual([]);
    expect(rowFolders.filter((f) => !srcFolders.includes(f))).toEqual([]);
    expect(new Set(rowFolders).size).toBe(rowFolders.length);
  });

  it("places each folder in the layer the layer table of .dependency-cruiser.cjs gives it", () => {
    const layerOf = new Map(LAYERS.flatMap((l) => l.folders.map((f) => [f, l.layer] as const)));
    expect(docRows.filter((r) => layerOf.get(r.folder) !== r.layer).map((r) => `${r.folder}: doc ${r.layer}, table ${layerOf.get(r.folder)}`)).toEqual([]);
  });

  it("the layer table names every folder under src/ once, and only folders that exist", () => {
    const tableFolders = LAYERS.flatMap((l) => l.folders);
    expect(new Set(tableFolders).size).toBe(tableFolders.length);
    expect(tableFolders.filter((f) => !srcFolders.includes(f))).toEqual([]);
    expect(srcFolders.filter((f) => !tableFolders.includes(f))).toEqual([]);
  });

  it("draws the layers in the table's order, each with the table's folders", () => {
    const picture = doc.slice(doc.indexOf("## The layers"), doc.indexOf("## The folders"));
    LAYERS.forEach(({ layer, folders }, i) => {
      const start = picture.indexOf(` ${i + 1} ${layer} `);
      expect(start, `layer ${i + 1} ${layer} in the picture`).toBeGreaterThan(0);
      const next = i + 1 < LAYERS.length ? picture.indexOf(` ${i + 2} ${LAYERS[i + 1]!.layer} `) : picture.indexOf("```", start);
      const words = picture.slice(start, next).split(/\s+/);
      expect(folders.filter((f) => !words.includes(f))).toEqual([]);
    });
  });

  it("README.md points to it", () => {
    expect(readFileSync(join(PROJECT_ROOT, "README.md"), "utf8")).toContain("docs/architecture.md");
  });
});
