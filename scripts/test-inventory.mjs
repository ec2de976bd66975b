#!/usr/bin/env node
// `node scripts/test-inventory.mjs [DIR]`: every test the suite declares under DIR/tests (default:
// this checkout), one line each: `file › describe › … › title  expect: N`, sorted, where N is the
// number of `expect(…)` call sites (and `expect.soft`, `expect.poll`, `expect.assertions`) written
// inside the test's own body. It is a count from the source, not from a run: an assertion made in a
// helper the test calls is counted where the helper is, and a test written in a loop is one line with
// its title's template as written. Titles that are not string literals are shown as their source.
//
// `node scripts/test-inventory.mjs --compare BEFORE AFTER`: reads two such lists and prints every
// test of BEFORE that AFTER lacks or holds with fewer expect call sites (a file moved between tier
// folders, tests/<tier>/x.test.ts, is matched by its name under the tier), then a count; exit 1 when any.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const ts = createRequire(import.meta.url)("typescript");

const TEST_FNS = new Set(["it", "test"]);
const SUITE_FNS = new Set(["describe", "suite"]);

/** `it`, `it.concurrent`, `it.each(...)` and the like: the base name, or null. */
function calleeBase(expr) {
  if (ts.isIdentifier(expr)) return expr.text;
  if (ts.isPropertyAccessExpression(expr)) return calleeBase(expr.expression);
  if (ts.isCallExpression(expr)) return calleeBase(expr.expression); // it.each(table)("title", fn)
  return null;
}

function titleOf(node, source) {
  if (!node) return "?";
  if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) return node.text;
  return node.getText(source);
}

function isExpectCall(node) {
  if (!ts.isCallExpression(node)) return false;
  const c = node.expression;
  if (ts.isIdentifier(c)) return c.text === "expect";
  return ts.isPropertyAccessExpression(c) && ts.isIdentifier(c.expression) && c.expression.text === "expect" && ["soft", "poll", "assertions", "hasAssertions"].includes(c.name.text);
}

function countExpects(node) {
  let n = 0;
  const visit = (x) => {
    if (isExpectCall(x)) n++;
    ts.forEachChild(x, visit);
  };
  visit(node);
  return n;
}

function testsOf(file, root) {
  const text = readFileSync(file, "utf8");
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const out = [];
  const rel = relative(root, file);
  const visit = (node, suites) => {
    if (ts.isCallExpression(node)) {
      const base = calleeBase(node.expression);
      if (base && (TEST_FNS.has(base) || SUITE_FNS.has(base)) && node.arguments.length >= 2) {
        const title = titleOf(node.arguments[0], source).replace(/\s+/g, " ");
        const body = node.arguments[1];
        if (TEST_FNS.has(base)) {
          out.push(`${[rel, ...suites, title].join(" › ")}  expect: ${countExpects(body)}`);
          return;
        }
        ts.forEachChild(body, (c) => visit(c, [...suites, title]));
        return;
      }
    }
    ts.forEachChild(node, (c) => visit(c, suites));
  };
  visit(source, []);
  return out;
}

function files(dir) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...files(path));
    else if (/\.ts$/.test(name)) out.push(path);
  }
  return out;
}

function inventory(root) {
  return files(join(root, "tests"))
    .flatMap((f) => testsOf(f, root))
    .sort();
}

function compare(beforeFile, afterFile) {
  const parse = (f) => {
    const m = new Map();
    for (const line of readFileSync(f, "utf8").split("\n")) {
      const hit = /^(.*)  expect: (\d+)$/.exec(line);
      if (!hit) continue;
      // tests/<tier>/name.test.ts › … : the tier folder is not part of a test's identity.
      const key = hit[1].replace(/^tests\/(unit|host|integration|conformance)\//, "tests/*/");
      m.set(key, (m.get(key) ?? []).concat(Number(hit[2])));
    }
    return m;
  };
  const before = parse(beforeFile);
  const after = parse(afterFile);
  let problems = 0;
  let tests = 0;
  for (const [key, counts] of before) {
    tests += counts.length;
    const now = (after.get(key) ?? []).slice().sort((a, b) => b - a);
    const was = counts.slice().sort((a, b) => b - a);
    for (const [i, n] of was.entries()) {
      if (now[i] === undefined) {
        problems++;
        process.stdout.write(`missing: ${key} (had ${n} expect call sites)\n`);
      } else if (now[i] < n) {
        problems++;
        process.stdout.write(`fewer expects: ${key}: ${n} -> ${now[i]}\n`);
      }
    }
  }
  const added = [...after].reduce((s, [key, c]) => s + Math.max(0, c.length - (before.get(key)?.length ?? 0)), 0);
  process.stdout.write(`${tests} tests before; ${problems} missing or with fewer expect call sites after; ${added} added\n`);
  return problems === 0 ? 0 : 1;
}

if (process.argv[2] === "--compare") process.exit(compare(process.argv[3], process.argv[4]));
const root = process.argv[2] ?? join(fileURLToPath(import.meta.url), "..", "..");
process.stdout.write(`${inventory(root).join("\n")}\n`);
