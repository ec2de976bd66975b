/**
 * The instruction files an attempt records include every file the CLI inlines through `@` imports,
 * by the rules the version's calibration profile measured (contract R129, R265).
 */
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { instructionFilesWithImports, resolveImport } from "../../src/corpus/imports.ts";
import { activeProfile } from "../../src/profile/load.ts";

/** The pin's measured import rules (its bundled profile). */
const pinRules = () => activeProfile().imports.plain;

async function exportOf(files: Record<string, string>): Promise<{ dir: string; paths: string[] }> {
  const dir = await mkdtemp(join(tmpdir(), "sr-imports-"));
  for (const [path, text] of Object.entries(files)) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  return { dir, paths: Object.keys(files) };
}

describe("instruction files with their @ imports", () => {
  // contract: R129
  it("records a CLAUDE.md's relative, /workspace-absolute and nested imports up to the measured depth, and nothing outside the working folder", async () => {
    const { dir, paths } = await exportOf({
      "CLAUDE.md": "# Notes\n@docs/style.md and @/workspace/docs/abs.md\n@chain/l1.md\n@/home/agent/x.md @~/y.md @../up.md @docs/missing.md\n",
      "docs/style.md": "style\n",
      "docs/abs.md": "abs\n",
      "chain/l1.md": "@l2.md\n",
      "chain/l2.md": "@l3.md\n",
      "chain/l3.md": "@l4.md\n",
      "chain/l4.md": "@l5.md\n",
      "chain/l5.md": "too deep\n",
      "src/main.js": "// @docs/not-an-instruction-file\n",
    });
    try {
      expect(pinRules().maxHops).toBe(4);
      expect(await instructionFilesWithImports(dir, paths, pinRules())).toEqual(["CLAUDE.md", "chain/l1.md", "chain/l2.md", "chain/l3.md", "chain/l4.md", "docs/abs.md", "docs/style.md"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  // contract: R129
  it("follows CLAUDE.local.md's imports too, reads no link, and resolves each path inside the working folder or not at all", async () => {
    const { dir, paths } = await exportOf({ "CLAUDE.local.md": "@notes/a.md @link.md\n", "notes/a.md": "a\n" });
    try {
      await symlink("/etc/hostname", join(dir, "link.md"));
      expect(await instructionFilesWithImports(dir, [...paths, "link.md"], pinRules())).toEqual(["CLAUDE.local.md", "link.md", "notes/a.md"]);
      expect(resolveImport("docs/CLAUDE.md", "../x.md")).toBe("x.md");
      expect(resolveImport("CLAUDE.md", "../x.md")).toBeNull();
      expect(resolveImport("CLAUDE.md", "/workspace/../etc/passwd")).toBeNull();
      expect(resolveImport("CLAUDE.md", "/etc/passwd")).toBeNull();
      expect(resolveImport("CLAUDE.md", "~/x.md")).toBeNull();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  // contract: R265
  it("follows another version's measured rules: its depth, only the forms it inlined, no import when it did not load CLAUDE.md", async () => {
    const { dir, paths } = await exportOf({
      "CLAUDE.md": "@docs/style.md @/workspace/docs/abs.md @chain/l1.md\n",
      "docs/style.md": "style\n",
      "docs/abs.md": "abs\n",
      "chain/l1.md": "@l2.md\n",
      "chain/l2.md": "@l3.md\n",
      "chain/l3.md": "last\n",
    });
    try {
      const rules = { ...pinRules(), maxHops: 2, absoluteInWorkspace: false };
      expect(await instructionFilesWithImports(dir, paths, rules)).toEqual(["CLAUDE.md", "chain/l1.md", "chain/l2.md", "docs/style.md"]);
      expect(await instructionFilesWithImports(dir, paths, { ...pinRules(), relative: false })).toEqual(["CLAUDE.md", "docs/abs.md"]);
      expect(await instructionFilesWithImports(dir, paths, { ...pinRules(), claudeMd: false })).toEqual(["CLAUDE.md"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
