import { picoToUsd, roundedUsd, sumPico } from "../cost/money.ts";
import type { Arm } from "../terms/terms.ts";
import { DEFAULT_MCP_SERVER } from "../transcript/reader.ts";
import { ownValue } from "../util/own-keys.ts";

/**
 * How the two arms behaved, side by side (pure): the tool mix, doc-bridge calls, turns, cache
 * use, wall time and cost per correct answer. Only tool names are shown, never their inputs:
 * the report is public; the inputs are in the private pair viewer.
 */

export interface BehaviourAttempt {
  arm: Arm;
  status: string;
  outcome: string;
  inputTokens: number | null;
  cacheCreationInputTokens: number | null;
  cacheReadInputTokens: number | null;
  wallTimeMs: number | null;
  chargedUsd: number | null;
  numTurns: number | null;
  toolCallsByName: Record<string, number> | null;
}

/** The calls of `tool` in an arm's tool mix: its own entry, 0 without one (never an inherited member). */
export const callsOf = (b: ArmBehaviour, tool: string): number => ownValue(b.toolMix, tool) ?? 0;

export interface ArmBehaviour {
  /** Settled attempts of the arm (every figure below is over these). */
  attempts: number;
  correct: number;
  toolMix: Record<string, number>;
  toolCalls: number;
  docBridgeCallsPerAttempt: number | null;
  meanTurns: number | null;
  /** Cache reads over prompt tokens (input + cache write + cache read), over attempts with all three known. */
  cacheHitRate: number | null;
  meanWallTimeMs: number | null;
  chargedUsd: number;
  /** Every charge of the arm (failed attempts included) divided by its correct answers. */
  costPerCorrectUsd: number | null;
  /** Every attempt's wall time in the arm (failed attempts included) divided by its correct answers. */
  wallTimePerCorrectMs: number | null;
}

export interface Behaviour {
  arms: Record<Arm, ArmBehaviour>;
  /** Tool names in a stable order: most calls over both arms first, then by name. */
  tools: string[];
  docBridgePrefix: string;
}

const meanOf = (v: number[]) => (v.length ? v.reduce((s, x) => s + x, 0) / v.length : null);

export function behaviourOf(attempts: readonly BehaviourAttempt[]): Behaviour {
  const prefix = `mcp__${DEFAULT_MCP_SERVER}__`;
  const arms = {} as Record<Arm, ArmBehaviour>;
  for (const arm of ["repository", "mcp"] as const) {
    const settled = attempts.filter((a) => a.arm === arm && a.status !== "not run" && a.status !== "unsettled");
    // Counted in a Map and made an object with own keys only: a tool is named by the transcript, and
    // a name such as "constructor" or "__proto__" is counted like any other, never read from a prototype.
    const counts = new Map<string, number>();
    for (const a of settled) for (const [name, n] of Object.entries(a.toolCallsByName ?? {})) counts.set(name, (counts.get(name) ?? 0) + n);
    const toolMix = Object.fromEntries(counts);
    const docBridge = settled.map((a) => Object.entries(a.toolCallsByName ?? {}).reduce((s, [name, n]) => s + (name.startsWith(prefix) ? n : 0), 0));
    let read = 0;
    let prompt = 0;
    for (const a of settled) {
      if (a.inputTokens === null || a.cacheCreationInputTokens === null || a.cacheReadInputTokens === null) continue;
      read += a.cacheReadInputTokens;
      prompt += a.inputTokens + a.cacheCreationInputTokens + a.cacheReadInputTokens;
    }
    const correct = settled.filter((a) => a.outcome === "correct").length;
    // Summed in pico-USD and rounded once (contract R203).
    const charged = sumPico(settled.map((a) => a.chargedUsd ?? 0));
    arms[arm] = {
      attempts: settled.length,
      correct,
      toolMix,
      toolCalls: Object.values(toolMix).reduce((s, n) => s + n, 0),
      docBridgeCallsPerAttempt: meanOf(docBridge),
      meanTurns: meanOf(settled.flatMap((a) => (a.numTurns === null ? [] : [a.numTurns]))),
      cacheHitRate: prompt > 0 ? read / prompt : null,
      meanWallTimeMs: meanOf(settled.flatMap((a) => (a.wallTimeMs === null ? [] : [a.wallTimeMs]))),
      chargedUsd: roundedUsd(charged, 6),
      costPerCorrectUsd: correct ? picoToUsd(charged) / correct : null,
      wallTimePerCorrectMs: correct ? settled.reduce((s, a) => s + (a.wallTimeMs ?? 0), 0) / correct : null,
    };
  }
  const totals = new Map<string, number>();
  for (const b of Object.values(arms)) for (const [k, n] of Object.entries(b.toolMix)) totals.set(k, (totals.get(k) ?? 0) + n);
  const tools = [...totals.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([k]) => k);
  return { arms, tools, docBridgePrefix: prefix };
}
