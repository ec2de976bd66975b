/**
 * docs/contract.md cannot drift from the tests or the code: every rule names its source and at
 * least one test, every test it names exists with that title in that file, and every rule id
 * that a test (`// contract: R12`) or a source comment (`(contract R12)`) cites is a rule of the
 * page. A test that cites a rule must also be listed under it, so the page stays the one index.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
// The rule heading and the two citation forms (`// contract: R1, R2` in tests, `(contract R12)` in
// code), shared with the index's generator so the page and its index read the same syntax.
// @ts-expect-error: a plain .mjs script without types
import { RULE_HEADING as RULE_HEADING_, SOURCE_CITATION as SOURCE_CITATION_, TEST_CITATION as TEST_CITATION_ } from "../../scripts/contract-index.mjs";

const RULE_HEADING = RULE_HEADING_ as RegExp;
const TEST_CITATION = TEST_CITATION_ as RegExp;
const SOURCE_CITATION = SOURCE_CITATION_ as RegExp;

const SOURCES = ["the study's runner contract", "its decision record", "the decision record's amendment of 2026-10-10", "the session-harness field notes", "project decision"] as const;

interface TestRef {
  file: string;
  title: string;
  line: number;
}

interface Rule {
  id: string;
  name: string;
  line: number;
  sources: string[];
  tests: TestRef[];
}

/** `` `tests/x.test.ts` › `title` ``, or `` `…` › `` title with `ticks` `` `` for a title holding backticks. */
const TEST_REF = /`(tests\/[\w./-]+\.ts)` › (?:``\s?(.+?)\s?``|`([^`]+)`)/g;

function parseContract(markdown: string): { rules: Rule[]; problems: string[] } {
  const rules: Rule[] = [];
  const problems: string[] = [];
  let current: Rule | undefined;
  markdown.split("\n").forEach((text, i) => {
    const line = i + 1;
    if (text.startsWith("#")) {
      const m = RULE_HEADING.exec(text);
      current = undefined;
      if (m) {
        current = { id: m[1]!, name: m[2]!, line, sources: [], tests: [] };
        rules.push(current);
      } else if (/^#+\s*R\d/.test(text)) problems.push(`line ${line}: a rule heading must read "### R<n>. <name>": ${text}`);
      return;
    }
    if (!current) return;
    const source = /^- Source: (.+)$/.exec(text);
    if (source) current.sources.push(...source[1]!.split(/;(?![^(]*\))/).map((s) => s.trim()));
    for (const m of text.matchAll(TEST_REF)) current.tests.push({ file: m[1]!, title: (m[2] ?? m[3])!, line });
  });
  const seen = new Map<string, number>();
  for (const rule of rules) {
    // Ids are stable, not sorted: a rule added later takes the next free number in its section.
    if (seen.has(rule.id)) problems.push(`${rule.id} (line ${rule.line}) is defined twice (first at line ${seen.get(rule.id)})`);
    else seen.set(rule.id, rule.line);
    if (rule.sources.length === 0) problems.push(`${rule.id} (line ${rule.line}) names no source ("- Source: …")`);
    for (const s of rule.sources) {
      if (!SOURCES.some((allowed) => s.startsWith(allowed))) {
        problems.push(`${rule.id} (line ${rule.line}): source "${s}" is none of: ${SOURCES.join(", ")}`);
      }
    }
    if (rule.tests.length === 0) problems.push(`${rule.id} (line ${rule.line}) lists no test that proves it`);
  }
  return { rules, problems };
}

/** A test title as written: a plain string, or a pattern when it is built at run time. */
interface Title {
  text: string;
  pattern?: RegExp;
  /** Offset in the source, to find the test a `// contract:` comment stands above. */
  at: number;
}

const STRING = String.raw`("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|\`(?:[^\`\\]|\\.)*\`)`;
/**
 * `it("…", …)`, `test.skip('…', …)`, the curried `it.each(table)("…", …)` and `name: "…"` of a
 * case table whose entries become tests. `describe` titles are not test titles.
 */
const TITLE = new RegExp(String.raw`(?:\b(?:it|test)(?:\.\w+)*\(\s*|\)\(\s*|\bname:\s*)` + STRING + String.raw`\s*[,}]`, "g");
/** `${expr}` in a template, `%s`-style formats of `it.each`. */
const PLACEHOLDER = /\$\{[^}]*\}|%[sdifjoO#]/g;

function titlesIn(source: string): Title[] {
  const titles: Title[] = [];
  for (const m of source.matchAll(TITLE)) {
    const raw = m[1]!;
    let text: string;
    if (raw.startsWith('"')) text = JSON.parse(raw) as string;
    else text = raw.slice(1, -1).replace(/\\(.)/g, "$1");
    const dynamic = (raw.startsWith("`") && text.includes("${")) || /%[sdifjoO#]/.test(text);
    if (!dynamic) {
      titles.push({ text, at: m.index });
      continue;
    }
    const pieces = text.split(PLACEHOLDER).map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    titles.push({ text, pattern: new RegExp(`^${pieces.join(".+?")}$`, "s"), at: m.index });
  }
  return titles;
}

/** Whether a cited title names a test of the file: equal to a plain title, or one rendering of a built one. */
function matchesTitle(titles: readonly Title[], cited: string): boolean {
  return titles.some((t) => (t.pattern ? t.pattern.test(cited) : t.text === cited));
}

interface Files {
  /** Text of a project file, or undefined when it does not exist. */
  read(path: string): string | undefined;
  /** Project-relative paths of every test and test-support file. */
  tests: readonly string[];
  /** Project-relative paths of every source file. */
  sources: readonly string[];
}

function checkContract(markdown: string, files: Files): { rules: Rule[]; problems: string[] } {
  const { rules, problems } = parseContract(markdown);
  const byId = new Map(rules.map((r) => [r.id, r]));
  const titleCache = new Map<string, Title[] | undefined>();
  const titlesOf = (file: string) => {
    if (!titleCache.has(file)) {
      const text = files.read(file);
      titleCache.set(file, text === undefined ? undefined : titlesIn(text));
    }
    return titleCache.get(file);
  };
  for (const rule of rules) {
    for (const ref of rule.tests) {
      const titles = titlesOf(ref.file);
      if (titles === undefined) problems.push(`${rule.id} (line ${ref.line}): ${ref.file} does not exist`);
      else if (!matchesTitle(titles, ref.title)) problems.push(`${rule.id} (line ${ref.line}): ${ref.file} has no test titled "${ref.title}"`);
    }
  }
  for (const file of files.tests) {
    const text = files.read(file) ?? "";
    const titles = titlesIn(text);
    for (const m of text.matchAll(TEST_CITATION)) {
      const ids = m[1]!.split(",").map((s) => s.trim());
      const line = text.slice(0, m.index).split("\n").length;
      const next = titles.find((t) => t.at > m.index);
      for (const id of ids) {
        const rule = byId.get(id);
        if (!rule) {
          problems.push(`${file}:${line} cites ${id}, which docs/contract.md does not define`);
          continue;
        }
        if (!next) {
          problems.push(`${file}:${line} cites ${id} but no test follows the comment`);
          continue;
        }
        const listed = rule.tests.some((ref) => ref.file === file && (next.pattern ? next.pattern.test(ref.title) : ref.title === next.text));
        if (!listed) problems.push(`${file}:${line}: the test "${next.text}" cites ${id}, but docs/contract.md does not list it under ${id}`);
      }
    }
  }
  for (const file of files.sources) {
    const text = files.read(file) ?? "";
    for (const m of text.matchAll(SOURCE_CITATION)) {
      for (const id of m[1]!.split(/\s*,\s*|\s+and\s+/)) {
        if (!byId.has(id)) problems.push(`${file}:${text.slice(0, m.index).split("\n").length} cites contract ${id}, which docs/contract.md does not define`);
      }
    }
  }
  return { rules, problems };
}

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = join(dir, name);
    if (statSync(full).isDirectory()) return walk(full);
    return /\.(ts|mjs)$/.test(name) ? [full] : [];
  });
}

const projectFiles: Files = {
  read(path) {
    try {
      return readFileSync(join(PROJECT_ROOT, path), "utf8");
    } catch {
      return undefined;
    }
  },
  tests: walk(join(PROJECT_ROOT, "tests")).map((f) => relative(PROJECT_ROOT, f)),
  sources: walk(join(PROJECT_ROOT, "src")).map((f) => relative(PROJECT_ROOT, f)),
};

describe("docs/contract.md", () => {
  const markdown = readFileSync(join(PROJECT_ROOT, "docs", "contract.md"), "utf8");
  const { rules, problems } = checkContract(markdown, projectFiles);

  it("numbers every rule, names its source and at least one test, and every named test exists with that title", () => {
    expect(rules.length).toBeGreaterThan(80);
    expect(problems).toEqual([]);
  });

  it("groups the rules in the sections of the runner's life, in order", () => {
    const sections = [...markdown.matchAll(/^## (.+)$/gm)].map((m) => m[1]);
    expect(sections).toEqual([
      "Inputs and plan",
      "Preflight",
      "Budget and charging",
      "Transcript validation and status",
      "Cost",
      "Export and container isolation",
      "The doc-bridge arm",
      "Ledger and privacy",
      "Adjudication and report",
      "Session tasks",
      "Exit codes",
    ]);
  });

  it("is cited by the code instead of documents that do not ship", () => {
    const stale: string[] = [];
    for (const file of projectFiles.sources) {
      projectFiles
        .read(file)!
        .split("\n")
        .forEach((text, i) => {
          const comment = /^\s*(\/\/|\/?\*)/.test(text);
          if (/seed 00\d|\b00[01] amendment|the seed's|issue #?\d+|decision record/i.test(text) || (comment && /\(seed[:,)]/i.test(text))) stale.push(`${file}:${i + 1}: ${text.trim()}`);
        });
    }
    expect(stale).toEqual([]);
  });
});

describe("the contract checker itself", () => {
  const source = [
    `it("kept title", () => {});`,
    `// contract: R1`,
    `it('single quoted', async () => {});`,
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the test source of a template title, as text
    "it(`a ${name} call is refused`, () => {});",
    `it.each([["a", 1]])("%s is failed", (x) => {});`,
    `describe("a describe title", () => {});`,
    `const cases = [{ name: "a case", status: "failed" }];`,
  ].join("\n");
  const files = (extra: Record<string, string> = {}): Files => {
    const all: Record<string, string> = { "tests/unit/x.test.ts": source, ...extra };
    return { read: (p) => all[p], tests: Object.keys(all).filter((p) => p.startsWith("tests/")), sources: Object.keys(all).filter((p) => p.startsWith("src/")) };
  };
  const rule = (id: string, refs: string[], source = "the study's runner contract") =>
    [`### ${id}. A rule`, "", "Text.", "", `- Source: ${source}`, "- Tests:", ...refs.map((r) => `  - \`tests/unit/x.test.ts\` › \`${r}\``), ""].join("\n");

  it("reads plain, quoted, built and case-table titles, and not describe titles", () => {
    const titles = titlesIn(source);
    expect(titles.filter((t) => !t.pattern).map((t) => t.text)).toEqual(["kept title", "single quoted", "a case"]);
    expect(matchesTitle(titles, "a Write call is refused")).toBe(true);
    expect(matchesTitle(titles, "a timeout is failed")).toBe(true);
    expect(matchesTitle(titles, "a Write call is allowed")).toBe(false);
    expect(matchesTitle(titles, "a describe title")).toBe(false);
  });

  it("passes a page whose rules all cite existing tests, and the test that cites R1 is listed under it", () => {
    const md = rule("R1", ["single quoted", "a Write call is refused"]) + rule("R2", ["a case", "a timeout is failed"], "project decision (docs/x.md)");
    expect(checkContract(md, files()).problems).toEqual([]);
  });

  it("fails a rule without a test, a missing file, a renamed title, an unknown source and a duplicate id", () => {
    const md = [
      rule("R1", ["single quoted"]),
      rule("R2", []),
      rule("R3", ["renamed title"]),
      "### R4. A rule\n\n- Source: a blog post\n- Tests:\n  - `tests/unit/gone.test.ts` › `kept title`\n",
      rule("R4", ["kept title"]),
    ].join("\n");
    expect(checkContract(md, files()).problems).toEqual([
      "R2 (line 9) lists no test that proves it",
      'R4 (line 24): source "a blog post" is none of: ' + SOURCES.join(", "),
      "R4 (line 30) is defined twice (first at line 24)",
      'R3 (line 22): tests/unit/x.test.ts has no test titled "renamed title"',
      "R4 (line 28): tests/unit/gone.test.ts does not exist",
    ]);
  });

  it("fails a test that cites a rule that does not exist, or a rule that does not list it, and code citing an unknown rule", () => {
    const extra = { "tests/unit/y.test.ts": `// contract: R1, R9\nit("other", () => {});`, "src/a.ts": "// why (contract R2 and R7)\n" };
    const md = rule("R1", ["single quoted"]) + rule("R2", ["kept title"]);
    expect(checkContract(md, files(extra)).problems).toEqual([
      'tests/unit/y.test.ts:1: the test "other" cites R1, but docs/contract.md does not list it under R1',
      "tests/unit/y.test.ts:1 cites R9, which docs/contract.md does not define",
      "src/a.ts:1 cites contract R7, which docs/contract.md does not define",
    ]);
  });
});
