import type { Resolve } from "../isolation/policy.ts";
import type { EgressLimits } from "../isolation/proxy.ts";

/**
 * The knobs only a test sets, in one object: a run kind's config carries them as `testHooks`,
 * and production code (src/cli, src/demo) never sets it (tests/unit/test-hooks.test.ts greps for
 * it). What a hidden `--test-*` flag, the fake image or the scripted API sets is configuration
 * the command line reaches, not a hook, and stays a field of the config.
 */
export interface TestHooks {
  /**
   * The stdout bound of each container (STDOUT_LIMIT_BYTES otherwise): a test
   * floods a smaller one to see the attempt end truncated.
   */
  stdoutLimitBytes?: number;
  /** Strict isolation: the egress proxy's resolver and bounds (docs/isolation.md). */
  egress?: {
    /** Instead of the system resolver (public addresses only): a test maps an allowed name to a loopback sink. */
    resolve?: Resolve;
    /** Instead of EGRESS_LIMITS: a test lowers the tunnel and record bounds to reach them. */
    limits?: Partial<EgressLimits>;
  };
}
