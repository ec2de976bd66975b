/**
 * A Claude Code version's own price table, read out of its binary at zero cost (contract R223):
 * candidates are the model-like names in the binary's strings (`"claude-…-haiku|sonnet|opus|
 * fable|mythos…"`); every candidate and the aliases `haiku`, `sonnet`, `opus` get one run of the
 * real CLI in its image against the adaptive prober (price-probe.ts). A candidate becomes a row
 * when the CLI prices it with costBasis "list" under its own name; every other outcome is listed
 * as such. The rounded rows must reproduce every probe within 1e-12 USD per token, or the table
 * is refused. The Messages API is scripted, the container has no network.
 */
import { createReadStream } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { GeneratedPriceTable, TierPrices } from "../cost/prices.ts";
import { writeTestLogin } from "../demo/setup.ts";
import type { ContainerRuntime } from "../sandbox/port.ts";
import { TEST_TOKEN } from "./env.ts";
import { measureModel, worstPerTokenError, type ModelMeasurement, type ProbeEnv } from "./price-probe.ts";

export const ALIASES = ["haiku", "sonnet", "opus"] as const;
/** A measured rate may differ from the CLI's by at most this much per token on every probe. */
export const TOLERANCE_USD_PER_TOKEN = 1e-12;

const MODEL_NAME = /^claude-(?:\d+-(?:\d+-)?)?(?:haiku|sonnet|opus|fable|mythos)(?:-[0-9a-z]+)*$/;

/** Model-like quoted names in the binary, read in chunks (the binary is ~257 MB). */
export async function candidateModels(binaryPath: string): Promise<string[]> {
  const found = new Set<string>();
  let carry = "";
  for await (const chunk of createReadStream(binaryPath, { highWaterMark: 8 * 1024 * 1024 })) {
    const text = carry + (chunk as Buffer).toString("latin1");
    for (const m of text.matchAll(/"(claude-[a-z0-9-]{1,60})"/g)) if (MODEL_NAME.test(m[1]!)) found.add(m[1]!);
    carry = text.slice(-80);
  }
  return [...found].sort();
}

/** Rates rounded to 12 significant digits: 0.1 rather than 0.09999999999999999 from a difference. */
function rounded(t: TierPrices): TierPrices {
  const r = (x: number) => Number(x.toPrecision(12));
  return { input: r(t.input), output: r(t.output), cacheRead: r(t.cacheRead), cacheWrite5m: r(t.cacheWrite5m), cacheWrite1h: r(t.cacheWrite1h) };
}

/** One model's row of the table, from its measurement. */
export function rowOf(m: ModelMeasurement) {
  const tier1 = rounded(m.tier1);
  return { tier1, tier2: m.tier2 ? rounded(m.tier2) : null, tier1MaxPromptTokens: m.tier1MaxPromptTokens };
}

/** The prober's set-up: the image, a test login, and a read-only workspace with one file for the scripted Glob. */
export async function probeEnv(runtime: ContainerRuntime, image: string): Promise<ProbeEnv & { cleanup(): Promise<void> }> {
  const work = await mkdtemp(join(tmpdir(), "sr-prices-"));
  const loginDir = join(work, "login");
  await writeTestLogin(loginDir, TEST_TOKEN);
  const workspace = join(work, "workspace");
  await mkdir(workspace);
  await writeFile(join(workspace, "README.md"), "A file for the prober's Glob.\n", { mode: 0o444 });
  await chmod(workspace, 0o555);
  return { runtime, image, loginDir, work, workspace, cleanup: () => rm(work, { recursive: true, force: true }) };
}

/** Runs `measure` over `items` two at a time (the machine the runner targets has two cores). */
export async function twoAtATime<T, R>(items: readonly T[], measure: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) out[i] = await measure(items[i]!);
  };
  await Promise.all([worker(), worker()]);
  return out;
}

type Measured = ModelMeasurement | { model: string; error: string };

/** The price table from the measurements, and one failure per model that could not be measured or whose row misses a probe. */
export function priceTableOf(results: readonly Measured[]): { table: GeneratedPriceTable; failures: string[] } {
  const table: GeneratedPriceTable = { searchedUpToPromptTokens: 0, toleranceUsdPerToken: TOLERANCE_USD_PER_TOKEN, models: {}, notPricedAsList: {}, aliases: {} };
  const failures: string[] = [];
  for (const r of results) {
    if ("error" in r) {
      failures.push(`${r.model}: ${r.error}`);
      continue;
    }
    table.searchedUpToPromptTokens = r.searchedUpTo;
    const row = rowOf(r);
    const worst = worstPerTokenError(row, r.probes);
    if (worst.usdPerToken > TOLERANCE_USD_PER_TOKEN) failures.push(`${r.model}: the rounded row misses probe ${worst.probe} by ${worst.usdPerToken} USD per token`);
    if (Math.abs(r.totalCostUsd - r.modelUsageCostUsd) > 1e-9) failures.push(`${r.model}: total_cost_usd ${r.totalCostUsd} differs from modelUsage costUSD ${r.modelUsageCostUsd}`);
    if (Math.abs(r.unsplitWriteTier1 - r.tier1.cacheWrite5m) > 1e-6) failures.push(`${r.model}: a write without TTL split was priced at ${r.unsplitWriteTier1}, not the 5-minute rate`);
    const outcome = { initModel: r.initModel, requestModel: r.requestModel, costBasis: r.costBasis, modelUsageKeys: r.modelUsageKeys };
    if ((ALIASES as readonly string[]).includes(r.model)) table.aliases[r.model] = outcome;
    else if (r.costBasis === "list" && r.modelUsageKeys.length === 1 && r.modelUsageKeys[0] === r.model) table.models[r.model] = row;
    else table.notPricedAsList[r.model] = outcome;
  }
  return { table, failures };
}

/**
 * Measures the price table of the binary at `binaryPath` in `image`: every candidate name and
 * alias, two runs at a time. `only` restricts the candidates (a partial table, for a drift test).
 */
export async function measurePriceTable(
  runtime: ContainerRuntime,
  image: string,
  binaryPath: string,
  o: { only?: readonly string[]; progress?: (line: string) => void } = {},
): Promise<{ table: GeneratedPriceTable; failures: string[]; candidates: string[] }> {
  const candidates = o.only ? [...o.only] : await candidateModels(binaryPath);
  const env = await probeEnv(runtime, image);
  try {
    const results = await twoAtATime<string, Measured>([...candidates, ...ALIASES], async (model) => {
      try {
        const m = await measureModel(env, model);
        o.progress?.(`${model}: ${m.costBasis} ${m.modelUsageKeys.join(",")} boundary ${m.tier1MaxPromptTokens} (${m.seconds.toFixed(1)} s)`);
        return m;
      } catch (err) {
        o.progress?.(`${model}: ${(err as Error).message.slice(0, 300)}`);
        return { model, error: (err as Error).message.slice(0, 300) };
      }
    });
    return { ...priceTableOf(results), candidates };
  } finally {
    await env.cleanup();
  }
}
