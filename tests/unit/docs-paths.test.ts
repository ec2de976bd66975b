/**
 * The docs name the files where each mechanism lives (`src/util/ahead.ts`, a test file, a bench):
 * a reader who follows one must find it. Every project path the README and docs/ quote in
 * backticks, outside fenced examples (which show a corpus's own paths), exists in the checkout.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

/** A path under one of the project's own top folders, quoted as `…` (a `:line` or `#anchor` after it is allowed). */
const QUOTED_PATH = /`((?:src|tests|bench|docker|docs|scripts|\.ci)\/[\w./-]+?\.(?:ts|cjs|mjs|js|json|md|sh|yml|yaml|Dockerfile))(?:[:#][^`]*)?`/g;

/** The quoted project paths of a Markdown text, with their line numbers, fenced blocks left out. */
function quotedPaths(markdown: string): { path: string; line: number }[] {
  const found: { path: string; line: number }[] = [];
  let fenced = false;
  markdown.split("\n").forEach((text, i) => {
    if (/^\s*(```|~~~)/.test(text)) fenced = !fenced;
    else if (!fenced) for (const m of text.matchAll(QUOTED_PATH)) found.push({ path: m[1]!, line: i + 1 });
  });
  return found;
}

const DOCS = [
  "README.md",
  "CONTRIBUTING.md",
  ...readdirSync(join(PROJECT_ROOT, "docs"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];

describe("the paths the docs quote", () => {
  it("finds quoted paths outside fenced blocks only, with their line", () => {
    const md = ["see `src/util/ahead.ts` and `tests/unit/x.test.ts:12`", "```json", '{ "file": "`src/invoice.js`" }', "```", "`docs/contract.md#r3`"].join("\n");
    expect(quotedPaths(md)).toEqual([
      { path: "src/util/ahead.ts", line: 1 },
      { path: "tests/unit/x.test.ts", line: 1 },
      { path: "docs/contract.md", line: 5 },
    ]);
  });

  it("name files that exist in the checkout (README.md and every page of docs/)", () => {
    const missing = DOCS.flatMap((doc) =>
      quotedPaths(readFileSync(join(PROJECT_ROOT, doc), "utf8"))
        .filter(({ path }) => !existsSync(join(PROJECT_ROOT, path)))
        .map(({ path, line }) => `${doc}:${line} names ${path}, which does not exist`),
    );
    expect(missing).toEqual([]);
    // The docs do quote paths: an empty match would pass for the wrong reason.
    expect(DOCS.reduce((n, doc) => n + quotedPaths(readFileSync(join(PROJECT_ROOT, doc), "utf8")).length, 0)).toBeGreaterThan(50);
  });
});
