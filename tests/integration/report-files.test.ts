import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { syntheticLedger, syntheticRecord } from "../support/adjudication-fixtures.ts";
import { runCli, runnerEntry, type CliResult } from "../support/cli.ts";

// `report --out-dir` writes its three files or none. The failure is a real one: the shell's file
// size limit (RLIMIT_FSIZE, `ulimit -f`, in 512-byte blocks) set between the sizes of report.md
// and the larger files, so a write fails with EFBIG as on a disk that fills up; before, report.md
// stayed alone and a rerun was refused with "report.md already exists".

let work = "";
let ledgerPath = "";
let recordPath = "";
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-report-files-"));
  const ledger = syntheticLedger({ mode: "full" });
  ledgerPath = join(work, "run.ledger.json");
  const bytes = `${JSON.stringify(ledger, null, 2)}\n`;
  await writeFile(ledgerPath, bytes, { mode: 0o600 });
  recordPath = join(work, "run.adjudication.json");
  await writeFile(recordPath, JSON.stringify(syntheticRecord(ledger, createHash("sha256").update(bytes).digest("hex"))), { mode: 0o600 });
});
afterAll(() => rm(work, { recursive: true, force: true }));

/** The CLI under `ulimit -f blocks`, started as runCli starts it, with the environment runCli gives it. */
async function runLimited(blocks: number, args: string[]): Promise<CliResult> {
  const entry = await runnerEntry();
  return new Promise((done, reject) => {
    const child = spawn("sh", ["-c", 'ulimit -f "$0" && exec "$@"', String(blocks), process.execPath, entry, ...args], {
      cwd: PROJECT_ROOT,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, TMPDIR: process.env.TMPDIR },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString("utf8")));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString("utf8")));
    child.on("error", reject);
    child.on("close", (code) => done({ code, stdout, stderr }));
  });
}

describe("report --out-dir", () => {
  // contract: R188
  it("writes all of its files or none: a write that fails leaves nothing, exit 3 saying so, and a rerun then writes the report", async () => {
    const args = (out: string) => ["report", "--ledger", ledgerPath, "--adjudication", recordPath, "--out-dir", out];
    const whole = join(work, "whole");
    const first = await runCli(args(whole));
    expect(first.code, first.stderr).toBe(0);
    const size = async (name: string) => (await stat(join(whole, name))).size;
    const [md, json, html] = [await size("report.md"), await size("report.json"), await size("report.html")];
    // A limit that report.md fits under and the other two do not.
    const blocks = Math.ceil(md / 512) + 1;
    expect(Math.min(json, html)).toBeGreaterThan(blocks * 512);

    const out = join(work, "out");
    const failed = await runLimited(blocks, args(out));
    expect(failed.code, failed.stderr).toBe(3);
    expect(failed.stderr).toContain(`study-runner: the report was not written to ${out}`);
    expect(failed.stderr).toContain("nothing of it is left there");
    expect(failed.stderr).not.toContain("internal error");
    expect(failed.stderr).not.toContain("ledger check");
    // The folder this call made is gone with the files; a folder that was there stays, empty.
    await expect(stat(out)).rejects.toMatchObject({ code: "ENOENT" });
    const kept = join(work, "kept");
    await mkdir(kept);
    const again = await runLimited(blocks, args(kept));
    expect(again.code, again.stderr).toBe(3);
    expect(await readdir(kept)).toEqual([]);

    const rerun = await runCli(args(kept));
    expect(rerun.code, rerun.stderr).toBe(0);
    expect((await readdir(kept)).sort()).toEqual(["report.html", "report.json", "report.md"]);
  }, 300_000);
});
