/**
 * How a session call is authenticated and what its metered spend must agree with: the command's
 * --credentials choice and the check of the gateway's spend against the cumulative difference.
 */
import { describe, expect, it } from "vitest";
import { parseSessionRuntimeFlags as runtimeOptions } from "../../src/cli/config/commands.ts";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { meteredCostProblem, startSessions } from "../../src/session/run.ts";
import { RefusalError, UsageError } from "../../src/util/errors.ts";
import { makeSessionDemo } from "../../src/demo/sessions.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { fakeClaudeRuntime, UNIT_IMAGE } from "../support/unit-study.ts";

describe("session --credentials", () => {
  it("defaults to the gateway, and to the login copy with a scripted API's socket", () => {
    expect(runtimeOptions({}).credentials).toBe("gateway");
    expect(runtimeOptions({ modelApiSocket: "/tmp/api.sock" }).credentials).toBe("login-copy");
    expect(runtimeOptions({ credentials: "login-copy" }).credentials).toBe("login-copy");
  });

  it("refuses a socket that would bypass the gateway, a token file without it, and an unknown mode, naming the flag", () => {
    expect(() => runtimeOptions({ credentials: "gateway", modelApiSocket: "/tmp/api.sock" })).toThrow(UsageError);
    expect(() => runtimeOptions({ credentials: "gateway", modelApiSocket: "/tmp/api.sock" })).toThrow(/--model-api-socket .*--credentials login-copy/);
    expect(() => runtimeOptions({ credentials: "login-copy", oauthTokenFile: "/tmp/t" })).toThrow(/--oauth-token-file applies to --credentials gateway only/);
    expect(() => runtimeOptions({ credentials: "keychain" })).toThrow(/--credentials keychain: give 'gateway' or 'login-copy'/);
  });
});

describe("the metered spend of a session call", () => {
  // contract: R112, R202
  it("must equal the call's cumulative difference to the pico-USD, else the call names both figures", () => {
    expect(meteredCostProblem({ meteredCostUsd: 0.012345678901, callCostUsd: 0.012345678901 })).toBeNull();
    // One pico-USD apart: a tolerance of 1e-9 USD let this pass.
    expect(meteredCostProblem({ meteredCostUsd: 0.012345678901, callCostUsd: 0.012345678902 })).toBe(
      "the gateway metered 0.012345678901 USD for this call but total_cost_usd grew by 0.012345678902 USD",
    );
    expect(meteredCostProblem({ meteredCostUsd: 0.01, callCostUsd: 0.03 })).toBe("the gateway metered 0.01 USD for this call but total_cost_usd grew by 0.03 USD");
    // Without the gateway (or without a result) there is nothing to compare.
    expect(meteredCostProblem({ meteredCostUsd: null, callCostUsd: 0.03 })).toBeNull();
    expect(meteredCostProblem({ meteredCostUsd: 0.01, callCostUsd: null })).toBeNull();
  });
});

describe("a session's call budget through the gateway", () => {
  // contract: R114
  it("is refused before the ledger exists when it cannot hold one request of the model, naming --call-budget-usd", async () => {
    const work = await mkdtemp(join(tmpdir(), "sr-unit-session-limit-"));
    try {
      const demo = await makeSessionDemo(join(work, "sessions"));
      const loginDir = join(work, "login");
      await writeTestLogin(loginDir, "test-access-token-not-a-real-credential");
      // An image that is not the fake: its CLI would send real requests.
      const runtime = fakeClaudeRuntime(() => 0, { fakeImage: false });
      const output = join(work, "sessions.json");
      const err = await startSessions(
        {
          manifestPath: demo.manifestPath,
          roots: new Map(Object.entries(demo.roots)),
          output,
          model: "claude-sonnet-5-5",
          image: UNIT_IMAGE,
          expectedCliVersion: CLAUDE_CODE_VERSION,
          capUsd: 1,
          callBudgetUsd: 0.001,
          sessionBudgetUsd: 1,
          isolation: "offline",
          claudeConfigDir: loginDir,
          credentials: "gateway",
        },
        { runtime },
      ).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RefusalError);
      expect((err as Error).message).toMatch(/^--call-budget-usd 0\.001 USD cannot hold one request of claude-sonnet-5-5 through the gateway/);
      // Nothing was made: no ledger, no call's container (only the version probe ran).
      await expect(stat(output)).rejects.toMatchObject({ code: "ENOENT" });
      expect(runtime.created.filter((spec) => !spec.cmd.includes("--version"))).toHaveLength(0);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });
});
