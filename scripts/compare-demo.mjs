#!/usr/bin/env node
// `npm run compare-demo -- BASE_REV [--keep] [--reuse DIR] [--base-docker-host URL] [--current-docker-host URL]`:
// does a change keep what the demo writes, and does a demo on one Docker engine write what it writes on another?
//
// Runs `npm run demo` (the full fake-model study, its blind adjudication and its reports) in a
// temporary `git worktree` of BASE_REV (with this tree's node_modules linked in, or the base's own
// installed from npm's cache when its lock file differs) and in the current
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
// code (the fake claude's binary, the doc-bridge bundle and engine revision) is explained when the trees account for it. An id
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
// Two more, each derived again from the trees: a report file's differences that the report code
// accounts for (beside the base's demo the current tree reports the base's own ledger and record;
// the base's file is compared again with that one, and only what differs from it counts), and an
// adjudication item's arm guess that each side's own tree's fake claude gives to its own tree's
// arm-guess prompt for that item (the fake model answered differently; contract R279).
//
// Both demos run on a Docker engine the script starts for itself (a dockerd with its own socket,
// data and exec roots in the temporary folder, sharing the runner's files, stopped at the end)
// unless a side is given one (the flags below, or DOCKER_HOST in the shell): on a shared engine
// another checkout's build moves `study-runner/fake-claude:<version>`, and a base from before
// contract R255 creates its containers from that tag.
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
//   --base-docker-host URL     run the base side's demo with DOCKER_HOST=URL (default: this shell's DOCKER_HOST,
//                              else the script's own engine, else the local engine)
//   --current-docker-host URL  run the current side's demo with DOCKER_HOST=URL (default as for the base);
//                              `npm run compare-demo --
//                              HEAD --current-docker-host URL` compares this tree on two engines
import { spawn, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";
import { baseDependencies } from "./base-dependencies.mjs";

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
function normalizer(side, codeValues = []) {
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
  // Digests of code each tree accounts for (the doc-bridge engine's revision, see engineRevisions), where any string quotes them.
  prefixes.push(...codeValues);
  let values = [];
  const quoted = (t) => [...prefixes, ...values].reduce((acc, [v, name]) => acc.split(v).join(name), t);
  // An Inspect log's attachments are named by a hash of their content: named again by a hash of
  // their normalized content, so two attachments are the same exactly when what they hold is.
  let attachments = new Map();
  const renamed = (t) => t.replace(/attachment:\/\/([0-9a-f]{32})/g, (whole, key) => (attachments.has(key) ? `attachment://${attachments.get(key)}` : whole));
  const attachmentNames = (value, out = new Map()) => {
    if (Array.isArray(value)) for (const v of value) attachmentNames(v, out);
    else if (value !== null && typeof value === "object")
      for (const [k, v] of Object.entries(value)) {
        if (k === "attachments" && v !== null && typeof v === "object" && !Array.isArray(v))
          for (const [key, held] of Object.entries(v)) if (typeof held === "string") out.set(key, `<attachment:${createHash("sha256").update(quoted(held)).digest("hex").slice(0, 12)}>`);
        attachmentNames(v, out);
      }
    return out;
  };

  function walk(value, key, inDuration) {
    if (Array.isArray(value)) return value.map((v) => walk(v, key, inDuration));
    if (value !== null && typeof value === "object") {
      const duration = inDuration || DURATION_METRICS.has(value.metric);
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [attachments.get(k) ?? k, walk(v, k, duration)]));
    }
    const kind = FIELD_KIND.get(key);
    if (kind && (typeof value === "string" || typeof value === "number")) return placeholder(kind, String(value));
    if (typeof value === "number" && (inDuration || isDurationField(key))) return DURATION;
    return typeof value === "string" ? headlineDurations(renamed(quoted(value))) : value;
  }
  return {
    collect(value) {
      walk(value, "", false);
      values = known();
    },
    json: (value) => {
      attachments = attachmentNames(value);
      return walk(value, "", false);
    },
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
 * tree's fake claude script (`src/stand-ins/fake-claude/claude.cjs`; `claude.mjs` there in a tree
 * from before it was CommonJS, or `docker/fake-claude/claude.mjs` in one from before the stand-ins moved), and the engine's must be the bundle hash each tree
 * computes for its own engine command. Anything else is a difference.
 */
const CODE_DIGESTS = [
  { path: /^\$(\.adjudicator)?\.image\.binarySha256$/, what: "the fake claude's binary", explain: fakeClaudeChanged },
  { path: /^\$\.docBridge\.bundleHash$/, what: "the doc-bridge engine's bundle", explain: engineChanged },
];

const sha256Of = (path) => createHash("sha256").update(readFileSync(path)).digest("hex");

/** Where a tree keeps the fake claude script: src/stand-ins/ now (claude.mjs before it was CommonJS), docker/fake-claude/ in trees from before the move; "" when none. */
const fakeClaudeFile = (tree) =>
  [join(tree, "src", "stand-ins", "fake-claude", "claude.cjs"), join(tree, "src", "stand-ins", "fake-claude", "claude.mjs"), join(tree, "docker", "fake-claude", "claude.mjs")].find((f) => existsSync(f)) ?? "";

/** Each side's recorded digest is its own tree's fake claude, and the two files differ. */
function fakeClaudeChanged(trees, recorded) {
  // Where each tree keeps it: src/stand-ins/ now, docker/fake-claude/ in trees from before the move.
  if (!trees.every((t) => existsSync(fakeClaudeFile(t)))) return null;
  const [a, b] = trees.map((t) => sha256Of(fakeClaudeFile(t)));
  return a === recorded[0] && b === recorded[1] && a !== b ? "the fake claude script differs between the trees; each side's digest is its own tree's file" : null;
}

/**
 * Each side's recorded bundle hash is the one its own tree derives for its own engine command
 * (`engineBundle(referenceEngineCommand())`, run in that tree: which files the command runs, the
 * server's sources, the lock file), and the two differ. Names what differs between the two lists.
 */
function engineChanged(trees, recorded) {
  const derive = (tree) => {
    const out = inTree(
      tree,
      'const { referenceEngineCommand } = await import("./src/mcp/preflight.ts"); const { engineBundle } = await import("./src/mcp/bundle-hash.ts");' +
        "const b = await engineBundle(referenceEngineCommand(), process.cwd()); process.stdout.write(JSON.stringify({ hash: b.bundleHash, files: b.files.map((f) => [f.label, f.sha256]) }));",
    );
    return out === null ? null : JSON.parse(out);
  };
  if (!trees.every((t) => existsSync(join(t, "src", "mcp", "bundle-hash.ts")))) return null;
  const [a, b] = trees.map(derive);
  if (!a || !b || a.hash !== recorded[0] || b.hash !== recorded[1] || a.hash === b.hash) return null;
  const [la, lb] = [new Map(a.files), new Map(b.files)];
  const changed = [...new Set([...la.keys(), ...lb.keys()])].filter((f) => la.get(f) !== lb.get(f)).sort();
  return `each side's hash is its own tree's engine command's; what differs: ${changed.join(", ")}`;
}

/**
 * The doc-bridge engine's revision in a tree: "reference-" and the first 12 hex of the sha256 of the
 * server file that builds the indexes (REFERENCE_ENGINE_REVISION in src/mcp/reference-server.ts;
 * the index records it and the engine answers with the index's), the file `referenceIndexCommand()` names.
 */
function engineRevisionOf(tree) {
  if (!existsSync(join(tree, "src", "mcp", "preflight.ts"))) return null;
  return inTree(
    tree,
    'const { referenceIndexCommand } = await import("./src/mcp/preflight.ts"); const { readFileSync } = await import("node:fs"); const { createHash } = await import("node:crypto");' +
      'const c = referenceIndexCommand(); process.stdout.write("reference-" + createHash("sha256").update(readFileSync(c[c.length - 2])).digest("hex").slice(0, 12));',
  );
}

/** What `code` (an ES module run through tsx in `tree`, importing that tree's sources) prints, or null when it fails. */
function inTree(tree, code) {
  const r = spawnSync("node", ["--import", "tsx", "--input-type=module", "-e", code], { cwd: tree, encoding: "utf8" });
  return r.status === 0 ? r.stdout : null;
}

/**
 * The doc-bridge engine's revision (`docBridge.engineRevision` and `engineRevisions`, quoted in every
 * doc-bridge tool result the Inspect logs hold) is a digest of code, like the bundle hash: the
 * server file that built the indexes. When each side's ledger records the revision its own tree
 * derives, and the two differ, both are replaced wherever they are quoted; anything else is left to differ.
 */
function engineRevisions(trees, ledgers) {
  const recorded = ledgers.map((ledger) => {
    const docBridge = ledger?.docBridge;
    const all = new Set([docBridge?.engineRevision, ...Object.values(docBridge?.engineRevisions ?? {})]);
    return all.size === 1 && typeof docBridge?.engineRevision === "string" ? docBridge.engineRevision : null;
  });
  if (recorded.includes(null) || recorded[0] === recorded[1]) return null;
  const derived = trees.map(engineRevisionOf);
  if (derived[0] !== recorded[0] || derived[1] !== recorded[1]) return null;
  return {
    base: recorded[0],
    current: recorded[1],
    why: `the doc-bridge engine's revision, base ${recorded[0]}, current ${recorded[1]}: each side's is the one its own tree derives (a digest of the engine's server file), replaced wherever a file quotes it`,
  };
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
  if (tree !== HERE) side.reportedByCurrent = reportedByCurrent(side, dir);
  writeFileSync(join(dir, `${name}.json`), JSON.stringify(side, null, 2));
  process.stderr.write(`compare-demo: ${name} done in ${side.seconds} s\n`);
  return side;
}

/**
 * The base's ledger and adjudication record reported by the current tree (`report --out-dir` and
 * `report --format inspect`, the manifest read where the base's ledger records it, in the base
 * worktree): the reports the current code writes for the base's run. Null, with the reason on
 * stderr, when the current tree cannot report them.
 */
function reportedByCurrent(side, dir) {
  const out = join(dir, `${side.name}-reported-by-current`);
  try {
    const args = ["bin/study-runner.mjs", "report", "--ledger", side.ledger, "--adjudication", side.adjudication];
    const report = lastJson(sh("node", [...args, "--out-dir", join(out, "report")], HERE, `the current tree's report of the ${side.name}'s records`));
    const inspect = lastJson(sh("node", [...args, "--format", "inspect", "--out-dir", join(out, "inspect")], HERE, `the current tree's Inspect logs of the ${side.name}'s records`));
    return { report, inspect: inspect.inspect };
  } catch (err) {
    if (!(err instanceof SideError)) throw err;
    process.stderr.write(`compare-demo: the ${side.name}'s reports are compared as its own tree wrote them only: ${err.message}\n`);
    return null;
  }
}

// ---- an engine of the comparison's own -------------------------------------------------------------

/**
 * A Docker engine only this comparison uses: a dockerd with its own socket, data and exec roots
 * under `dir`, no bridge and no iptables, in the runner's own mount namespace (so it sees the
 * runner's files as the local engine does). On a shared engine another checkout building
 * `study-runner/fake-claude:<version>` moves that tag; a base from before contract R255 created its
 * adjudicator's containers from the tag and so ran another tree's fake claude (whose verdicts it
 * could not read), and the base's own build moved the tag under everyone else. Null, with the
 * reason on stderr, when no dockerd can be started here (not root, none installed).
 */
async function ownEngine(dir) {
  const root = join(dir, "engine");
  mkdirSync(root, { recursive: true });
  const host = `unix://${root}/docker.sock`;
  writeFileSync(join(root, "daemon.json"), "{}\n");
  const args = ["--bridge=none", "--iptables=false", "--data-root", join(root, "data"), "--exec-root", join(root, "x"), "--pidfile", join(root, "docker.pid"), "--config-file", join(root, "daemon.json"), "-H", host];
  const log = openSync(join(root, "dockerd.log"), "a");
  const child = spawn("dockerd", args, { stdio: ["ignore", log, log] });
  const failed = new Promise((resolve) => {
    child.on("error", (err) => resolve(err.message));
    child.on("exit", (code, signal) => resolve(`dockerd exited (${code ?? signal})`));
  });
  for (let i = 0; i < 120; i++) {
    const gone = await Promise.race([failed, new Promise((r) => setTimeout(() => r(null), 500))]);
    if (gone !== null) {
      process.stderr.write(`compare-demo: no engine of its own (${gone}; see ${join(root, "dockerd.log")}); the sides run on the shared engine, where another checkout's build can move the fake image's tag\n`);
      return null;
    }
    if (spawnSync("docker", ["-H", host, "version", "--format", "{{.Server.Version}}"], { encoding: "utf8" }).status === 0) {
      process.stderr.write(`compare-demo: an engine of its own at ${host}\n`);
      return {
        host,
        stop: async () => {
          child.kill("SIGTERM");
          await Promise.race([failed, new Promise((r) => setTimeout(r, 60_000))]);
          try {
            rmSync(join(root, "data"), { recursive: true, force: true });
          } catch (err) {
            process.stderr.write(`compare-demo: the own engine's data is left in ${join(root, "data")}: ${err.message}\n`);
          }
        },
      };
    }
  }
  child.kill("SIGTERM");
  process.stderr.write(`compare-demo: no engine of its own (dockerd did not answer in 60 s; see ${join(root, "dockerd.log")}); the sides run on the shared engine\n`);
  return null;
}

/**
 * A worktree of `rev` in `dir` with the dependencies its lock file names: this tree's node_modules
 * linked in when the lock files agree, else installed from npm's cache (scripts/base-dependencies.mjs).
 */
function baseTree(rev, dir) {
  const tree = join(dir, "base-tree");
  sh("git", ["worktree", "add", "--detach", tree, rev], HERE, `git worktree add ${rev}`);
  let how;
  try {
    how = baseDependencies(HERE, tree);
  } catch (err) {
    throw new SideError(`the base's dependencies: ${err.message}`);
  }
  if (how === "installed") process.stderr.write(`compare-demo: the base's lock file differs from this tree's: its own dependencies installed from npm's cache in ${tree}\n`);
  return tree;
}

// ---- the comparison -------------------------------------------------------------------------------

/** The files of one side to compare, by a name both sides share. */
function filesOf(side) {
  const files = { ledger: side.ledger, "adjudication record": side.adjudication, "report.md": side.report.markdown, "report.json": side.report.json, "report.html": side.report.html };
  for (const f of readdirSync(side.inspect).sort()) files[`inspect log #${Object.keys(files).length - 4}`] = join(side.inspect, f);
  return files;
}

/** The files a report writes (report.md, report.json, report.html, the Inspect logs), not the run's records. */
const isReportFile = (name) => name.startsWith("report.") || name.startsWith("inspect log");

/**
 * Compares the two sides file by file. When the base side holds its records as reported by the
 * current tree (`reportedByCurrent`), a report file that differs is compared again with that one:
 * the same records written by the two trees' report code account for what differs between the
 * base's file and that one, and only what differs between that one and the current side's (what
 * the records themselves make differ) is counted.
 */
function compare(base, current) {
  const rebased = base.reportedByCurrent ? { ...base, report: base.reportedByCurrent.report, inspect: base.reportedByCurrent.inspect } : null;
  const sides = { base, current, ...(rebased ? { rebased } : {}) };
  const files = Object.fromEntries(Object.entries(sides).map(([k, side]) => [k, filesOf(side)]));
  const names = [...new Set([...Object.keys(files.base), ...Object.keys(files.current)])];
  const read = (path) => (isJson(path) ? JSON.parse(readFileSync(path, "utf8")) : readFileSync(path, "utf8"));
  const content = {};
  for (const side of Object.keys(sides)) {
    content[side] = {};
    for (const name of names) if (files[side][name]) content[side][name] = read(files[side][name]);
  }
  const revisions = engineRevisions([base.tree, current.tree], [content.base.ledger, content.current.ledger]);
  if (revisions) process.stdout.write(`  (explained) ${revisions.why}\n`);
  // The rebased side is the current report code over the base's ledger: it quotes the base's revision.
  const codeValues = (k) => (revisions ? [[k === "current" ? revisions.current : revisions.base, "<doc-bridge engine revision>"]] : []);
  const norm = Object.fromEntries(Object.keys(sides).map((k) => [k, normalizer(sides[k], codeValues(k))]));
  // Every volatile value of a side is known before any file is normalized.
  for (const side of Object.keys(sides)) for (const name of names) if (isJson(files[side][name] ?? "")) norm[side].collect(content[side][name]);
  let guessed;
  const guesses = () => (guessed ??= explainedGuesses(sides, content));
  /** Side `x`'s report money amounts that differ from the current side's only in floating-point noise, for the lines that print them; once per side. */
  const usdPairsOf = {};
  const usdPairs = (x) => {
    const reportJson = [content[x]["report.json"], content.current["report.json"]];
    usdPairsOf[x] ??= reportJson.every((r) => r !== undefined) ? floatNoisePairs(jsonDifferences(norm[x].json(reportJson[0]), norm.current.json(reportJson[1]))) : [];
    return usdPairsOf[x];
  };
  /** What differs in file `name` between side `x` and the current side: the differences not explained, and the notes of those explained. */
  const differencesIn = (x, name) => {
    const [a, b] = [content[x][name], content.current[name]];
    const json = isJson(files.current[name]);
    const normalized = json ? [norm[x].json(a), norm.current.json(b)] : [norm[x].text(a), norm.current.text(b)];
    const all = json ? jsonDifferences(...normalized).map((shown) => ({ shown })) : textDifferences(...normalized);
    const explained = all.map(({ shown, ...lines }) =>
      json
        ? (explainCodeDigest(shown, [base.tree, current.tree]) ??
          (name === "ledger" ? explainSandbox(shown, [a, b], [base, current]) : null) ??
          explainAddedField(shown, base.tree, name) ??
          explainFloatNoise(shown) ??
          explainGuess(shown, [a, b], guesses()) ??
          (isReportFile(name) ? explainLedgerFieldAbsent(shown, base.tree, content.base.ledger, content.current.ledger) : null))
        : explainReportLine(lines, base.tree, content.current.ledger, usdPairs(x)),
    );
    // The same explanation of many places (an arm guess per item) is printed once, with its count.
    const counts = new Map();
    for (const e of explained) if (e !== null) counts.set(e, (counts.get(e) ?? 0) + 1);
    const notes = [...counts].map(([e, n]) => `  (explained) ${n > 1 ? `${n} differences: ` : ""}${e}`);
    return { found: all.filter((_, i) => explained[i] === null).map((d) => d.shown), notes };
  };
  let differences = 0;
  for (const name of names) {
    if (content.base[name] === undefined || content.current[name] === undefined) {
      process.stdout.write(`${name}: only in ${content.base[name] === undefined ? "current" : "base"}\n`);
      differences++;
      continue;
    }
    let { found, notes } = differencesIn("base", name);
    if (found.length && rebased && isReportFile(name) && content.rebased[name] !== undefined) {
      const again = differencesIn("rebased", name);
      notes = [
        `  (explained) ${found.length} difference(s) from the base's ${name} are the report code's: the current tree's \`report\` of the base's ledger and adjudication record writes ${again.found.length ? "a file that differs from the current side's only as listed" : "the current side's file"}`,
        ...again.notes,
      ];
      found = again.found;
    }
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

// ---- the fake model's arm guess -------------------------------------------------------------------

/**
 * Run in a tree: the tree's own fake claude's answer to the arm-guess prompt the tree's own code
 * builds (`buildArmGuessPrompt`, `armGuessJsonSchema`, the answer put in its neutral form by
 * `maskText` with no term, which is the masked answer when no term matched), with the side's
 * adjudicator behaviour file, for each item given on stdin. The fake runs on the host, as its
 * header allows, in a temporary folder of its own.
 */
const GUESS_CODE = `
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
const input = JSON.parse(readFileSync(0, "utf8"));
const { buildArmGuessPrompt, armGuessJsonSchema } = await import(join(process.cwd(), "src/adjudicate/prompt.ts"));
const { maskText } = await import(join(process.cwd(), "src/adjudicate/mask.ts"));
const dir = mkdtempSync(join(tmpdir(), "compare-demo-fake-"));
writeFileSync(join(dir, "behaviour.json"), input.behaviour);
const guesses = input.items.map((item) => {
  const prompt = buildArmGuessPrompt({ itemId: item.itemId, task: { question: item.question }, maskedAnswer: maskText(item.answer, []).text });
  const r = spawnSync(process.execPath, [input.fake, "-p", "--output-format", "stream-json", "--verbose", "--json-schema", armGuessJsonSchema(), prompt], { encoding: "utf8", env: { PATH: process.env.PATH, HOME: dir, FAKE_CLAUDE_DIR: dir } });
  const result = (r.stdout ?? "").split("\\n").map((l) => { try { return JSON.parse(l); } catch { return null; } }).find((e) => e?.type === "result");
  return result?.structured_output?.armGuess ?? null;
});
rmSync(dir, { recursive: true, force: true });
process.stdout.write(JSON.stringify(guesses));
`;

/**
 * What a side's own tree's fake claude answers to its own tree's arm-guess prompt for each of the
 * record's items at `indexes` (the question from the manifest the ledger names, the answer from the
 * ledger, the behaviour file the side's demo wrote in its workdir): null for an item whose answer had
 * a term masked, and null for all when the rest cannot be had (no single behaviour file, no manifest,
 * no prompt code, no fake).
 */
function fakeGuesses(side, ledger, record, indexes) {
  const fake = fakeClaudeFile(side.tree);
  const behaviour = existsSync(side.work) ? readdirSync(side.work).filter((f) => /^adjudicator-behaviour-.*\.json$/.test(f)) : [];
  const manifestPath = ledger?.protocol?.manifestPath;
  if (!fake || behaviour.length !== 1 || typeof manifestPath !== "string" || !existsSync(manifestPath)) return null;
  if (!["prompt.ts", "mask.ts"].every((f) => existsSync(join(side.tree, "src", "adjudicate", f)))) return null;
  const tasks = new Map((JSON.parse(readFileSync(manifestPath, "utf8")).tasks ?? []).map((t) => [t.id, t.question]));
  // An item whose answer had a term masked is left out (its masked answer is not derived here): its guess stays unexplained.
  const derivable = indexes.filter((i) => {
    const item = record.items[i];
    return !Object.keys(item.maskedTerms ?? {}).length && typeof ledger.observations?.[item.observationIndex]?.answer === "string" && typeof tasks.get(item.task) === "string";
  });
  const items = derivable.map((i) => ({ itemId: record.items[i].itemId, question: tasks.get(record.items[i].task), answer: ledger.observations[record.items[i].observationIndex].answer }));
  const input = JSON.stringify({ fake, behaviour: readFileSync(join(side.work, behaviour[0]), "utf8"), items });
  const r = spawnSync("node", ["--import", "tsx", "--input-type=module", "-e", GUESS_CODE], { cwd: side.tree, input, encoding: "utf8" });
  if (r.status !== 0) return null;
  const answered = JSON.parse(r.stdout);
  return indexes.map((i) => answered[derivable.indexOf(i)] ?? null);
}

/**
 * The record's items whose arm guess differs between the sides and is each side's own fake claude's
 * answer to its own tree's prompt (the fake model answered differently, the runner recorded what it
 * answered), for the same true arm: item index -> the two sides' guess-call container ids, which
 * the record's `armGuess` and the Inspect logs' `arm_guess` carry.
 */
function explainedGuesses(sides, content) {
  const [b, c] = ["base", "current"].map((k) => content[k]["adjudication record"]);
  const explained = new Map();
  if (!Array.isArray(b?.items) || !Array.isArray(c?.items) || b.items.length !== c.items.length) return explained;
  const differing = b.items.map((_, i) => i).filter((i) => b.items[i].armGuess && c.items[i].armGuess && b.items[i].armGuess.guess !== c.items[i].armGuess.guess);
  if (!differing.length) return explained;
  const [gb, gc] = ["base", "current"].map((k) => fakeGuesses(sides[k], content[k].ledger, content[k]["adjudication record"], differing));
  if (!gb || !gc) return explained;
  differing.forEach((i, j) => {
    const [x, y] = [b.items[i].armGuess, c.items[i].armGuess];
    if (gb[j] !== null && gb[j] === x.guess && gc[j] === y.guess && x.arm === y.arm) explained.set(i, [x.run?.containerId, y.run?.containerId]);
  });
  return explained;
}

/** The value at a path `$.a[0].b` of the differences, or undefined. */
function valueAt(value, path) {
  let v = value;
  for (const [, key, index] of path.slice(1).matchAll(/\.([^.[\]]+)|\[(\d+)\]/g)) v = v?.[key ?? Number(index)];
  return v;
}

/**
 * A difference in an arm guess (`….armGuess.guess|correct` in the record, `….arm_guess.guess|correct`
 * in an Inspect log) of an item whose guess each side's own fake claude accounts for, or null.
 */
function explainGuess(difference, raw, guesses) {
  const m = /^(\$\S*\.(?:armGuess|arm_guess))\.(guess|correct): base /.exec(difference);
  if (!m || guesses.size === 0) return null;
  const ids = raw.map((r) => valueAt(r, m[1])?.run?.containerId);
  if (!ids.every((id) => typeof id === "string") || ![...guesses.values()].some(([x, y]) => x === ids[0] && y === ids[1])) return null;
  return `an arm guess (${m[1].replace(/\[\d+\]/g, "[…]")}.${m[2]}): the fake model's guess changed: each side's is what its own tree's fake claude answers to its own tree's arm-guess prompt for that item`;
}

/**
 * A report's field that is null in the base's report and a ledger's value in the current side's
 * (`$.run.profileSha256: base null, current "…"`), explained when the base's ledger holds no such
 * field and the base's ledger code declares none (the current tree reports such a ledger's field
 * as null), and the current side's ledger holds exactly that value. Or null.
 */
function explainLedgerFieldAbsent(difference, baseTree, baseLedger, currentLedger) {
  const m = /^(\$\S*)\.([A-Za-z_][A-Za-z0-9_]*): base null, current (.+)$/.exec(difference);
  if (!m || !baseLedger || !currentLedger || m[2] in baseLedger || !(m[2] in currentLedger) || show(currentLedger[m[2]]) !== m[3]) return null;
  if (baseDeclares(baseTree, m[2], DECLARED_IN.ledger)) return null;
  return `${m[1]}.${m[2]}: the base's ledger holds no \`${m[2]}\` (the base's ${DECLARED_IN.ledger.join(" and ")} declares none), and the current side's is its ledger's`;
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

async function main(argv) {
  let engine = null;
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
      // A side given no engine (no flag, no DOCKER_HOST) runs on one only this comparison uses.
      if ((hosts.base === undefined || hosts.current === undefined) && process.env.DOCKER_HOST === undefined) engine = await ownEngine(dir);
      base = runSide("base", baseTree(rev, dir), dir, hosts.base ?? engine?.host ?? engineOf(undefined));
      current = runSide("current", HERE, dir, hosts.current ?? engine?.host ?? engineOf(undefined));
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
    await engine?.stop();
    if (!reuse && existsSync(join(dir, "base-tree"))) spawnSync("git", ["worktree", "remove", "--force", join(dir, "base-tree")], { cwd: HERE });
    if (keep || reuse) process.stderr.write(`compare-demo: outputs kept in ${dir}\n`);
    else rmSync(dir, { recursive: true, force: true });
  }
}

process.exitCode = await main(process.argv.slice(2));
