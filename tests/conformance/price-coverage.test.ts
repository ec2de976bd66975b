/**
 * The generated price table covers the pinned binary: every model-like name the REAL Claude Code
 * 2.1.296 carries is either a row (the CLI priced it as "list" under its own name when measured)
 * or listed with what the CLI did instead. Reads the cached binary's strings; runs no container.
 */
import { describe, expect, it } from "vitest";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { cliPrices } from "../../src/cost/prices.ts";
import { ensureClaudeBinary } from "../../src/image/install.ts";
import { candidateModels } from "../../src/calibrate/prices.ts";
import { activeProfile } from "../../src/profile/load.ts";

const GENERATED_PRICE_TABLE = activeProfile().prices;
const CLI_PRICES = cliPrices();

describe("the price table against the pinned binary's model names", () => {
  // contract: R51
  it("has a row for every model name in the pinned binary the CLI priced as list, and records every other name with what the CLI did", async () => {
    const binary = await ensureClaudeBinary({ version: CLAUDE_CODE_VERSION });
    const names = await candidateModels(binary.path);
    expect(names.length).toBeGreaterThan(0);
    const rows = Object.keys(GENERATED_PRICE_TABLE.models);
    const others = Object.keys(GENERATED_PRICE_TABLE.notPricedAsList);
    // A partition of the binary's names: nothing dropped, nothing invented, nothing in both.
    expect([...rows, ...others].sort()).toEqual(names);
    expect(rows.filter((m) => others.includes(m))).toEqual([]);
    // A name left out of the rows is one the CLI did not price as list under that same name.
    for (const [name, seen] of Object.entries(GENERATED_PRICE_TABLE.notPricedAsList)) {
      const pricedAsListUnderItsName = seen.costBasis === "list" && seen.modelUsageKeys.length === 1 && seen.modelUsageKeys[0] === name;
      expect(pricedAsListUnderItsName, name).toBe(false);
    }
    // And the runner's lookup holds every row.
    expect(Object.keys(CLI_PRICES).sort()).toEqual([...rows].sort());
  }, 120_000);
});
