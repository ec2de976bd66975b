import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import type { StartConfig } from "../../src/session/run.ts";

/**
 * The config of a session run on the real engine in the tests: the given checkouts, the pinned CLI
 * version, no network, the given login folder, and the cap and budgets of the fake-image session
 * tests (cap 5 USD, 0.5 USD a call, 10 USD a session) unless `extra` sets others.
 */
export function sessionTestConfig(
  o: { manifestPath: string; roots: Record<string, string>; output: string; model: string; image: string; loginDir: string },
  extra: Partial<StartConfig> = {},
): StartConfig {
  return {
    manifestPath: o.manifestPath,
    roots: new Map(Object.entries(o.roots)),
    output: o.output,
    model: o.model,
    image: o.image,
    expectedCliVersion: CLAUDE_CODE_VERSION,
    capUsd: 5,
    callBudgetUsd: 0.5,
    sessionBudgetUsd: 10,
    isolation: "offline",
    claudeConfigDir: o.loginDir,
    ...extra,
  };
}
