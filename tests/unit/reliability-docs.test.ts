/**
 * docs/reliability.md cannot drift from the tests (issue 10): every test its tables name exists
 * with exactly that title in that file, and every test of the reliability test files below is
 * named in a table.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

const DOC = join(PROJECT_ROOT, "docs", "reliability.md");

/** The files whose every test is a row of the doc's tables (faults, kills, signals, hostile input, secrets). */
const RELIABILITY_TEST_FILES = [
  "tests/integration/engine-stopped.test.ts",
  "tests/host/hostile-corpus.test.ts",
  "tests/integration/kill-at-checkpoints.test.ts",
  "tests/integration/runner-faults.test.ts",
  "tests/integration/secret-canaries.test.ts",
  "tests/integration/signals-and-orphans.test.ts",
  "tests/unit/ledger-check.test.ts",
  "tests/unit/manifest-fuzz.test.ts",
  "tests/unit/transcript-fuzz.test.ts",
];

/** `` `tests/x.test.ts`: `title` `` in a table row. */
const REFERENCE = /`(tests\/[\w./-]+\.test\.ts)`: `([^`]+)`/g;

interface Reference {
  file: string;
  title: string;
  line: number;
}

function referencesIn(markdown: string): Reference[] {
  const refs: Reference[] = [];
  markdown.split("\n").forEach((text, i) => {
    if (!text.startsWith("|")) return;
    for (const m of text.matchAll(REFERENCE)) refs.push({ file: m[1]!, title: m[2]!, line: i + 1 });
  });
  return refs;
}

/**
 * Test titles written as string literals: `it("...")`, and `name: "..."` of case tables whose
 * entries become tests (pipeline-failures). A title built at run time cannot be checked, so a
 * template with `${` is reported as such.
 */
function titlesIn(source: string, { caseNames = true } = {}): { titles: string[]; dynamic: number } {
  const titles: string[] = [];
  let dynamic = 0;
  const literal = /(\bit(?:\.\w+)?\(\s*|\bname:\s*)("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`(?:[^`\\]|\\.)*`)/g;
  for (const m of source.matchAll(literal)) {
    if (m[1]!.startsWith("name") && !caseNames) continue;
    const raw = m[2]!;
    if (raw.startsWith("`") && raw.includes("${")) {
      dynamic++;
      continue;
    }
    const body = raw.slice(1, -1);
    titles.push(raw.startsWith('"') ? (JSON.parse(raw) as string) : body.replace(/\\(.)/g, "$1"));
  }
  return { titles, dynamic };
}

const read = (rel: string) => readFileSync(join(PROJECT_ROOT, rel), "utf8");

describe("docs/reliability.md", () => {
  const refs = referencesIn(readFileSync(DOC, "utf8"));

  it("names at least one test per row, and every named test exists with that exact title", () => {
    expect(refs.length).toBeGreaterThan(30);
    const missing = refs.filter((r) => {
      let source: string;
      try {
        source = read(r.file);
      } catch {
        return true;
      }
      return !titlesIn(source).titles.includes(r.title);
    });
    expect(missing.map((r) => `line ${r.line}: ${r.file}: ${r.title}`)).toEqual([]);
  });

  it("names every test of the reliability test files, whose titles are all literal", () => {
    const files = RELIABILITY_TEST_FILES;
    for (const file of files) expect(existsSync(join(PROJECT_ROOT, file)), `${file} is listed as a reliability test file but does not exist`).toBe(true);
    const named = new Set(refs.map((r) => `${r.file}\u0000${r.title}`));
    const unnamed: string[] = [];
    for (const file of files) {
      const { titles, dynamic } = titlesIn(read(file), { caseNames: false });
      expect(dynamic, `${file} builds a test title at run time; the docs check needs literal titles`).toBe(0);
      for (const title of titles) if (!named.has(`${file}\u0000${title}`)) unnamed.push(`${file}: ${title}`);
    }
    expect(unnamed).toEqual([]);
  });

  it("the checker itself: a renamed test, a missing file and an unnamed test are each caught", () => {
    const source = `it("kept title", () => {});\nit('single quoted', () => {});\nit(\`dyn \${x}\`, () => {});\nconst cases = [{ name: "a case" }];`;
    expect(titlesIn(source)).toEqual({ titles: ["kept title", "single quoted", "a case"], dynamic: 1 });
    expect(titlesIn(source, { caseNames: false }).titles).toEqual(["kept title", "single quoted"]);
    const md = "| a | b | `tests/unit/x.test.ts`: `kept title` |\n| c | d | `tests/unit/x.test.ts`: `renamed title` |\nnot a row `tests/unit/y.test.ts`: `t`";
    const found = referencesIn(md);
    expect(found).toEqual([
      { file: "tests/unit/x.test.ts", title: "kept title", line: 1 },
      { file: "tests/unit/x.test.ts", title: "renamed title", line: 2 },
    ]);
    expect(found.filter((r) => !titlesIn(source).titles.includes(r.title)).map((r) => r.title)).toEqual(["renamed title"]);
  });
});
