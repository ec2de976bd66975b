/**
 * The suite's one demo: `study-runner demo --quiet` (the fake model's full study of 36 attempts, its
 * blind adjudication and its reports, one attempt at a time as the demo defaults to: the setting its
 * strictest reader, tests/integration/ledger-verify.test.ts, was written for), made once per
 * `vitest run` for every test that only needs a demo's outputs. tests/support/run-folder-setup.ts
 * (a globalSetup of the integration tier) gives each run an empty folder; the first test file that asks
 * makes the demo there, under a lock, while the other parallel workers wait for it and then find it
 * made. It is made lazily: a run of files that never ask does not pay for it.
 *
 * Each caller gets its own copy (`demoCopy`), so a test may write beside the ledger (`report
 * --private`, `report --format inspect`) or tamper with it without another test seeing it. The
 * shared folder is digested when made and checked before every copy: a test that wrote into it
 * fails the next one, naming the rule.
 */
import { createHash } from "node:crypto";
import { cp, lstat, readdir, readFile, readlink, writeFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { lock } from "proper-lockfile";
import { inject } from "vitest";
import { type CliResult, runCli } from "./cli.ts";

export interface DemoFiles {
  ledger: string;
  adjudication: string;
  report: { markdown: string; json: string; html: string };
}

/** What `demo` printed and the files it names, all inside the caller's copy. */
export interface DemoCopy {
  run: CliResult;
  /** The copy's workdir (the demo's `--workdir`). */
  workdir: string;
  demo: DemoFiles;
}

interface Made {
  run: CliResult;
  workdir: string;
  demo: DemoFiles | null;
  digest: string;
}

/** Every file, folder and link under `dir`: its path, mode and bytes (or target). */
export async function folderDigest(dir: string): Promise<string> {
  const hash = createHash("sha256");
  const walk = async (d: string): Promise<void> => {
    for (const name of (await readdir(d)).sort()) {
      const path = join(d, name);
      const s = await lstat(path);
      hash.update(`${relative(dir, path)}\0${s.mode}\0`);
      if (s.isDirectory()) await walk(path);
      else if (s.isSymbolicLink()) hash.update(await readlink(path));
      else if (s.isFile()) hash.update(await readFile(path));
      hash.update("\0");
    }
  };
  await walk(dir);
  return hash.digest("hex");
}

/** The demo's last JSON object on stdout names its files. */
function demoFilesOf(stdout: string): DemoFiles | null {
  const at = stdout.lastIndexOf('{\n  "demo"');
  if (at < 0) return null;
  try {
    return (JSON.parse(stdout.slice(at)) as { demo: DemoFiles }).demo;
  } catch {
    return null;
  }
}

let made: Promise<Made> | undefined;

function sharedDemo(): Promise<Made> {
  made ??= (async () => {
    const root = inject("runFolder");
    if (!root) throw new Error("no run folder for the shared demo: tests/support/run-folder-setup.ts must be a globalSetup of the project (vitest.config.ts)");
    const release = await lock(root, { realpath: false, stale: 60_000, retries: { retries: 1_200, minTimeout: 500, maxTimeout: 1_000 } });
    try {
      const record = join(root, "made.json");
      const existing = await readFile(record, "utf8").catch(() => null);
      if (existing !== null) return JSON.parse(existing) as Made;
      const workdir = join(root, "demo");
      const run = await runCli(["demo", "--quiet", "--workdir", workdir], { timeoutMs: 900_000 });
      const result: Made = { run, workdir, demo: demoFilesOf(run.stdout), digest: run.code === 0 ? await folderDigest(workdir) : "" };
      await writeFile(record, JSON.stringify(result));
      return result;
    } finally {
      await release();
    }
  })();
  return made;
}

/**
 * The suite's demo where it was made, for a caller that only reads it (and writes nothing beside
 * it): its workdir and files as the demo named them, so a record that quotes its ledger's path
 * quotes these. Throws as `demoCopy` does.
 */
export async function demoAsMade(): Promise<{ workdir: string; demo: DemoFiles }> {
  const m = await sharedDemo();
  if (m.run.code !== 0 || m.demo === null) throw new Error(`the shared demo exited ${m.run.code}: ${m.run.stderr.slice(-3000)}`);
  if ((await folderDigest(m.workdir)) !== m.digest) {
    throw new Error(`the shared demo in ${m.workdir} was changed after it was made: a test must write only into its own copy (demoCopy)`);
  }
  return { workdir: m.workdir, demo: m.demo };
}

/**
 * The suite's demo copied to `dest` (which must not exist): the run's exit code and output, and its
 * files, every path rebased into the copy. Throws when the demo failed (with its stderr) or when the
 * shared folder changed since it was made.
 */
export async function demoCopy(dest: string): Promise<DemoCopy> {
  const made = await demoAsMade();
  const m = { ...(await sharedDemo()), demo: made.demo };
  await cp(m.workdir, dest, { recursive: true, errorOnExist: true, force: false });
  const rebase = (p: string) => {
    const rel = relative(m.workdir, p);
    if (rel.startsWith("..")) throw new Error(`the demo named ${p}, outside its workdir ${m.workdir}`);
    return join(dest, rel);
  };
  const demo: DemoFiles = {
    ledger: rebase(m.demo.ledger),
    adjudication: rebase(m.demo.adjudication),
    report: { markdown: rebase(m.demo.report.markdown), json: rebase(m.demo.report.json), html: rebase(m.demo.report.html) },
  };
  const run = { ...m.run, stdout: m.run.stdout.replaceAll(m.workdir, dest), stderr: m.run.stderr.replaceAll(m.workdir, dest) };
  return { run, workdir: dest, demo };
}
