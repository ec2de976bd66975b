#!/usr/bin/env node
// `npm run bench [-- name...]`: runs each benchmark in its own process
// (`node --import tsx bench/<name>.ts`), one after the other so they never compete for the
// machine, prints the one JSON line each prints, then a final line with every target's
// verdict. Progress goes to stderr. Exit code 1 when a figure could not be measured (a
// benchmark failed, timed out or printed no figures); a missed target is reported, not an error.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { cpus, loadavg } from "node:os";

const BENCH_DIR = dirname(fileURLToPath(import.meta.url));
const ROOT = dirname(BENCH_DIR);
/** Order and time limit of each benchmark (concurrency alone, 36 real attempts four times, takes about ten minutes). */
const BENCHMARKS = [
  { name: "transcript", timeoutMs: 90_000 },
  { name: "gateway", timeoutMs: 60_000 },
  { name: "gateway-memory", timeoutMs: 120_000 },
  { name: "export", timeoutMs: 240_000 },
  { name: "run-exports", timeoutMs: 180_000 },
  { name: "attempt", timeoutMs: 600_000 },
  { name: "stream", timeoutMs: 240_000 },
  { name: "network-setup", timeoutMs: 300_000 },
  { name: "wrapper", timeoutMs: 240_000 },
  { name: "doc-bridge", timeoutMs: 300_000 },
  { name: "provenance", timeoutMs: 120_000 },
  { name: "real-cli", timeoutMs: 180_000 },
  { name: "demo", timeoutMs: 240_000 },
  { name: "startup", timeoutMs: 900_000 },
  { name: "concurrency", timeoutMs: 1_200_000 },
];

let current;
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    // The benchmark runs in its own process group: end it and whatever it started.
    if (current) {
      try {
        process.kill(-current.pid, "SIGTERM");
      } catch {}
    }
    process.exit(signal === "SIGINT" ? 130 : 143);
  });
}

async function runOne({ name, timeoutMs }) {
  const started = Date.now();
  const child = spawn(process.execPath, ["--import", "tsx", join(BENCH_DIR, `${name}.ts`)], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "inherit"],
    // Its own process group, so a timeout also ends the docker/git children it started.
    detached: true,
  });
  current = child;
  let out = "";
  child.stdout.on("data", (d) => (out += d.toString("utf8")));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {}
  }, timeoutMs);
  const [code] = await once(child, "exit");
  clearTimeout(timer);
  current = undefined;
  const line = out.trim().split("\n").at(-1) ?? "";
  let result;
  try {
    result = JSON.parse(line);
  } catch {
    result = { bench: name, error: timedOut ? `timed out after ${timeoutMs} ms` : `printed no JSON line (exit ${code})` };
  }
  if (timedOut) result = { ...result, error: `timed out after ${timeoutMs} ms` };
  else if (code !== 0 && !result.error) result = { ...result, error: `exited ${code}` };
  result.benchWallMs = Date.now() - started;
  return result;
}

const only = process.argv.slice(2);
const unknown = only.filter((n) => !BENCHMARKS.some((b) => b.name === n));
if (unknown.length) {
  process.stderr.write(`bench: unknown benchmark ${unknown.join(", ")}; known: ${BENCHMARKS.map((b) => b.name).join(", ")}\n`);
  process.exit(2);
}
const selected = only.length ? BENCHMARKS.filter((b) => only.includes(b.name)) : BENCHMARKS;
const started = Date.now();
const loadBefore = loadavg()[0];
const results = [];
for (const bench of selected) {
  process.stderr.write(`bench: ${bench.name}\n`);
  const result = await runOne(bench);
  results.push(result);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
const failed = results.filter((r) => r.error).map((r) => r.bench);
const targets = Object.fromEntries(results.filter((r) => "targetMet" in r).map((r) => [r.bench, r.targetMet]));
process.stdout.write(
  `${JSON.stringify({
    bench: "summary",
    at: new Date().toISOString(),
    wallMs: Date.now() - started,
    machine: {
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? null,
      node: process.version,
      loadavg1mBefore: Math.round(loadBefore * 100) / 100,
      loadavg1mAfter: Math.round(loadavg()[0] * 100) / 100,
    },
    targets,
    failed,
  })}\n`,
);
process.exitCode = failed.length ? 1 : 0;
