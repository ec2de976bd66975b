import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFileSync } from "node:child_process";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCli } from "../support/cli.ts";
import { filesText, MODEL, pilotScripts, prepareCorpus, TEST_KEY, usage, type Corpus } from "../support/http-fixture.ts";
import { startScriptedApi, type ScriptedApi } from "../../src/stand-ins/scripted-api/server.ts";
import type { ScriptInput } from "../../src/stand-ins/scripted-api/script.ts";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { readLedger } from "../../src/ledger/store.ts";

// The shipped `study-runner` command with the http transport, as a user starts it, against the
// scripted Messages API on loopback. Wrappers around git and the doc-bridge server record whether
// any child received the key.

let c: Corpus;
let wrappers: string;
let gitRecord: string;
let serverRecord: string;
let serverCommand: string;
let engineDir = "";

const quote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;

beforeAll(async () => {
  c = await prepareCorpus("cli");
  wrappers = join(c.work, "wrappers");
  await mkdir(wrappers);
  gitRecord = join(c.work, "git-children.txt");
  // The doc-bridge engine runs as an unprivileged uid (contract: the engine is sandboxed): its
  // wrapper and the file it records into live in a folder that user can read and append to.
  engineDir = await mkdtemp(join(tmpdir(), "sr-http-cli-engine-"));
  await chmod(engineDir, 0o755);
  serverRecord = join(engineDir, "server-children.txt");
  await writeFile(serverRecord, "", { mode: 0o666 });
  await chmod(serverRecord, 0o666);
  const realGit = execFileSync("sh", ["-c", "command -v git"], { encoding: "utf8" }).trim();
  const record = (file: string) => `if [ -n "\${ANTHROPIC_API_KEY+x}" ]; then echo has-key >> ${quote(file)}; else echo no-key >> ${quote(file)}; fi\n`;
  await writeFile(join(wrappers, "git"), `#!/bin/sh\n${record(gitRecord)}exec ${quote(realGit)} "$@"\n`);
  const server = join(engineDir, "doc-bridge.sh");
  await writeFile(server, `#!/bin/sh\n${record(serverRecord)}exec ${referenceEngineCommand().map(quote).join(" ")}\n`);
  await chmod(join(wrappers, "git"), 0o755);
  await chmod(server, 0o755);
  serverCommand = JSON.stringify([server]);
}, 120_000);
afterAll(async () => {
  await c?.cleanup();
  if (engineDir) await rm(engineDir, { recursive: true, force: true });
});

interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
  output: string;
  tmp: string;
  api: ScriptedApi;
}

async function run(script: ScriptInput[], o: { args?: string[]; env?: Record<string, string | undefined>; baseUrl?: string } = {}): Promise<CliRun> {
  const api = await startScriptedApi({ port: 0, script });
  try {
    const dir = await mkdtemp(join(c.work, "cli-"));
    const tmp = join(dir, "tmp");
    await mkdir(tmp);
    const output = join(dir, "ledger.json");
    const r = await runCli(
      [
        "--pilot",
        "--approve-budget",
        "--output",
        output,
        "--root",
        `ledgerlite=${c.roots.get("ledgerlite")}`,
        "--api-base-url",
        o.baseUrl ?? api.url!,
        "--doc-bridge-command",
        serverCommand,
        "--input-price-usd-per-mtok",
        "1",
        ...(o.args ?? []),
      ],
      {
        env: {
          PATH: `${wrappers}:${process.env.PATH}`,
          TMPDIR: tmp,
          STUDY_MODEL: MODEL,
          STUDY_BUDGET_USD: "1",
          STUDY_OUTPUT_PRICE_USD_PER_MTOK: "5",
          ANTHROPIC_API_KEY: TEST_KEY,
          ...o.env,
        },
      },
    );
    return { ...r, output, tmp, api };
  } finally {
    await api.close();
  }
}

const lines = async (file: string) => (await readFile(file, "utf8").catch(() => "")).split("\n").filter(Boolean);

describe("study-runner with the http transport", () => {
  it("is the default transport: a pilot completes in both arms; no child receives the key, and it is in no file or output", async () => {
    const gitBefore = (await lines(gitRecord)).length;
    const serverBefore = (await lines(serverRecord)).length;
    const r = await run(pilotScripts());
    expect(r.code, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout);
    expect(summary).toMatchObject({ status: "awaiting-adjudication", transport: "http", attempts: { run: 2, byStatus: { completed: 2 } } });
    expect(r.stderr.split("\n").filter(Boolean)).toHaveLength(4);
    const ledger = await readLedger(r.output);
    expect(ledger.transport).toBe("http");
    expect(r.api.requests).toHaveLength(6);
    expect(r.api.requests.every((q) => q.auth.apiKey)).toBe(true);

    // git ran (roots check, ls-tree, cat-file) and the doc-bridge server started for the preflight
    // and once for the doc-bridge attempt: none of them had the key.
    const git = (await lines(gitRecord)).slice(gitBefore);
    expect(git.length).toBeGreaterThan(3);
    expect(new Set(git)).toEqual(new Set(["no-key"]));
    expect((await lines(serverRecord)).slice(serverBefore)).toEqual(["no-key", "no-key"]);

    for (const text of [r.stdout, r.stderr, await readFile(r.output, "utf8"), await filesText(r.tmp)]) expect(text).not.toContain(TEST_KEY);
    expect(r.stdout + r.stderr).not.toContain("Half to even");
  }, 120_000);

  it("keeps the key out of every file and output when the API echoes it back in an error body", async () => {
    const r = await run([
      {
        name: "repository",
        turns: [
          { error: { status: 401, type: "authentication_error", message: `invalid x-api-key: ${TEST_KEY}` }, echoApiKey: true },
          { answer: "x", usage: usage() },
        ],
      },
    ]);
    expect(r.code).toBe(1);
    const summary = JSON.parse(r.stdout);
    expect(summary.status).toBe("blocked");
    expect(summary.statusReason).toContain("invalid x-api-key: [redacted]");
    for (const text of [r.stdout, r.stderr, await readFile(r.output, "utf8"), await filesText(r.tmp)]) expect(text).not.toContain(TEST_KEY);
    const ledger = await readLedger(r.output);
    expect(ledger.observations[0]!.calls![0]).toMatchObject({ outcome: "api-error", httpStatus: 401 });
    expect(ledger.observations[0]!.chargedUsd).toBe(ledger.observations[0]!.calls![0]!.reservationUsd);
  }, 120_000);

  it("refuses an API base other than the real API or loopback, and --api-base-url with the cli transport, before anything", async () => {
    for (const [args, message] of [
      [["--api-base-url", "http://example.com:8080"], /--api-base-url http:\/\/example\.com:8080 is refused/],
      [["--api-base-url", "https://api.anthropic.com.evil.example"], /is refused/],
    ] as const) {
      const r = await run(pilotScripts(), { baseUrl: args[1] });
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(message);
      expect(r.api.requests).toHaveLength(0);
      await expect(readFile(r.output)).rejects.toThrow(/ENOENT/);
    }
    const cli = await run(pilotScripts(), { args: ["--transport", "cli"] });
    expect(cli.code).toBe(2);
    expect(cli.stderr).toMatch(/--api-base-url applies to --transport http only/);
    const noKey = await run(pilotScripts(), { env: { ANTHROPIC_API_KEY: undefined, STUDY_OUTPUT_PRICE_USD_PER_MTOK: undefined } });
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toMatch(/ANTHROPIC_API_KEY is not set/);
    expect(noKey.stderr).toMatch(/--output-price-usd-per-mtok \(or STUDY_OUTPUT_PRICE_USD_PER_MTOK\)/);
    expect(noKey.api.requests).toHaveLength(0);
  }, 120_000);
});
