/**
 * How a session call is authenticated and what its metered spend must agree with: the command's
 * --credentials choice and the check of the gateway's spend against the cumulative difference.
 */
import { describe, expect, it } from "vitest";
import { runtimeOptions } from "../../src/session/cli.ts";
import { meteredCostProblem } from "../../src/session/run.ts";
import { UsageError } from "../../src/util/errors.ts";

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
  // contract: R112
  it("must equal the call's cumulative difference within 1e-9 USD, else the call names both figures", () => {
    expect(meteredCostProblem({ meteredCostUsd: 0.012345678901, callCostUsd: 0.012345678901 + 5e-10 })).toBeNull();
    expect(meteredCostProblem({ meteredCostUsd: 0.01, callCostUsd: 0.03 })).toBe("the gateway metered 0.01 USD for this call but total_cost_usd grew by 0.03 USD");
    // Without the gateway (or without a result) there is nothing to compare.
    expect(meteredCostProblem({ meteredCostUsd: null, callCostUsd: 0.03 })).toBeNull();
    expect(meteredCostProblem({ meteredCostUsd: 0.01, callCostUsd: null })).toBeNull();
  });
});
