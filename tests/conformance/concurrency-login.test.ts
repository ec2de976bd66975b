/**
 * `--concurrency 2` with the real image and the login copied into each attempt (no test
 * stand-in): refused through the shipped command before anything is reserved, saying why. With
 * the scripted model on a socket (no real login used) the same flag runs the pair at once.
 */
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../support/cli.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { buildIndex } from "../../src/mcp/reference-server.ts";
import { realImage } from "./support.ts";

let work = "";
let image = "";
let rootArgs: string[] = [];
beforeAll(async () => {
  image = (await realImage()).id;
  work = await mkdtemp(join(tmpdir(), "sr-conf-conc-"));
  const corpus = await makeDemoCorpus(join(work, "corpus"));
  for (const { dir } of Object.values(corpus)) await buildIndex(dir);
  rootArgs = Object.entries(corpus).flatMap(([name, { dir }]) => ["--root", `${name}=${dir}`]);
  await writeTestLogin(join(work, "login"));
}, 300_000);
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe("--concurrency with the login copy", () => {
  it("--concurrency 2 with the real image and a copied login is refused before any reservation, naming the single-use refresh token", async () => {
    const output = join(work, "ledger.json");
    const r = await runCli(
      [
        "--pilot",
        "--transport",
        "cli",
        "--approve-budget",
        "--image",
        image,
        "--isolation",
        "offline",
        "--claude-config-dir",
        join(work, "login"),
        "--output",
        output,
        "--credentials",
        "login-copy",
        "--concurrency",
        "2",
        ...rootArgs,
      ],
      { env: { STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" }, timeoutMs: 120_000 },
    );
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/--concurrency 2 is refused: attempts get a copy of the CLI login, and two containers at once would hold the same single-use refresh token/);
    expect(r.stderr).toMatch(/Run with --concurrency 1; nothing was charged/);
    expect((await readdir(work)).includes("ledger.json")).toBe(false);
  }, 180_000);

  it("demo --pilot --real-cli --concurrency 2: no real login is used, both arms of the pair run at once and complete", async () => {
    const demo = join(work, "demo");
    const r = await runCli(["demo", "--pilot", "--real-cli", "--concurrency", "2", "--workdir", demo], { timeoutMs: 240_000 });
    expect(r.code, r.stderr).toBe(0);
    // Both arms started before either ended.
    const lines = r.stderr.split("\n").filter((l) => /^study-runner: \[\d\/2\]/.test(l));
    expect(lines.slice(0, 2).every((l) => l.endsWith(": started"))).toBe(true);
    const file = (await readdir(join(demo, "ledgers"))).find((f) => /^run-.*\.json$/.test(f) && !f.endsWith(".adjudication.json"))!;
    const ledger = await readLedger(join(demo, "ledgers", file));
    expect(ledger.modelApi).toBe("test");
    expect(ledger.scheduling).toMatchObject({ concurrency: 2, pairs: "together" });
    expect(ledger.observations.map((o) => [o.arm, o.status])).toEqual([
      ["repository", "completed"],
      ["mcp", "completed"],
    ]);
  }, 300_000);
});
