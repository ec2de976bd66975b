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

/** How one attempt ended; anything but "completed" stops the run. */
export const AttemptStatusSchema = z.enum(["completed", "failed", "timed-out", "budget-exceeded", "invalid-setup", "invalid-cost"]);
export type AttemptStatus = z.infer<typeof AttemptStatusSchema>;
