import type { Transport } from "../terms/terms.ts";

/**
 * What the runner's USD and token figures are, said wherever they are shown (stdout summary,
 * ledger, reports). A researcher sizing a budget from them must not read an estimate as a bill,
 * nor compare token counts that carry the agent's own harness with counts from elsewhere.
 */

export interface SpendLabel {
  /** What a USD figure is. */
  usd: string;
  /** What a token count includes, and so what it may be compared with. */
  tokens: string;
}

const CLI: SpendLabel = Object.freeze({
  usd: "USD figures are the Claude Code CLI's own list-price estimate (its total_cost_usd, cross-checked against the runner's CLI_PRICES table), not a bill: on a subscription login nothing is billed per token",
  tokens: "token counts include the Claude Code system prompt and harness, so they compare only between the two scenarios of this study",
});

const HTTP: SpendLabel = Object.freeze({
  usd: "USD figures are the runner's own computation at the protocol's upper prices per million tokens, an estimate, not the API's invoice",
  tokens: "token counts are the Messages API's and include the runner's system prompt and tool definitions, so they compare only between the two scenarios of this study",
});

/** The adjudicator is a Claude Code run whatever the answering transport was. */
export const ADJUDICATION_USD_LABEL = "the adjudication's USD figures are the Claude Code CLI's own list-price estimate as well, not a bill";

export function spendLabel(transport: Transport): SpendLabel {
  return transport === "cli" ? CLI : HTTP;
}

/** The sentence that follows a pilot's extrapolated full-run cost wherever it is printed. */
export function extrapolationCaveat(transport: Transport): string {
  return transport === "cli"
    ? "an extrapolation of the CLI's list-price estimate, not of a bill: a budget approved on it approves estimated, not billed, spend"
    : "an extrapolation of the runner's estimate at the protocol's upper prices, not of an invoice";
}
