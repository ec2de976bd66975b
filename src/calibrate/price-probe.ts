/**
 * Reads one model's price table out of the REAL Claude Code binary at zero cost: a scripted
 * Messages API answers every request with a turn chosen from what the CLI has spent so far, and
 * the CLI's own spend is read back from two places it writes itself: the `USD budget: $used/…`
 * reminder it appends to every request (its running `total_cost_usd`, printed at full double
 * precision), and the result's `total_cost_usd` and `modelUsage[model].costUSD`. One container
 * run per model: each turn is one probe, each probe one equation.
 *
 * Probe order matters for precision: the cost of a turn is the difference of two running
 * totals, so the small first-tier probes come first (while the total is tiny), the bisection on
 * prompt size next, the second-tier probes last.
 */
import { mkdtemp } from "node:fs/promises";
import { join } from "node:path";
import { stageLogin, resolveLogin } from "../credentials/login.ts";
import { runBounded } from "../sandbox/bounded.ts";
import { dockerSandbox } from "../sandbox/docker-sandbox.ts";
import { attemptContainerSpec } from "../transport/cli/spec.ts";
import { cliArguments } from "../claude/args.ts";
import type { Turn } from "../stand-ins/scripted-api/script.ts";
import { startScriptedApi, type DynamicRequest } from "../stand-ins/scripted-api/server.ts";
import type { ContainerRuntime } from "../sandbox/port.ts";
import type { TierPrices } from "../cost/prices.ts";

/** Token counts of one probe turn; `writeUnsplit` are cache writes sent without a TTL split. */
export interface ProbeTokens {
  input: number;
  output: number;
  read: number;
  write5m: number;
  write1h: number;
  writeUnsplit: number;
}

export interface Probe {
  /** What the probe isolates, e.g. "tier 1 output" or "bisect 52000". */
  label: string;
  tokens: ProbeTokens;
  /** The CLI's own cost of this turn, USD (difference of its running totals). */
  costUsd: number;
}

export interface ModelMeasurement {
  /** The name passed to `--model`. */
  model: string;
  /** The init event's `model`. */
  initModel: string | null;
  /** The model field of the CLI's Messages requests. */
  requestModel: string | null;
  /** The keys of the result's `modelUsage`. */
  modelUsageKeys: string[];
  /** `modelUsage[…].costBasis` of the result. */
  costBasis: string | null;
  /** USD per million tokens, as measured (not rounded). */
  tier1: TierPrices;
  tier2: TierPrices | null;
  /** The largest prompt (input + cache read + cache write) priced in the first tier; null: no second tier up to `searchedUpTo`. */
  tier1MaxPromptTokens: number | null;
  searchedUpTo: number;
  /** A cache write with no TTL split is priced at this tier-1 rate (USD per million). */
  unsplitWriteTier1: number;
  probes: Probe[];
  /** Result `total_cost_usd` and the sum over `modelUsage[…].costUSD`. */
  totalCostUsd: number;
  modelUsageCostUsd: number;
  seconds: number;
}

/** First-tier probes use this many tokens of one kind. */
const SMALL = 1_000;
/** The bisection's upper end: four times the largest context window the binary names (1M). */
export const SEARCH_LIMIT = 4_000_000;

const zero: ProbeTokens = { input: 0, output: 0, read: 0, write5m: 0, write1h: 0, writeUnsplit: 0 };
const tokens = (t: Partial<ProbeTokens>): ProbeTokens => ({ ...zero, ...t });
export const promptOf = (t: ProbeTokens) => t.input + t.read + t.write5m + t.write1h + t.writeUnsplit;
const allTokens = (t: ProbeTokens) => promptOf(t) + t.output;

function usageOf(t: ProbeTokens) {
  const writes = t.write5m + t.write1h + t.writeUnsplit;
  return {
    input_tokens: t.input,
    output_tokens: t.output,
    cache_read_input_tokens: t.read,
    cache_creation_input_tokens: writes,
    // An unsplit write probe carries no split at all, as an API answer without one would.
    ...(t.writeUnsplit > 0 ? {} : { cache_creation: { ephemeral_5m_input_tokens: t.write5m, ephemeral_1h_input_tokens: t.write1h } }),
  };
}

const BUDGET_RE = /USD budget: \$([0-9.eE+-]+)\//g;

/** Every `USD budget: $used/…` the CLI put into the request, in order. */
export function budgetReminders(body: unknown): number[] {
  const out: number[] = [];
  for (const m of JSON.stringify((body as { messages?: unknown }).messages ?? []).matchAll(BUDGET_RE)) out.push(Number(m[1]));
  return out;
}

/**
 * The prober's plan as a state machine: `next(costOfPreviousProbe)` returns the next probe, or
 * null when the measurement is complete.
 */
class Prober {
  readonly probes: Probe[] = [];
  private queue: Array<{ label: string; tokens: ProbeTokens }> = [];
  private pending: { label: string; tokens: ProbeTokens } | undefined;
  private phase: "tier1" | "limit" | "bisect" | "tier2" | "done" = "tier1";
  private lo = SMALL;
  private hi = SEARCH_LIMIT;
  boundary: number | null = null;

  constructor() {
    this.queue = [
      { label: "tier 1 input (1 token)", tokens: tokens({ input: 1 }) },
      { label: "tier 1 input", tokens: tokens({ input: SMALL }) },
      { label: "tier 1 output", tokens: tokens({ output: SMALL }) },
      { label: "tier 1 cache read", tokens: tokens({ read: SMALL }) },
      { label: "tier 1 cache write 5m", tokens: tokens({ write5m: SMALL }) },
      { label: "tier 1 cache write 1h", tokens: tokens({ write1h: SMALL }) },
      { label: "tier 1 cache write without split", tokens: tokens({ writeUnsplit: SMALL }) },
    ];
  }

  private cost(label: string): number {
    const p = this.probes.find((x) => x.label === label);
    if (!p) throw new Error(`prober: no probe ${label}`);
    return p.costUsd;
  }

  /** Input rate per token at the first tier, for classifying bisection probes. */
  private get inputRate(): number {
    return this.cost("tier 1 input") / SMALL;
  }

  private isTier1(p: Probe): boolean {
    const rate = p.costUsd / p.tokens.input;
    return Math.abs(rate - this.inputRate) <= 1e-9 * this.inputRate;
  }

  next(previousCost: number | undefined): { label: string; tokens: ProbeTokens } | null {
    if (this.pending) {
      if (previousCost === undefined) throw new Error("prober: the CLI reported no cost for the previous probe");
      this.probes.push({ ...this.pending, costUsd: previousCost });
      const done = this.probes.at(-1)!;
      this.pending = undefined;
      if (this.phase === "limit") {
        if (this.isTier1(done)) {
          this.phase = "tier2";
          this.queue = this.flatChecks();
        } else {
          this.phase = "bisect";
        }
      } else if (this.phase === "bisect") {
        if (this.isTier1(done)) this.lo = done.tokens.input;
        else this.hi = done.tokens.input;
      }
    }
    if (this.queue.length === 0 && this.phase === "tier1") {
      const one = this.cost("tier 1 input (1 token)");
      if (Math.abs(one - this.inputRate) > 1e-9 * this.inputRate) {
        throw new Error(`prober: 1 input token cost ${one}, ${SMALL} cost ${this.inputRate * SMALL}: a boundary below ${SMALL} tokens; lower SMALL`);
      }
      this.phase = "limit";
      this.queue = [{ label: `limit ${SEARCH_LIMIT}`, tokens: tokens({ input: SEARCH_LIMIT }) }];
    }
    if (this.phase === "bisect") {
      if (this.hi - this.lo > 1) {
        const mid = Math.floor((this.lo + this.hi) / 2);
        this.queue = [{ label: `bisect ${mid}`, tokens: tokens({ input: mid }) }];
      } else {
        this.boundary = this.lo;
        this.phase = "tier2";
        this.queue = this.tier2Probes(this.lo + 1);
      }
    }
    const item = this.queue.shift();
    if (!item) {
      this.phase = "done";
      return null;
    }
    this.pending = item;
    return item;
  }

  /** Above the boundary: each kind of token with a prompt of `p` tokens. */
  private tier2Probes(p: number) {
    return [
      { label: "tier 2 input", tokens: tokens({ input: p }) },
      { label: "tier 2 input and output", tokens: tokens({ input: p, output: SMALL }) },
      { label: "tier 2 cache read", tokens: tokens({ input: 1, read: p - 1 }) },
      { label: "tier 2 cache write 5m", tokens: tokens({ input: 1, write5m: p - 1 }) },
      { label: "tier 2 cache write 1h", tokens: tokens({ input: 1, write1h: p - 1 }) },
      // The prompt that picks the tier counts reads and writes too: this one is at the boundary.
      { label: "tier 1 at the boundary, reads and writes", tokens: tokens({ input: 1, read: p - 4, write5m: 1, write1h: 1 }) },
    ];
  }

  /** No second tier: the first-tier rates hold for every kind of token at the search limit. */
  private flatChecks() {
    const p = SEARCH_LIMIT;
    return [
      { label: "large prompt with output", tokens: tokens({ input: p, output: SMALL }) },
      { label: "large cache read", tokens: tokens({ input: 1, read: p - 1 }) },
      { label: "large cache write 5m", tokens: tokens({ input: 1, write5m: p - 1 }) },
      { label: "large cache write 1h", tokens: tokens({ input: 1, write1h: p - 1 }) },
    ];
  }

  /** Rates in USD per million tokens, from the probes (unrounded). */
  rates(): { tier1: TierPrices; tier2: TierPrices | null; unsplit: number } {
    const c = (l: string) => this.cost(l);
    const tier1: TierPrices = {
      input: (c("tier 1 input") / SMALL) * 1e6,
      output: (c("tier 1 output") / SMALL) * 1e6,
      cacheRead: (c("tier 1 cache read") / SMALL) * 1e6,
      cacheWrite5m: (c("tier 1 cache write 5m") / SMALL) * 1e6,
      cacheWrite1h: (c("tier 1 cache write 1h") / SMALL) * 1e6,
    };
    const unsplit = (c("tier 1 cache write without split") / SMALL) * 1e6;
    if (this.boundary === null) return { tier1, tier2: null, unsplit };
    const p = this.boundary + 1;
    const input = c("tier 2 input") / p;
    const tier2: TierPrices = {
      input: input * 1e6,
      output: ((c("tier 2 input and output") - c("tier 2 input")) / SMALL) * 1e6,
      cacheRead: ((c("tier 2 cache read") - input) / (p - 1)) * 1e6,
      cacheWrite5m: ((c("tier 2 cache write 5m") - input) / (p - 1)) * 1e6,
      cacheWrite1h: ((c("tier 2 cache write 1h") - input) / (p - 1)) * 1e6,
    };
    return { tier1, tier2, unsplit };
  }
}

/** The cost a price row predicts for one probe (USD): the CLI's rule, one tier per turn. */
export function predictedCost(row: { tier1: TierPrices; tier2: TierPrices | null; tier1MaxPromptTokens: number | null }, t: ProbeTokens): number {
  const tier = row.tier2 !== null && row.tier1MaxPromptTokens !== null && promptOf(t) > row.tier1MaxPromptTokens ? row.tier2 : row.tier1;
  return (t.input * tier.input + t.output * tier.output + t.read * tier.cacheRead + (t.write5m + t.writeUnsplit) * tier.cacheWrite5m + t.write1h * tier.cacheWrite1h) / 1e6;
}

/** The largest difference per token between a row's prediction and the CLI's cost over the probes (USD per token). */
export function worstPerTokenError(row: Parameters<typeof predictedCost>[0], probes: readonly Probe[]): { usdPerToken: number; probe: string } {
  let worst = { usdPerToken: 0, probe: "" };
  for (const p of probes) {
    const n = allTokens(p.tokens);
    if (n === 0) continue;
    const e = Math.abs(predictedCost(row, p.tokens) - p.costUsd) / n;
    if (e > worst.usdPerToken) worst = { usdPerToken: e, probe: p.label };
  }
  return worst;
}

export interface ProbeEnv {
  runtime: ContainerRuntime;
  image: string;
  /** Folder with the test login's .credentials.json. */
  loginDir: string;
  /** Scratch folder (HOME copies, the API socket). */
  work: string;
  /** A read-only workspace holding at least one file for the scripted Glob. */
  workspace: string;
}

/** Runs the real CLI once for `model` with the adaptive prober and returns what it priced. */
export async function measureModel(env: ProbeEnv, model: string): Promise<ModelMeasurement> {
  const started = Date.now();
  const prober = new Prober();
  let lastUsed = 0;
  let requestModel: string | null = null;
  let failure: Error | undefined;
  const respond = ({ body }: DynamicRequest): Turn | undefined => {
    try {
      if (typeof body.model === "string") requestModel = body.model;
      const used = budgetReminders(body);
      const assistantTurns = ((body.messages as Array<{ role?: string }>) ?? []).filter((m) => m.role === "assistant").length;
      // One reminder per request so far: the newest is the running total after the previous turn.
      if (used.length !== assistantTurns + 1) throw new Error(`prober: ${used.length} budget reminders in a request after ${assistantTurns} turns`);
      const now = used.at(-1)!;
      const item = prober.next(assistantTurns === 0 ? undefined : now - lastUsed);
      lastUsed = now;
      if (!item) return { answer: "measured", usage: usageOf(zero) };
      return { toolCalls: [{ name: "Glob", input: { pattern: "*.md" } }], usage: usageOf(item.tokens) };
    } catch (err) {
      failure ??= err as Error;
      return undefined;
    }
  };
  // Direct, not through the gateway: a probe scripts prompts of millions of tokens for a request
  // of a few KB, which the gateway would rightly flag as usage no request could produce, and the
  // bisection's second-tier turns pass any reservation the gateway would bound them by.
  const apiDir = await mkdtemp(join(env.work, "api-"));
  const { chmod } = await import("node:fs/promises");
  await chmod(apiDir, 0o755);
  const api = await startScriptedApi({ socketPath: join(apiDir, "api.sock"), respond });
  let init: Record<string, any> | undefined;
  let result: Record<string, any> | undefined;
  try {
    const home = await mkdtemp(join(env.work, "home-"));
    const staged = await stageLogin(resolveLogin({ configDir: env.loginDir }), join(home, "home"));
    const argv = cliArguments({ arm: "repository", model, maxBudgetUsd: 1_000_000, prompt: `price probe of ${model}`, deniedMcpTools: [] });
    const spec = attemptContainerSpec({
      image: env.image,
      argv,
      exportDir: env.workspace,
      homeDir: staged.homeDir,
      // As a study attempt: no name to look up (contract R281).
      network: { mode: "none", names: false },
      labels: { "study-runner.calibrate": "prices" },
      attemptIndex: 0,
      modelApiSocket: api.socketPath,
      // A probe of millions of prompt tokens would otherwise make the CLI compact the conversation.
      extraEnv: { DISABLE_AUTO_COMPACT: "1", DISABLE_COMPACT: "1", CLAUDE_CODE_MAX_CONTEXT_TOKENS: "100000000", CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE: "100000000" },
    });
    const raw = await runBounded(
      dockerSandbox(env.runtime).containers,
      spec,
      (line) => {
        if (!line.startsWith("{")) return;
        const e = JSON.parse(line) as Record<string, any>;
        if (e.type === "system" && e.subtype === "init") init = e;
        if (e.type === "result") result = e;
      },
      { timeoutMs: 180_000 },
    );
    if (failure) throw failure;
    if (!result) throw new Error(`no result event for ${model} (exit ${raw.exitCode}, ${raw.stderrTail ?? ""})`);
  } finally {
    await api.close();
  }
  if (result.is_error || result.subtype !== "success") throw new Error(`the probe run of ${model} ended ${result.subtype} (is_error ${result.is_error}): ${String(result.result).slice(0, 200)}`);
  const modelUsage = (result.modelUsage ?? {}) as Record<string, { costUSD?: number; costBasis?: string }>;
  const keys = Object.keys(modelUsage);
  const { tier1, tier2, unsplit } = prober.rates();
  return {
    model,
    initModel: typeof init?.model === "string" ? init.model : null,
    requestModel,
    modelUsageKeys: keys,
    costBasis: keys.length === 1 ? (modelUsage[keys[0]!]!.costBasis ?? null) : null,
    tier1,
    tier2,
    tier1MaxPromptTokens: prober.boundary,
    searchedUpTo: SEARCH_LIMIT,
    unsplitWriteTier1: unsplit,
    probes: prober.probes,
    totalCostUsd: result.total_cost_usd as number,
    modelUsageCostUsd: keys.reduce((s, k) => s + (modelUsage[k]!.costUSD ?? 0), 0),
    seconds: (Date.now() - started) / 1000,
  };
}
