import { pico, picoToUsd, usdToPico } from "./money.ts";
import { pricesFor, tier1MaxPromptTokens, type TierPrices } from "./prices.ts";

/**
 * The list-price cross-check (contract R51 to R56):
 * price the `modelUsage` totals with `CLI_PRICES`, pick the tier from the largest single
 * prompt, price cache writes by TTL, and require the CLI's `total_cost_usd` to agree within a
 * factor of two. Any problem makes the attempt `invalid-cost`.
 */

/** The token fields of one `modelUsage` entry (names as the CLI writes them). */
export interface ModelUsageTokens {
  inputTokens: number;
  outputTokens: number;
  cacheReadInputTokens: number;
  cacheCreationInputTokens: number;
  costBasis?: string | undefined;
}

/** The result's `usage.cache_creation` split. */
export interface CacheCreationSplit {
  ephemeral5mInputTokens: number;
  ephemeral1hInputTokens: number;
}

/** The prompt side of one API message (deduplicated by message id). */
export interface MessagePromptUsage {
  messageId: string;
  inputTokens: number;
  cacheReadInputTokens: number;
  cacheCreationInputTokens: number;
}

export interface CostInput {
  /** The requested model; the only one allowed in `modelUsage`. */
  model: string;
  /** The result's `modelUsage`, or `null` when missing or malformed. */
  modelUsage: Readonly<Record<string, ModelUsageTokens>> | null;
  /** The result's `usage.cache_creation`, or `null` when absent (all writes unattributed). */
  cacheCreation: CacheCreationSplit | null;
  /** Per-message usage from the stream; empty when the stream had none. */
  perMessageUsage: readonly MessagePromptUsage[];
  /** The CLI's `total_cost_usd`, or `null` when missing or not a finite number. */
  reportedCostUsd: number | null;
}

export interface CostBasis {
  model: string;
  tier: 1 | 2;
  tierSource: "per-message" | "aggregate";
  /** The prompt size that chose the tier: the largest single prompt, or the aggregate. */
  tierPromptTokens: number;
  pricesUsdPerMillion: TierPrices;
  inputTokens: number;
  outputTokens: number;
  cacheReadInputTokens: number;
  cacheWrite5mTokens: number;
  cacheWrite1hTokens: number;
  /** Writes with no TTL split, priced at the 1-hour rate (the CLI uses 5-minute: ours is above). */
  cacheWriteUnattributedTokens: number;
}

export interface CostResult {
  /** The list-price cost, or `null` when it cannot be computed for the requested model alone. */
  computedCostUsd: number | null;
  /** The CLI's `total_cost_usd` when it is a valid amount (finite, non-negative), else `null`. */
  reportedCostUsd: number | null;
  costBasis: CostBasis | null;
  /** Human-readable; any entry makes the attempt `invalid-cost`. */
  problems: string[];
}

/**
 * The CLI's `total_cost_usd` when it is a valid amount (finite, non-negative), read to the nearest
 * pico-USD; else a problem and null. Every list-price cost is a whole number of pico-USD (a price
 * of at most six decimals per million tokens), and the CLI sums its per-request costs as floats:
 * the digits past the twelfth decimal (0.0042000000000000006) are that sum's noise, not money, so
 * the record holds the exact amount (contract R204, R201).
 */
function validReportedCost(reported: number | null, problems: string[]): number | null {
  if (reported === null || !Number.isFinite(reported)) problems.push("total_cost_usd is missing or not a finite number");
  else if (reported < 0) problems.push(`total_cost_usd is negative (${reported})`);
  else {
    // A finite figure whose pico-USD is not (1e308 USD) cannot be compared or recorded.
    const usd = picoToUsd(usdToPico(reported, "nearest"));
    if (Number.isFinite(usd)) return usd;
    problems.push(`total_cost_usd ${reported} is larger than any amount a record can hold`);
  }
  return null;
}

/** Every model besides the requested one, and every entry not at list price, is a problem (the first ten of each named). */
function modelUsageProblems(model: string, modelUsage: Readonly<Record<string, ModelUsageTokens>>, problems: string[]): void {
  const models = Object.keys(modelUsage);
  // 2.1.288 once billed an auxiliary claude-haiku-4-5 next to the study model at ~60x the
  // estimate (contract R52): any other model in modelUsage is an invalid cost.
  for (const other of models.filter((m) => m !== model).slice(0, 10)) {
    problems.push(`modelUsage has model ${quote(other)} besides the requested ${quote(model)}`);
  }
  for (const m of models.slice(0, 10)) {
    const basis = modelUsage[m]!.costBasis;
    if (basis !== "list") problems.push(`modelUsage ${quote(m)} has costBasis ${basis === undefined ? "missing" : quote(basis)}, not "list"`);
  }
}

/** The cache writes by TTL: the result's split where it has one; the rest unattributed. */
interface CacheWrites {
  write5m: number;
  write1h: number;
  unattributed: number;
}

/**
 * Cache writes by TTL; writes without a split are priced at the 1-hour rate on purpose
 * (contract R55), above the CLI's own 5-minute choice (facts), so the estimate stays an upper one.
 */
function cacheWritesOf(writes: number, split: CacheCreationSplit | null, problems: string[]): CacheWrites {
  if (split === null) return { write5m: 0, write1h: 0, unattributed: writes };
  const write5m = split.ephemeral5mInputTokens;
  const write1h = split.ephemeral1hInputTokens;
  if (write5m + write1h > writes) {
    problems.push(`usage.cache_creation splits ${write5m + write1h} cache-write tokens, but modelUsage has ${writes}`);
    return { write5m, write1h, unattributed: 0 };
  }
  return { write5m, write1h, unattributed: writes - write5m - write1h };
}

type TierChoice = Pick<CostBasis, "tier" | "tierSource" | "tierPromptTokens">;

/**
 * The price tier, from the largest single prompt when the per-message usage sums to `modelUsage`,
 * else from the aggregate prompt (with no per-message usage), else the dearer of the two (a problem).
 */
function tierOf(usage: ModelUsageTokens, perMessageUsage: readonly MessagePromptUsage[], threshold: number, problems: string[]): TierChoice {
  const writes = usage.cacheCreationInputTokens;
  const aggregatePrompt = usage.inputTokens + usage.cacheReadInputTokens + writes;
  if (perMessageUsage.length === 0) return { tier: aggregatePrompt > threshold ? 2 : 1, tierSource: "aggregate", tierPromptTokens: aggregatePrompt };
  let largest = 0;
  const sums = { input: 0, cacheRead: 0, cacheWrite: 0 };
  for (const m of perMessageUsage) {
    largest = Math.max(largest, m.inputTokens + m.cacheReadInputTokens + m.cacheCreationInputTokens);
    sums.input += m.inputTokens;
    sums.cacheRead += m.cacheReadInputTokens;
    sums.cacheWrite += m.cacheCreationInputTokens;
  }
  // Measured: summed over distinct message ids, the prompt side equals modelUsage exactly;
  // per-message output_tokens is a placeholder, so output is not compared.
  const mismatches: string[] = [];
  if (sums.input !== usage.inputTokens) mismatches.push(`input ${sums.input} vs ${usage.inputTokens}`);
  if (sums.cacheRead !== usage.cacheReadInputTokens) mismatches.push(`cache read ${sums.cacheRead} vs ${usage.cacheReadInputTokens}`);
  if (sums.cacheWrite !== writes) mismatches.push(`cache write ${sums.cacheWrite} vs ${writes}`);
  if (mismatches.length === 0) return { tier: largest > threshold ? 2 : 1, tierSource: "per-message", tierPromptTokens: largest };
  problems.push(`per-message usage does not sum to modelUsage (${mismatches.join("; ")})`);
  // Neither source is trusted: take the dearer tier either one points to.
  return { tier: largest > threshold || aggregatePrompt > threshold ? 2 : 1, tierSource: "aggregate", tierPromptTokens: Math.max(largest, aggregatePrompt) };
}

/** The list-price cost in USD: each term is tokens x (pico-USD per million tokens); one division at the end, rounded up. */
function listPriceUsd(usage: ModelUsageTokens, writes: CacheWrites, row: CostBasis["pricesUsdPerMillion"]): number {
  const perMillion =
    BigInt(usage.inputTokens) * usdToPico(row.input, "ceil") +
    BigInt(usage.outputTokens) * usdToPico(row.output, "ceil") +
    BigInt(usage.cacheReadInputTokens) * usdToPico(row.cacheRead, "ceil") +
    BigInt(writes.write5m) * usdToPico(row.cacheWrite5m, "ceil") +
    BigInt(writes.write1h + writes.unattributed) * usdToPico(row.cacheWrite1h, "ceil");
  const million = 1_000_000n;
  return picoToUsd((perMillion + million - 1n) / million);
}

/** `a` and `b` within a factor of two of each other, both ways, bounds included, in exact pico-USD. */
export function withinFactorOfTwo(a: number, b: number): boolean {
  const [pa, pb] = [pico(a), pico(b)];
  return pa <= 2n * pb && 2n * pa >= pb;
}

export function computeCost(input: CostInput): CostResult {
  const problems: string[] = [];
  const { model, modelUsage } = input;
  const reportedCostUsd = validReportedCost(input.reportedCostUsd, problems);
  if (modelUsage === null) {
    problems.push("modelUsage is missing or malformed");
    return { computedCostUsd: null, reportedCostUsd, costBasis: null, problems };
  }
  modelUsageProblems(model, modelUsage, problems);
  const usage = Object.hasOwn(modelUsage, model) ? modelUsage[model]! : undefined;
  if (usage === undefined) problems.push(`modelUsage has no entry for the requested model ${quote(model)}`);
  const prices = pricesFor(model);
  if (prices === undefined) problems.push(`CLI_PRICES has no row for ${quote(model)}`);
  if (usage === undefined || prices === undefined || Object.keys(modelUsage).length !== 1) {
    return { computedCostUsd: null, reportedCostUsd, costBasis: null, problems };
  }
  const writes = cacheWritesOf(usage.cacheCreationInputTokens, input.cacheCreation, problems);
  // Measured per model: the largest prompt still priced at the first tier.
  const { tier, tierSource, tierPromptTokens } = tierOf(usage, input.perMessageUsage, tier1MaxPromptTokens(model)!, problems);
  const row = tier === 1 ? prices.tier1 : prices.tier2;
  const computedCostUsd = listPriceUsd(usage, writes, row);

  // Within a factor of two both ways. With a computed cost of 0 (no tokens) there is no ratio:
  // only a reported 0 agrees, since a positive charge for nothing is unexplained.
  if (reportedCostUsd !== null && !withinFactorOfTwo(reportedCostUsd, computedCostUsd)) {
    problems.push(`total_cost_usd ${reportedCostUsd} is not within a factor of two of the list-price cost ${computedCostUsd}`);
  }

  return {
    computedCostUsd,
    reportedCostUsd,
    costBasis: {
      model,
      tier,
      tierSource,
      tierPromptTokens,
      pricesUsdPerMillion: { ...row },
      inputTokens: usage.inputTokens,
      outputTokens: usage.outputTokens,
      cacheReadInputTokens: usage.cacheReadInputTokens,
      cacheWrite5mTokens: writes.write5m,
      cacheWrite1hTokens: writes.write1h,
      cacheWriteUnattributedTokens: writes.unattributed,
    },
    problems,
  };
}

function quote(name: string): string {
  return JSON.stringify(name.length > 100 ? `${name.slice(0, 100)}…` : name);
}
