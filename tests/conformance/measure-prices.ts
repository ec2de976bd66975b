/**
 * Measures the pinned Claude Code binary's own price table and (with --write) rewrites the prices
 * of the pin's bundled calibration profile (src/profile/), the only place the runner holds a price:
 *
 *   node --import tsx tests/conformance/measure-prices.ts [--write] [--only model,model]
 *
 * Candidates are the model-like names in the binary's strings (`"claude-…-haiku|sonnet|opus|
 * fable|mythos…"`); every candidate and the aliases `haiku`, `sonnet`, `opus` get one run of the
 * real CLI in the real image against the adaptive prober (tests/conformance/price-probe.ts).
 * A candidate becomes a row when the CLI prices it with costBasis "list" under its own name;
 * every other outcome is listed as such. The rounded rows must reproduce every probe within
 * 1e-12 USD per token, or nothing is written. Zero cost: the Messages API is scripted, the
 * container has no network.
 */
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createReadStream } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureClaudeBinary } from "../../src/image/install.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import type { GeneratedPriceTable, TierPrices } from "../../src/cost/prices.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { realClaudeImage } from "../support/real-claude-image.ts";
import { writeBundledProfilePart } from "./profile-write.ts";
import { measureModel, worstPerTokenError, type ModelMeasurement, type ProbeEnv } from "./price-probe.ts";

export const REGENERATE_COMMAND = "node --import tsx tests/conformance/measure-prices.ts --write";
export const ALIASES = ["haiku", "sonnet", "opus"] as const;
/** A measured rate may differ from the CLI's by at most this much per token on every probe. */
export const TOLERANCE_USD_PER_TOKEN = 1e-12;
const TEST_TOKEN = "test-access-token-not-a-real-credential";

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

export function rowOf(m: ModelMeasurement) {
  const tier1 = rounded(m.tier1);
  return { tier1, tier2: m.tier2 ? rounded(m.tier2) : null, tier1MaxPromptTokens: m.tier1MaxPromptTokens };
}

export async function probeEnv(): Promise<ProbeEnv & { cleanup(): Promise<void> }> {
  const runtime = new DockerRuntime();
  const image = (await realClaudeImage(runtime)).tag;
  const work = await mkdtemp(join(tmpdir(), "sr-prices-"));
  const loginDir = join(work, "login");
  await writeTestLogin(loginDir, TEST_TOKEN);
  const workspace = join(work, "workspace");
  await mkdir(workspace);
  await writeFile(join(workspace, "README.md"), "A file for the prober's Glob.\n", { mode: 0o444 });
  await chmod(workspace, 0o555);
  return { runtime, image, loginDir, work, workspace, cleanup: () => rm(work, { recursive: true, force: true }) };
}

/** Runs `measure` over `items` two at a time (the machine has two cores). */
export async function twoAtATime<T, R>(items: readonly T[], measure: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) out[i] = await measure(items[i]!);
  };
  await Promise.all([worker(), worker()]);
  return out;
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const write = args.includes("--write");
  const onlyAt = args.indexOf("--only");
  const started = Date.now();
  const binary = await ensureClaudeBinary({ version: CLAUDE_CODE_VERSION });
  const candidates = onlyAt >= 0 ? args[onlyAt + 1]!.split(",") : await candidateModels(binary.path);
  process.stderr.write(`${candidates.length} candidate model names in the binary: ${candidates.join(" ")}\n`);
  const env = await probeEnv();
  let results: Array<ModelMeasurement | { model: string; error: string }>;
  try {
    results = await twoAtATime([...candidates, ...ALIASES], async (model) => {
      try {
        const m = await measureModel(env, model);
        process.stderr.write(`${model}: ${m.costBasis} ${m.modelUsageKeys.join(",")} tier1 ${JSON.stringify(rowOf(m).tier1)} boundary ${m.tier1MaxPromptTokens} (${m.seconds.toFixed(1)} s)\n`);
        return m;
      } catch (err) {
        process.stderr.write(`${model}: ${(err as Error).message}\n`);
        return { model, error: (err as Error).message.slice(0, 300) };
      }
    });
  } finally {
    await env.cleanup();
  }
  const table: GeneratedPriceTable = {
    searchedUpToPromptTokens: 0,
    toleranceUsdPerToken: TOLERANCE_USD_PER_TOKEN,
    models: {},
    notPricedAsList: {},
    aliases: {},
  };
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
    if ((ALIASES as readonly string[]).includes(r.model)) {
      table.aliases[r.model] = { initModel: r.initModel, requestModel: r.requestModel, modelUsageKeys: r.modelUsageKeys, costBasis: r.costBasis };
    } else if (r.costBasis === "list" && r.modelUsageKeys.length === 1 && r.modelUsageKeys[0] === r.model) {
      table.models[r.model] = row;
    } else {
      table.notPricedAsList[r.model] = { initModel: r.initModel, requestModel: r.requestModel, costBasis: r.costBasis, modelUsageKeys: r.modelUsageKeys };
    }
  }
  const seconds = (Date.now() - started) / 1000;
  const summary = {
    candidates: candidates.length,
    rows: Object.keys(table.models).length,
    withSecondTier: Object.entries(table.models)
      .filter(([, r]) => r.tier1MaxPromptTokens !== null)
      .map(([m, r]) => `${m} > ${r.tier1MaxPromptTokens}`),
    notPricedAsList: Object.keys(table.notPricedAsList),
    aliases: table.aliases,
    failures,
    seconds,
  };
  process.stdout.write(`${JSON.stringify(summary, null, 1)}\n`);
  if (failures.length > 0) {
    process.exitCode = 1;
    return;
  }
  if (write) {
    process.stderr.write(`wrote ${await writeBundledProfilePart({ prices: table })}\n`);
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  await main();
}
