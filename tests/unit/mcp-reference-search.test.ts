import { describe, expect, it } from "vitest";
import { ReferenceConfigSchema } from "../../src/mcp/config.ts";
import { globToRegExp, search } from "../../src/mcp/reference-server.ts";

describe("reference server globs", () => {
  it("matches ** across directories and * within one segment", () => {
    const docs = globToRegExp("docs/**/*.md");
    expect(docs.test("docs/a.md")).toBe(true);
    expect(docs.test("docs/x/y/a.md")).toBe(true);
    expect(docs.test("docs/a.mdx")).toBe(false);
    expect(docs.test("src/docs/a.md")).toBe(false);
    const readme = globToRegExp("README.md");
    expect(readme.test("README.md")).toBe(true);
    expect(readme.test("READMEamd")).toBe(false);
    expect(readme.test("sub/README.md")).toBe(false);
    expect(globToRegExp("*.md").test("a/b.md")).toBe(false);
    expect(globToRegExp("doc?.md").test("docs.md")).toBe(true);
  });
});

describe("reference server search", () => {
  const index = {
    format: "reference-doc-bridge-index/1" as const,
    pin: "p",
    engineRevision: "r",
    docs: [
      { path: "docs/rounding.md", text: "# Rounding\n\nAmounts round half to even.\n\n## Other\n\nNothing here.\n" },
      { path: "docs/retries.md", text: "# Retries\n\nBackoff doubles; rounding is not involved.\n" },
    ],
  };

  it("ranks sections by term hits, headings counting double, and respects the limit", () => {
    const hits = search(index, "rounding", 5);
    expect(hits.map((h) => [h.path, h.heading, h.score])).toEqual([
      ["docs/rounding.md", "Rounding", 2],
      ["docs/retries.md", "Retries", 1],
    ]);
    expect(hits[1]!.snippet).toContain("rounding is not involved");
    expect(search(index, "rounding", 1)).toHaveLength(1);
    expect(search(index, "zzz", 5)).toEqual([]);
  });
});

describe("reference server config", () => {
  it("refuses unknown keys and an index path outside the checkout", () => {
    expect(ReferenceConfigSchema.safeParse({ docs: ["README.md"] }).data?.index).toBeUndefined();
    expect(ReferenceConfigSchema.safeParse({ docs: ["README.md"], indx: "x" }).success).toBe(false);
    expect(ReferenceConfigSchema.safeParse({ docs: ["README.md"], index: "../elsewhere.json" }).success).toBe(false);
    expect(ReferenceConfigSchema.safeParse({ docs: ["README.md"], index: "/tmp/i.json" }).success).toBe(false);
    expect(ReferenceConfigSchema.safeParse({ docs: [] }).success).toBe(false);
  });
});
