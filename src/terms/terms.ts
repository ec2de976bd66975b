import { z } from "zod";

/**
 * The words every stage shares, defined once: the ledger validates them, the plan, the
 * transcript reader, the budget and the CLI's flag choices all read these same lists, so a new
 * status or transport cannot be added in one place and forgotten in another. Only zod below.
 */

/** How an attempt reaches the model: the Claude Code CLI in a container, or the Messages API. */
export const TransportSchema = z.enum(["cli", "http"]);
export type Transport = z.infer<typeof TransportSchema>;

/**
 * The two arms of a paired study: the repository alone (the manifest's `scenarios[0]`), or the
 * repository plus the doc-bridge MCP server (`scenarios[1]`).
 */
export const ArmSchema = z.enum(["repository", "mcp"]);
export type Arm = z.infer<typeof ArmSchema>;

/** How much of the plan a run runs: the pilot's first attempts or the whole plan. */
export const ModeSchema = z.enum(["pilot", "full"]);
export type Mode = z.infer<typeof ModeSchema>;

/**
 * How a CLI attempt is authenticated (docs/gateway.md, docs/isolation.md): gateway = the
 * credential stays on the host and requests go through the runner's metering gateway; login-copy
 * = each container holds a copy of the CLI login.
 */
export const CredentialModeSchema = z.enum(["gateway", "login-copy"]);
export type CredentialMode = z.infer<typeof CredentialModeSchema>;

/** Who answered a run: the model through the real API, or a test stand-in (no evidence about the model). */
export const ModelApiSchema = z.enum(["anthropic", "test"]);
export type ModelApi = z.infer<typeof ModelApiSchema>;

/** How one attempt ended; anything but "completed" stops the run. */
export const AttemptStatusSchema = z.enum(["completed", "failed", "timed-out", "budget-exceeded", "invalid-setup", "invalid-cost"]);
export type AttemptStatus = z.infer<typeof AttemptStatusSchema>;
