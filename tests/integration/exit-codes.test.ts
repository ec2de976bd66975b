/**
 * Every exit code `study-runner` documents, checked twice: the documents (`--help`, README.md,
 * docs/pilot.md) state exactly the codes and meanings the code returns (src/cli/exit-codes.ts over
 * ExitCode), and a run of the shipped command through the fake claude image on the real Docker
 * engine ends with each code, the way its meaning says.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { execFile } from "node:child_process";
import { mkdir, open, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { EXIT_CODES } from "../../src/cli/exit-codes.ts";
import { ExitCode } from "../../src/util/errors.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { runCli } from "../support/cli.ts";
import { freshLogin, ledgerOf, leftovers, prepareRun, preparePipeline, runPipeline, startPipeline, summaryOf, waitForAttemptContainer, type Pipeline } from "../support/pipeline.ts";

const execFileP = promisify(execFile);

describe("the documented exit codes are the code's", () => {
  const table = new Map(EXIT_CODES.map(({ code, meaning }) => [code, meaning]));

  it("the list covers every ExitCode, once each", () => {
    expect([...table.keys()].sort((a, b) => a - b)).toEqual(Object.values(ExitCode).sort((a, b) => a - b));
    expect(table.size).toBe(EXIT_CODES.length);
  });

  it("study-runner --help and run --help list exactly those codes and meanings", async () => {
    for (const args of [["--help"], ["run", "--help"]]) {
      const r = await runCli(args);
      expect(r.code).toBe(0);
      const block = r.stdout.slice(r.stdout.indexOf("Exit codes:\n"));
      const lines = block.split("\n").slice(1);
      const rows = lines.slice(
        0,
        lines.findIndex((l) => !/^ {2}\d/.test(l)),
      );
      expect(new Map(rows.map((l) => [Number(l.trim().split(/\s+/)[0]), l.trim().replace(/^\d+\s+/, "")]))).toEqual(table);
    }
  });

  it.each(["README.md", "docs/pilot.md"])("%s carries the same table", async (file) => {
    const text = await readFile(join(PROJECT_ROOT, file), "utf8");
    const rows = [...text.matchAll(/^\| `(\d+)` \| (.*) \|$/gm)].map((m) => [Number(m[1]), m[2]!] as const);
    expect(new Map(rows)).toEqual(table);
    expect(rows).toHaveLength(table.size);
  });
});

describe("a run that ends with each documented code", () => {
  let p: Pipeline;
  const mounts: string[] = [];
  beforeAll(async () => {
    p = await preparePipeline("exit-codes");
  }, 300_000);
  afterAll(() => p?.cleanup());
  afterEach(async () => {
    for (const m of mounts.splice(0)) await execFileP("umount", [m]).catch(() => undefined);
  });

  it("0: both pilot attempts completed, the run awaits adjudication", async () => {
    const r = await runPipeline(p, { loginDir: await freshLogin(p) });
    expect(r.code, r.stderr).toBe(0);
    expect(summaryOf(r.stdout).status).toBe("awaiting-adjudication");
  }, 180_000);

  it("1: an attempt did not complete; blocked, with its summary on stdout", async () => {
    const r = await runPipeline(p, { loginDir: await freshLogin(p), behaviour: { attempts: { "0": { kind: "exit", code: 1 } } } });
    expect(r.code, r.stderr).toBe(1);
    expect(summaryOf(r.stdout)).toMatchObject({ status: "blocked", attempts: { run: 1 } });
    expect((await ledgerOf(r.run)).status).toBe("blocked");
  }, 180_000);

  it("2: a refused start, nothing spent and nothing written", async () => {
    const r = await runPipeline(p, { loginDir: await freshLogin(p), env: { STUDY_MODEL: "claude-unpriced-9" } });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stdout).toBe("");
    await expect(readFile(r.run.output)).rejects.toThrow(/ENOENT/);
  }, 180_000);

  // contract: R288
  it("2 also for a TMPDIR too deep for the runner's sockets: refused before anything is reserved, naming TMPDIR and the limit", async () => {
    // Before, the doc-bridge attempt failed on its truncated socket and the runner never exited.
    const tmp = join(p.work, `deep-${"d".repeat(Math.max(1, 64 - p.work.length))}`);
    await mkdir(tmp, { recursive: true });
    const r = await runPipeline(p, { loginDir: await freshLogin(p), tmp, timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toContain(`TMPDIR ${tmp} is too deep for the runner's sockets`);
    expect(r.stderr).toMatch(/over the 107 bytes a unix socket's path may have; set TMPDIR to a shorter folder/);
    await expect(readFile(r.run.output)).rejects.toThrow(/ENOENT/);
    expect(await leftovers(tmp)).toEqual([]);
  }, 180_000);

  it("3: the runner's own fault (the ledger's file system is full)", async () => {
    const dir = join(p.work, "full");
    await mkdir(dir, { recursive: true });
    await execFileP("mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", dir]);
    mounts.push(dir);
    const filler = await open(join(dir, "filler"), "a");
    try {
      for (;;) await filler.write(Buffer.alloc(4096, 0x78));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
    } finally {
      await filler.close();
    }
    const r = await runPipeline(p, { loginDir: await freshLogin(p), args: ["--output", join(dir, "ledger.json")] });
    expect(r.code, r.stderr).toBe(3);
    expect(r.stderr).toMatch(/the disk is full/);
  }, 180_000);

  it.each([
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ] as const)(
    "%s during an attempt: exit %i, blocked, summary on stdout, the ledger names the signal",
    async (signal, code) => {
      const run = await prepareRun(p, { loginDir: await freshLogin(p), behaviour: { attempts: { "0": { kind: "sleep", seconds: 120 } } } });
      const started = startPipeline(run);
      await waitForAttemptContainer(p, started);
      started.child.kill(signal);
      const r = await started.done;
      expect(r.code, r.stderr).toBe(code);
      expect(summaryOf(r.stdout).status).toBe("blocked");
      expect((await ledgerOf(run)).statusReason).toMatch(new RegExp(signal));
    },
    180_000,
  );

  // A refusal after the attempt's reservation (here: the login expired between two attempts) is an
  // attempt that did not complete, so it must end like one: exit 1, the summary on stdout, and its
  // reservation charged.
  it("1 also for a refusal after a reservation: the login expired between attempts", async () => {
    const loginDir = await freshLogin(p);
    const run = await prepareRun(p, { loginDir, behaviour: { attempts: { "0": { kind: "ok", delayMs: 4000 } } } });
    const started = startPipeline(run);
    await waitForAttemptContainer(p, started);
    const path = join(loginDir, ".credentials.json");
    const login = JSON.parse(await readFile(path, "utf8"));
    login.claudeAiOauth.expiresAt = Date.now() - 1000;
    await writeFile(path, JSON.stringify(login), { mode: 0o600 });
    const r = await started.done;
    const ledger = await ledgerOf(run);
    expect(ledger.observations.length, r.stderr).toBe(2); // the second attempt was reserved, then refused
    expect(r.code, r.stderr).toBe(1);
    expect(summaryOf(r.stdout)).toMatchObject({ status: "blocked", attempts: { run: 2 } });
    expect(ledger.observations[1]).toMatchObject({ phase: "settled", status: "failed", chargedUsd: 0.1 });
  }, 180_000);
});
