/**
 * `study-runner demo --pilot --real-cli`: the demo a person runs to see the real pinned CLI drive
 * the runner, with the scripted model behind a unix socket. Checks what that person would look at.
 */
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, type CliResult } from "../support/cli.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { realImage } from "./support.ts";

let work = "";
let run: CliResult;

beforeAll(async () => {
  await realImage(); // installs and builds under the shared lock, so the demo finds both cached
  work = await mkdtemp(join(tmpdir(), "sr-conf-demo-"));
  run = await runCli(["demo", "--pilot", "--real-cli", "--quiet", "--workdir", work], { timeoutMs: 240_000 });
}, 300_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe("demo --pilot --real-cli", () => {
  it("completes both attempts in the real image and removes the API socket afterwards", async () => {
    expect(run.code, run.stderr).toBe(0);
    const ledgerFile = (await readdir(join(work, "ledgers"))).find((f) => /^pilot-.*\.json$/.test(f) && !f.includes("adjudication"))!;
    const ledger = await readLedger(join(work, "ledgers", ledgerFile));
    expect(ledger.image?.ref).toBe("study-runner/claude-code:2.1.296");
    expect(ledger.cliVersion).toBe("2.1.296");
    expect(ledger.isolation).toBe("offline");
    expect(ledger.observations.map((o) => [o.arm, o.status])).toEqual([
      ["repository", "completed"],
      ["mcp", "completed"],
    ]);
    // The scripted answer says that no model ran, so nobody mistakes it for one.
    for (const o of ledger.observations) expect(o.answer).toMatch(/^Scripted demo answer \(no model ran\)/);
    expect(ledger.observations[1]!.toolCallsByName).toEqual({ "mcp__doc-bridge__doc_search": 1, "mcp__doc-bridge__doc_get": 1 });
    // The API's socket folder is removed once the run ends.
    expect((await readdir(work)).filter((n) => n.startsWith("model-api-"))).toEqual([]);
  });
});
