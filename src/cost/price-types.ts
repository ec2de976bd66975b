/** The shapes of the measured price table (src/cost/cli-prices.generated.ts) and its rows. */

export interface TierPrices {
  input: number;
  output: number;
  cacheRead: number;
  /** Cache writes with a 5-minute TTL, and writes the API reported without a TTL split. */
  cacheWrite5m: number;
  /** Cache writes with a 1-hour TTL. */
  cacheWrite1h: number;
}

export interface ModelPrices {
  /** Prompt (input + cache read + cache write) of at most the model's boundary. */
  tier1: TierPrices;
  /**
   * Prompt above the boundary. A model without a second tier has the first-tier rates here:
   * the measurement found them unchanged up to the search limit.
   */
  tier2: TierPrices;
}

/** The shape of src/cost/cli-prices.generated.ts. */
export interface GeneratedPriceTable {
  cliVersion: string;
  /** YYYY-MM-DD. */
  measuredOn: string;
  /** The command that regenerates the file. */
  command: string;
  /** Prompt size (tokens) up to which a second tier was searched for. */
  searchedUpToPromptTokens: number;
  toleranceUsdPerToken: number;
  models: Record<string, { tier1: TierPrices; tier2: TierPrices | null; tier1MaxPromptTokens: number | null }>;
  /** Names the binary carries that the CLI did not price as "list" under that name. */
  notPricedAsList: Record<string, { initModel: string | null; requestModel: string | null; costBasis: string | null; modelUsageKeys: string[] }>;
  /** What the CLI does with a family alias given as `--model`. */
  aliases: Record<string, { initModel: string | null; requestModel: string | null; modelUsageKeys: string[]; costBasis: string | null }>;
}
