#!/usr/bin/env node
// `npm run compare-demo -- BASE_REV [--keep] [--reuse DIR] [--base-docker-host URL] [--current-docker-host URL]`:
// does a change keep what the demo writes, and does a demo on one Docker engine write what it writes on another?
//
// Runs `npm run demo` (the full fake-model study, its blind adjudication and its reports) in a
// temporary `git worktree` of BASE_REV (with this tree's node_modules linked in) and in the current
// working tree, one after the other, then writes each side's Inspect logs with `study-runner report
// --format inspect`. It compares, side by side: the ledger, the adjudication record, report.md,
// report.json, report.html and each Inspect log. Prints every difference (file, then the JSON path
// or the line) and exits 1 on any, 0 when the two agree, 2 when a side could not be run.
//
// What legitimately differs between two runs is normalized by field name and structure, never by
// a blanket pattern over the whole text: times, run, adjudication and item ids, random ids (session,
// message, Inspect event), absolute temporary paths, durations (wall-time fields, a report metric of
// wall time, the Markdown and HTML rows, columns and charts labelled with it), and the digests that
// cover those (transcript hashes, the report's evidence digest, the runner's own source hash); a digest of
// code (the fake claude's binary, the doc-bridge bundle) is explained when the trees account for it. An id
// or digest found in those fields is replaced where another string quotes it, so an outcome, a cost,
// a count or a text that changed still shows.
//
// Against a base tree from before a field existed, three differences are explained, each derived
// again from the base tree and the files: a field only the current side writes, when the base's code
// declares no such field where that file's fields are declared (src/ledger for the ledger,
// src/report for report.json); the report's CLI cell naming the current ledger's calibration
// profile, when the base's ledger code has none; and a money amount (a `…Usd` field) that differs
// only in floating-point noise (12 significant digits), with the report lines that print it, when
// each side's printed figure is its own amount rounded to the printed digits. A field the base
// declares and did not write, or an amount that moved, is a difference.
//
// The ledger header's `sandbox` (provider, channel, engine endpoint, OS, architecture) says which
// engine a run used. Between two sides run on different engines (--base-docker-host,
// --current-docker-host) a difference there is explained, and not counted, when each side's
// recorded endpoint is the engine that side was given; on one engine it is a difference like any other.
//
//   --keep                     keep the temporary folder (both worktrees' outputs) and print where it is
//   --reuse DIR                compare the outputs a --keep run left in DIR instead of running the demo again
//                              (DIR/base.json and DIR/current.json: each side's tree, workdir, dockerHost
//                              and the files its demo and `report --format inspect` wrote)
//   --base-docker-host URL     run the base side's demo with DOCKER_HOST=URL (default: this shell's engine)
//   --current-docker-host URL  run the current side's demo with DOCKER_HOST=URL; `npm run compare-demo --
//                              HEAD --current-docker-host URL` compares this tree on two engines
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";

const HERE = dirname(dirname(fileURLToPath(import.meta.url)));

// ---- the fields that differ between two runs of the same code ------------------------------------

/** Fields whose value is a point in time (one placeholder), an id made at random or from the clock, or a digest over those (numbered placeholders). */
const VOLATILE_FIELDS = {
  time: ["startedAt", "endedAt", "finishedAt", "createdAt", "updatedAt", "writtenAt", "askedAt", "answeredAt", "at", "timestamp", "started_at", "completed_at", "created", "completed"],
  id: ["runId", "adjudicationId", "itemId", "run_id", "eval_id", "task_id", "containerId", "sessionId", "session_id", "uuid", "messageId", "message_id", "requestId", "id", "tool_call_id"],
  digest: ["transcriptSha256", "ledgerSha256", "ledger_file_sha256", "recordSha256", "adjudication_file_sha256", "runnerHash", "runner_hash", "evidenceRoot", "merkleRoot", "root", "sha256"],
};
const FIELD_KIND = new Map(Object.entries(VOLATILE_FIELDS).flatMap(([kind, names]) => names.map((n) => [n, kind])));

/** Durations (wall clock, not work done): these fields, any field named for wall time, and every number of a report metric of time. */
const DURATION_FIELDS = new Set(["durationMs", "duration_ms", "duration_api_ms", "wallMs", "elapsedMs", "setupMs", "ms", "time", "working_start", "working_time", "total_time"]);
const isDurationField = (key) => DURATION_FIELDS.has(key) || /wall_?time/i.test(key);
const DURATION_METRICS = new Set(["wallTimeMs"]);
/** How the Markdown and HTML reports label a duration: a table row with this first cell, a column with this header, a chart with this label. */
const DURATION_LABELS = ["wall time (ms)", "wall time ms", "mean wall time ms", "wall ms", "wall time: paired values per task"];
const DURATION = "<duration>";

/**
 * A side's normalizer. `collect` first walks every JSON file of the side and numbers each id and
 * digest in order of first appearance per kind (`<id:1>`, `<digest:3>`), so that two runs agree
 * exactly when their volatile values stand in the same places. `json` then replaces those fields,
 * durations, the side's own temporary paths, and any known volatile value quoted inside another
 * string (a verdict reason naming its item id); `text` does the same for Markdown and HTML, where
 * durations are found by the table row, column or chart that shows them.
 */
function normalizer(side) {
  const seen = new Map();
  const counts = {};
  const placeholder = (kind, value) => {
    // Times only stand in their places: two events in the same millisecond in one run and not in the other are no difference.
    if (kind === "time") return "<time>";
    const key = `${kind}\u0000${value}`;
    if (!seen.has(key)) {
      counts[kind] = (counts[kind] ?? 0) + 1;
      seen.set(key, `<${kind}:${counts[kind]}>`);
    }
    return seen.get(key);
  };
  // The side's own files and folders, longest first, so an absolute temporary path keeps only its tail.
  const prefixes = [
    [side.ledger.replace(/\.json$/, ""), "<ledger>"],
    [dirname(side.report.json), "<reports>"],
    [side.work, "<workdir>"],
    [side.tree, "<tree>"],
    [realpathSync(tmpdir()), "<tmp>"],
  ];
  const known = () =>
    [...seen.entries()]
      .map(([key, name]) => [key.slice(key.indexOf("\u0000") + 1), name])
      .filter(([v]) => v.length >= 8)
      .sort((a, b) => b[0].length - a[0].length);
  let values = [];
  const quoted = (t) => [...prefixes, ...values].reduce((acc, [v, name]) => acc.split(v).join(name), t);

  function walk(value, key, inDuration) {
    if (Array.isArray(value)) return value.map((v) => walk(v, key, inDuration));
    if (value !== null && typeof value === "object") {
      const duration = inDuration || DURATION_METRICS.has(value.metric);
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, walk(v, k, duration)]));
    }
    const kind = FIELD_KIND.get(key);
    if (kind && (typeof value === "string" || typeof value === "number")) return placeholder(kind, String(value));
    if (typeof value === "number" && (inDuration || isDurationField(key))) return DURATION;
    return typeof value === "string" ? headlineDurations(quoted(value)) : value;
  }
  return {
    collect(value) {
      walk(value, "", false);
      values = known();
    },
    json: (value) => walk(value, "", false),
    text: (t) => durationsInText(quoted(t)),
  };
}

const isDurationLabel = (cell) => DURATION_LABELS.includes(cell.replace(/<[^>]*>/g, "").trim());

/**
 * The headline's cost sentence (src/report/headline.ts, `costSentence`): "Per correct answer (…):
 * <arm> <usd> USD and <seconds> s, …". Its seconds are wall time; only they become placeholders,
 * and only in that sentence.
 */
const headlineDurations = (t) => t.replace(/Per correct answer \(every attempt's charge and wall time[^\n]*/g, (sentence) => sentence.replace(/( USD and )[\d.,]+( s\b)/g, `$1${DURATION}$2`));

/** Markdown tables and HTML tables and charts: the cells of a duration row or column, and a duration chart, become placeholders. */
function durationsInText(t) {
  // HTML: a chart whose label is a duration's, and each table's rows (header cells name the columns).
  let out = headlineDurations(t).replace(/<svg\b[^>]*aria-label="([^"]*)"[^>]*>.*?<\/svg>/gs, (svg, label) => (isDurationLabel(label) ? `<svg aria-label="${label}">${DURATION}</svg>` : svg));
  out = out.replace(/<table\b[^>]*>.*?<\/table>/gs, (table) => {
    let header = [];
    return table.replace(/<tr>(.*?)<\/tr>/gs, (row, inner) => {
      const cells = [...inner.matchAll(/<(t[hd])\b[^>]*>(.*?)<\/\1>/gs)];
      if (cells.length > 1 && cells.every((c) => c[1] === "th")) header = cells.map((c) => c[2]);
      else if (cells.length > 1) {
        const whole = isDurationLabel(cells[0][2]);
        cells.forEach((c, i) => {
          if (i > 0 && (whole || isDurationLabel(header[i] ?? ""))) row = row.replace(c[0], `<${c[1]}>${DURATION}</${c[1]}>`);
        });
      }
      return row;
    });
  });
  // Markdown: a table's first row names its columns.
  let header = null;
  return out
    .split("\n")
    .map((line) => {
      if (!line.startsWith("|")) {
        header = null;
        return line;
      }
      const cells = line.split("|").slice(1, -1);
      if (header === null) {
        header = cells.map((c) => c.trim());
        return line;
      }
      const whole = isDurationLabel(cells[0] ?? "");
      return `|${cells.map((c, i) => (i > 0 && (whole || isDurationLabel(header[i] ?? "")) && !/^\s*-+\s*$/.test(c) ? ` ${DURATION} ` : c)).join("|")}|`;
    })
    .join("\n");
}

// ---- digests of code ------------------------------------------------------------------------------

/**
 * Fields that are digests of code, not of anything the code did: the fake claude's binary (the
 * ledger's and the adjudication record's `image.binarySha256`) and the doc-bridge engine's bundle
 * (`docBridge.bundleHash`, over the reference server and every module it imports). Such a digest
 * differs exactly when that code does. A difference there is explained, and not counted, only when it
 * is derived again from the two trees: the fake's recorded digest must be the sha256 of its own
 * tree's fake claude script (`src/stand-ins/fake-claude/claude.mjs`, or
 * `docker/fake-claude/claude.mjs` in a tree from before the stand-ins moved), and the engine's must be the bundle hash each tree
 * computes for its own engine command. Anything else is a difference.
 */
const CODE_DIGESTS = [
  { path: /^\$(\.adjudicator)?\.image\.binarySha256$/, what: "the fake claude's binary", explain: fakeClaudeChanged },
  { path: /^\$\.docBridge\.bundleHash$/, what: "the doc-bridge engine's bundle", explain: engineChanged },
];

const sha256Of = (path) => createHash("sha256").update(readFileSync(path)).digest("hex");

/** Each side's recorded digest is its own tree's fake claude, and the two files differ. */
function fakeClaudeChanged(trees, recorded) {
  // Where each tree keeps it: src/stand-ins/ now, docker/fake-claude/ in trees from before the move.
  const file = (tree) => [join(tree, "src", "stand-ins", "fake-claude", "claude.mjs"), join(tree, "docker", "fake-claude", "claude.mjs")].find((f) => existsSync(f)) ?? "";
  if (!trees.every((t) => existsSync(file(t)))) return null;
  const [a, b] = trees.map((t) => sha256Of(file(t)));
  return a === recorded[0] && b === recorded[1] && a !== b ? "the fake claude script differs between the trees; each side's digest is its own tree's file" : null;
}

/**
 * Each side's recorded bundle hash is the one its own tree derives for its own engine command
 * (`engineBundle(referenceEngineCommand())`, run in that tree: which files the command runs, the
 * server's sources, the lock file), and the two differ. Names what differs between the two lists.
 */
function engineChanged(trees, recorded) {
  const derive = (tree) => {
    const code =
      'const { referenceEngineCommand } = await import("./src/mcp/preflight.ts"); const { engineBundle } = await import("./src/mcp/bundle-hash.ts");' +
      "const b = await engineBundle(referenceEngineCommand(), process.cwd()); process.stdout.write(JSON.stringify({ hash: b.bundleHash, files: b.files.map((f) => [f.label, f.sha256]) }));";
    const r = spawnSync("node", ["--import", "tsx", "--input-type=module", "-e", code], { cwd: tree, encoding: "utf8" });
    return r.status === 0 ? JSON.parse(r.stdout) : null;
  };
  if (!trees.every((t) => existsSync(join(t, "src", "mcp", "bundle-hash.ts")))) return null;
  const [a, b] = trees.map(derive);
  if (!a || !b || a.hash !== recorded[0] || b.hash !== recorded[1] || a.hash === b.hash) return null;
  const [la, lb] = [new Map(a.files), new Map(b.files)];
  const changed = [...new Set([...la.keys(), ...lb.keys()])].filter((f) => la.get(f) !== lb.get(f)).sort();
  return `each side's hash is its own tree's engine command's; what differs: ${changed.join(", ")}`;
}

// ---- comparing ------------------------------------------------------------------------------------

/** Every place where two normalized JSON values differ, as `path: base …, current …`. */
function jsonDifferences(a, b, path = "$", out = []) {
  if (out.length >= 200) return out;
  if (Array.isArray(a) && Array.isArray(b)) {
    if (a.length !== b.length) out.push(`${path}: ${a.length} entries in base, ${b.length} in current`);
    for (let i = 0; i < Math.min(a.length, b.length); i++) jsonDifferences(a[i], b[i], `${path}[${i}]`, out);
  } else if (a && b && typeof a === "object" && typeof b === "object" && !Array.isArray(a) && !Array.isArray(b)) {
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
      if (!(k in a)) out.push(`${path}.${k}: only in current (${show(b[k])})`);
      else if (!(k in b)) out.push(`${path}.${k}: only in base (${show(a[k])})`);
      else jsonDifferences(a[k], b[k], `${path}.${k}`, out);
    }
  } else if (JSON.stringify(a) !== JSON.stringify(b)) out.push(`${path}: base ${show(a)}, current ${show(b)}`);
  return out;
}

const show = (v) => {
  const s = JSON.stringify(v);
  return s.length > 160 ? `${s.slice(0, 157)}...` : s;
};

/** The lines that differ between two normalized texts, line by line (a report's lines are its structure): what to show, and the two whole lines. */
function textDifferences(a, b) {
  const x = a.split("\n");
  const y = b.split("\n");
  const out = [];
  if (x.length !== y.length) out.push({ shown: `${x.length} lines in base, ${y.length} in current` });
  for (let i = 0; i < Math.max(x.length, y.length) && out.length < 50; i++) {
    if (x[i] !== y[i]) out.push({ shown: `line ${i + 1}:\n    base:    ${clip(x[i])}\n    current: ${clip(y[i])}`, line: i + 1, base: x[i], current: y[i] });
  }
  return out;
}

const clip = (s) => (s === undefined ? "(none)" : s.length > 300 ? `${s.slice(0, 297)}...` : s);

// ---- running one side -----------------------------------------------------------------------------

/** A side that could not be run (exit 2), as opposed to a difference (exit 1). */
class SideError extends Error {}

function sh(cmd, args, cwd, what, env = {}) {
  const r = spawnSync(cmd, args, { cwd, encoding: "utf8", maxBuffer: 256 * 1024 * 1024, env: { ...process.env, FORCE_COLOR: "0", ...env } });
  if (r.status !== 0) throw new SideError(`${what} failed (exit ${r.status ?? r.signal}):\n${(r.stderr ?? "").slice(-4000)}`);
  return r.stdout;
}

/** The last JSON object on stdout (the demo and `report --format inspect` end with one). */
function lastJson(stdout) {
  const start = stdout.lastIndexOf("\n{\n");
  return JSON.parse(stdout.slice(start < 0 ? 0 : start + 1));
}

/** The engine a side runs on: the one given, else this shell's DOCKER_HOST, else Docker's default socket. */
const DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock";
const engineOf = (given) => given ?? process.env.DOCKER_HOST ?? DEFAULT_DOCKER_HOST;

/** Runs the demo in `tree` on `dockerHost`, then writes the Inspect logs; the paths of what it wrote go into `side.json`. */
function runSide(name, tree, dir, dockerHost) {
  const work = join(dir, `${name}-work`);
  const t0 = Date.now();
  process.stderr.write(`compare-demo: npm run demo in ${tree} (${name}) on ${dockerHost} ...\n`);
  const demo = lastJson(sh("node", ["bin/study-runner.mjs", "demo", "--quiet", "--workdir", work], tree, `the demo (${name})`, { DOCKER_HOST: dockerHost })).demo;
  const inspect = lastJson(sh("node", ["bin/study-runner.mjs", "report", "--ledger", demo.ledger, "--adjudication", demo.adjudication, "--format", "inspect", "--out-dir", join(dir, `${name}-inspect`)], tree, `the Inspect logs (${name})`));
  const side = { name, tree, work, dockerHost, seconds: Math.round((Date.now() - t0) / 1000), ...demo, inspect: inspect.inspect };
  writeFileSync(join(dir, `${name}.json`), JSON.stringify(side, null, 2));
  process.stderr.write(`compare-demo: ${name} done in ${side.seconds} s\n`);
  return side;
}

/** A worktree of `rev` in `dir`, with this tree's node_modules linked in (never installed). */
function baseTree(rev, dir) {
  const tree = join(dir, "base-tree");
  sh("git", ["worktree", "add", "--detach", tree, rev], HERE, `git worktree add ${rev}`);
  symlinkSync(realpathSync(join(HERE, "node_modules")), join(tree, "node_modules"), "dir");
  return tree;
}

// ---- the comparison -------------------------------------------------------------------------------

/** The files of one side to compare, by a name both sides share. */
function filesOf(side) {
  const files = { ledger: side.ledger, "adjudication record": side.adjudication, "report.md": side.report.markdown, "report.json": side.report.json, "report.html": side.report.html };
  for (const f of readdirSync(side.inspect).sort()) files[`inspect log #${Object.keys(files).length - 4}`] = join(side.inspect, f);
  return files;
}

function compare(base, current) {
  const files = { base: filesOf(base), current: filesOf(current) };
  const norm = { base: normalizer(base), current: normalizer(current) };
  const names = [...new Set([...Object.keys(files.base), ...Object.keys(files.current)])];
  const read = (path) => (isJson(path) ? JSON.parse(readFileSync(path, "utf8")) : readFileSync(path, "utf8"));
  const content = { base: {}, current: {} };
  for (const side of ["base", "current"]) {
    for (const name of names) if (files[side][name]) content[side][name] = read(files[side][name]);
    // Every volatile value of the side is known before any file is normalized.
    for (const name of names) if (isJson(files[side][name] ?? "")) norm[side].collect(content[side][name]);
  }
  // The report's money amounts that differ only in floating-point noise, for the lines that print them.
  const reportJson = [content.base["report.json"], content.current["report.json"]];
  const usdPairs = reportJson.every((r) => r !== undefined) ? floatNoisePairs(jsonDifferences(norm.base.json(reportJson[0]), norm.current.json(reportJson[1]))) : [];
  let differences = 0;
  for (const name of names) {
    const [a, b] = [content.base[name], content.current[name]];
    if (a === undefined || b === undefined) {
      process.stdout.write(`${name}: only in ${a === undefined ? "current" : "base"}\n`);
      differences++;
      continue;
    }
    const json = isJson(files.base[name]);
    const normalized = json ? [norm.base.json(a), norm.current.json(b)] : [norm.base.text(a), norm.current.text(b)];
    const all = json ? jsonDifferences(...normalized).map((shown) => ({ shown })) : textDifferences(...normalized);
    const explained = all.map(({ shown, ...lines }) =>
      json
        ? (explainCodeDigest(shown, [base.tree, current.tree]) ?? (name === "ledger" ? explainSandbox(shown, [a, b], [base, current]) : null) ?? explainAddedField(shown, base.tree, name) ?? explainFloatNoise(shown))
        : explainReportLine(lines, base.tree, content.current.ledger, usdPairs),
    );
    const found = all.filter((_, i) => explained[i] === null).map((d) => d.shown);
    const notes = explained.filter((e) => e !== null).map((e) => `  (explained) ${e}`);
    process.stdout.write(`${found.length ? `${name}: ${found.length} difference(s)\n${found.map((d) => `  ${d}`).join("\n")}` : `${name}: same`}\n${notes.map((n) => `${n}\n`).join("")}`);
    differences += found.length;
  }
  return differences;
}

const isJson = (path) => path.endsWith(".json");

/** A difference `$.path: base "x", current "y"` in a digest of code that each tree's code accounts for, or null. */
function explainCodeDigest(difference, trees) {
  const m = /^(\S+): base "([0-9a-f]{64})", current "([0-9a-f]{64})"$/.exec(difference);
  const digest = m && CODE_DIGESTS.find((c) => c.path.test(m[1]));
  if (!digest) return null;
  const why = digest.explain(trees, [m[2], m[3]]);
  return why ? `${m[1]}: ${digest.what} changed: ${why}` : null;
}

/**
 * A difference in the ledger header's `sandbox` between two sides run on different engines, when
 * each side's recorded endpoint is the engine that side was given, or null. The header names the
 * engine and the channel the preflight chose for it; everything else the run wrote must agree.
 */
function explainSandbox(difference, ledgers, sides) {
  if (!/^\$\.sandbox\.[A-Za-z]+:/.test(difference)) return null;
  const engines = sides.map((s) => engineOf(s.dockerHost));
  if (engines[0] === engines[1]) return null;
  if (!ledgers.every((l, i) => l?.sandbox?.endpoint === engines[i])) return null;
  return `${difference} (the sides ran on different engines; each ledger names its own)`;
}

// ---- what a later tree adds, and money in floating point -----------------------------------------

/** Where each file's fields are declared in a tree: the schema and the code that writes it. */
const DECLARED_IN = { ledger: ["src/ledger"], "adjudication record": ["src/adjudicate", "src/ledger"], "report.json": ["src/report"] };

/** Whether the base tree declares a field `key` (a property `key:` or `key?:`) in `folders`; true when it cannot tell. */
function baseDeclares(tree, key, folders) {
  const pattern = `\\b${key}\\??\\s*:`;
  const r = spawnSync("git", ["grep", "-q", "-E", pattern, "--", ...folders], { cwd: tree });
  if (r.status === 0) return true;
  if (r.status === 1) return false;
  // Not a git worktree (a --reuse folder made by hand): read the files themselves.
  const walk = (path) =>
    existsSync(path) &&
    readdirSync(path, { withFileTypes: true }).some((e) => (e.isDirectory() ? walk(join(path, e.name)) : /\.(ts|mjs|cjs|js)$/.test(e.name) && new RegExp(pattern).test(readFileSync(join(path, e.name), "utf8"))));
  return folders.every((f) => existsSync(join(tree, f))) ? folders.some((f) => walk(join(tree, f))) : true;
}

/**
 * A field only the current side writes (`$.path.key: only in current`), explained when the base
 * tree declares no such field where that file's fields are declared: a field added since, not a
 * value the base wrote differently. A field the base's code declares and did not write is a difference.
 */
function explainAddedField(difference, baseTree, file) {
  const m = /^(\$\S*)\.([A-Za-z_][A-Za-z0-9_]*): only in current /.exec(difference);
  const folders = DECLARED_IN[file];
  if (!m || !folders || baseDeclares(baseTree, m[2], folders)) return null;
  return `${m[1]}.${m[2]}: added since the base (the base's ${folders.join(" and ")} declares no \`${m[2]}\`)`;
}

/** Two money amounts (a field named `…Usd`) that are the same to 12 significant digits: the order of floating-point arithmetic, not a different amount. */
const FLOAT_NOISE = 1e-12;
function floatNoise(difference) {
  const m = /^(\$\S*Usd): base (-?[\d.e+-]+), current (-?[\d.e+-]+)$/.exec(difference);
  if (!m) return null;
  const [a, b] = [Number(m[2]), Number(m[3])];
  if (!Number.isFinite(a) || !Number.isFinite(b) || a === b) return null;
  return Math.abs(a - b) <= FLOAT_NOISE * Math.max(Math.abs(a), Math.abs(b)) ? { path: m[1], base: a, current: b } : null;
}
const explainFloatNoise = (difference) => {
  const n = floatNoise(difference);
  return n ? `${n.path}: base ${n.base}, current ${n.current}: the same amount to 12 significant digits (floating-point order of operations)` : null;
};
const floatNoisePairs = (differences) => differences.map(floatNoise).filter((n) => n !== null);

/**
 * A line of report.md or report.html that differs only where (a) the current side names its
 * calibration profile after the CLI version (`2.1.296 (profile sha256 …)`, the current ledger's
 * `profileSha256`) and the base tree never names one, or (b) a number is printed from a money
 * amount of report.json that differs only in floating-point noise, each side's figure being that
 * side's amount rounded to the printed digits (a value on the rounding boundary).
 */
function explainReportLine(lines, baseTree, currentLedger, usdPairs) {
  if (lines.line === undefined || lines.base === undefined || lines.current === undefined) return null;
  let [x, y] = [lines.base, lines.current];
  const why = [];
  const profile = currentLedger?.profileSha256;
  if (typeof profile === "string" && !baseDeclares(baseTree, "profileSha256", DECLARED_IN.ledger)) {
    const cell = ` (profile sha256 ${profile.slice(0, 12)})`;
    if (y.includes(cell)) {
      y = y.split(cell).join("");
      why.push("the current side names its calibration profile, which the base tree does not have");
    }
  }
  const numbers = /\d+\.\d+/g;
  const [xs, ys] = [x.match(numbers) ?? [], y.match(numbers) ?? []];
  if (xs.length === ys.length && x.replace(numbers, "#") === y.replace(numbers, "#")) {
    const rounded = (v, printed) => v.toFixed(printed.split(".")[1].length) === printed;
    const unexplained = xs.filter((p, i) => p !== ys[i] && !usdPairs.some((u) => rounded(u.base, p) && rounded(u.current, ys[i])));
    if (unexplained.length === 0 && xs.some((p, i) => p !== ys[i])) {
      why.push("a money amount on a rounding boundary, printed from report.json's floating-point noise");
      y = x;
    }
  }
  return x === y && why.length > 0 ? `line ${lines.line}: ${why.join("; ")}` : null;
}

/** The value following `flag` in argv, or undefined; a flag given without one is an error. */
function valueOf(argv, flag) {
  const at = argv.indexOf(flag);
  if (at < 0) return undefined;
  const v = argv[at + 1];
  if (v === undefined || v.startsWith("--")) throw new SideError(`${flag} needs a value`);
  return v;
}

function main(argv) {
  const keep = argv.includes("--keep");
  const VALUED = ["--reuse", "--base-docker-host", "--current-docker-host"];
  let reuse;
  let hosts;
  try {
    reuse = valueOf(argv, "--reuse");
    hosts = { base: valueOf(argv, "--base-docker-host"), current: valueOf(argv, "--current-docker-host") };
  } catch (err) {
    process.stderr.write(`compare-demo: ${err.message}\n`);
    return 2;
  }
  const rev = argv.find((a, i) => !a.startsWith("--") && !VALUED.includes(argv[i - 1]));
  if (!rev && !reuse) {
    process.stderr.write("usage: npm run compare-demo -- BASE_REV [--keep] [--reuse DIR] [--base-docker-host URL] [--current-docker-host URL]\n");
    return 2;
  }
  const dir = reuse ?? mkdtempSync(join(realpathSync(tmpdir()), "study-runner-compare-demo-"));
  // A runner that is root starts the doc-bridge engine as uid 65534 (docs/doc-bridge.md), which must read the base worktree.
  if (!reuse) chmodSync(dir, 0o755);
  try {
    let base;
    let current;
    if (reuse) [base, current] = ["base", "current"].map((n) => JSON.parse(readFileSync(join(dir, `${n}.json`), "utf8")));
    else {
      mkdirSync(dir, { recursive: true });
      base = runSide("base", baseTree(rev, dir), dir, engineOf(hosts.base));
      current = runSide("current", HERE, dir, engineOf(hosts.current));
    }
    const differences = compare(base, current);
    process.stdout.write(
      `compare-demo: ${differences === 0 ? "the same" : `${differences} difference(s)`} (base ${rev ?? "(reused)"} ${base.seconds} s, current ${current.seconds} s)\n`,
    );
    return differences === 0 ? 0 : 1;
  } catch (err) {
    if (!(err instanceof SideError)) throw err;
    process.stderr.write(`compare-demo: ${err.message}\n`);
    return 2;
  } finally {
    if (!reuse && existsSync(join(dir, "base-tree"))) spawnSync("git", ["worktree", "remove", "--force", join(dir, "base-tree")], { cwd: HERE });
    if (keep || reuse) process.stderr.write(`compare-demo: outputs kept in ${dir}\n`);
    else rmSync(dir, { recursive: true, force: true });
  }
}

process.exitCode = main(process.argv.slice(2));
