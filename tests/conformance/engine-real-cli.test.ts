/**
 * `demo --pilot --real-cli` on an engine that shares no files with the runner (the second engine of
 * tests/support/second-engine.ts): the real pinned CLI, its image built on that engine, reaches the
 * runner's model gateway and doc-bridge over the engine's API alone (the engine-api channel).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runCli } from "../support/cli.ts";
import { startSecondEngine } from "../support/second-engine.ts";
import { assertRealCliPilot } from "./real-cli-pilot.ts";
import { realImage } from "./support.ts";

let work = "";
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe("demo --pilot --real-cli on an engine that shares no files with the runner", () => {
  // contract: R240
  it("builds the real image there and completes both attempts through the gateway over the engine's API, metered equal to the transcript", async () => {
    await realImage(); // the binary installed once under the shared lock; the demo builds the image on the second engine from it
    const host = await startSecondEngine();
    work = await mkdtemp(join(tmpdir(), "sr-conf-engine-demo-"));
    const run = await runCli(["demo", "--pilot", "--real-cli", "--quiet", "--workdir", work], { env: { DOCKER_HOST: host }, timeoutMs: 600_000 });
    const ledger = await assertRealCliPilot(run, work);
    expect(ledger.sandbox).toMatchObject({ channel: "engine-api", endpoint: host });
  }, 900_000);
});
