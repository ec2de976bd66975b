/**
 * The pilot through the shipped command with the gateway, the default of `--transport cli`, on
 * the real engine with the fake claude image (which sends no model request): every attempt
 * container has network none and only `lo` even in the standard profile, holds a placeholder
 * login, and the host login's token is in no record the container could write.
 */
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { PLACEHOLDER_EXPIRES_AT } from "../../src/gateway/credential.ts";
import { freshLogin, ledgerOf, preparePipeline, prepareRun, recordsOf, recordsText, startPipeline, waitForAttemptContainer, type Pipeline } from "../support/pipeline.ts";

const TOKEN = "test-host-login-token-for-the-gateway-pilot";
let p: Pipeline;
beforeAll(async () => {
  p = await preparePipeline("gateway");
}, 300_000);
afterAll(() => p?.cleanup());

describe("the pilot with --credentials gateway (the default)", () => {
  // contract: R281
  it("runs both attempts with network none and only the loopback interface, a placeholder login and no copy of the host token", async () => {
    const loginDir = await freshLogin(p, TOKEN);
    const run = await prepareRun(p, {
      loginDir,
      // The gateway is the default; pipeline runs ask for login-copy, so drop that choice here.
      behaviour: { default: { kind: "ok", delayMs: 1500 } },
    });
    run.args = run.args.filter((a, i, all) => a !== "--credentials" && all[i - 1] !== "--credentials").map((a, i, all) => (all[i - 1] === "--isolation" ? "standard" : a));
    const started = startPipeline(run);
    const id = await waitForAttemptContainer(p, started, "0");
    const inspected = await new Docker().getContainer(id).inspect();
    const result = await started.done;
    expect(result.code, result.stderr).toBe(0);
    const ledger = await ledgerOf(run);
    expect(ledger).toMatchObject({ credentials: "gateway", isolation: "standard" });
    expect(ledger.observations.map((o) => o.status)).toEqual(["completed", "completed"]);
    expect(inspected.HostConfig.NetworkMode).toBe("none");
    // No name to look up, so no network sandbox of the engine's at all (contract R281).
    expect((inspected.Config as { NetworkDisabled?: boolean }).NetworkDisabled).toBe(true);
    expect((inspected.Config.Env ?? []).join("\n")).not.toContain(TOKEN);
    const records = await recordsOf(run);
    expect(records.length).toBeGreaterThanOrEqual(2);
    for (const { record } of records) {
      expect(record.networkInterfaces).toEqual(["lo"]);
      expect(record.localhostNamed).toBe(false);
      expect(record.credentialsExpiresAt).toBe(PLACEHOLDER_EXPIRES_AT);
    }
    expect(await recordsText(run)).not.toContain(TOKEN);
    expect(ledger.observations.every((o) => o.gateway !== undefined && o.gateway.refused === 0)).toBe(true);
    expect((await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid) })).filter((c) => c.running)).toEqual([]);
  }, 300_000);
});
