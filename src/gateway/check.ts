import type { TranscriptFacts } from "../transcript/reader.ts";
import type { GatewayRecord } from "./gateway.ts";

/**
 * The metered usage against the transcript's: the gateway saw every reply, so the transcript no
 * longer has the last word on what was spent. Every difference is a setup problem (the attempt is
 * invalid-setup): the sums over complete metered replies must equal `modelUsage`, and each
 * message's prompt side must equal what the stream reported for that message id.
 */
export function compareMeteredUsage(record: GatewayRecord, facts: Pick<TranscriptFacts, "modelUsage" | "perMessageUsage">, options: { cumulativeModelUsage?: boolean } = {}): string[] {
  const problems: string[] = [];
  const metered = record.requests.filter((r) => r.messageId !== null && r.inputTokens !== null && r.refused === null);
  if (record.dropped > 0) problems.push(`the gateway record dropped ${record.dropped} requests; usage cannot be compared`);
  const incomplete = metered.filter((r) => !r.complete);
  if (incomplete.length > 0) problems.push(`${incomplete.length} metered replies broke off before message_stop`);
  const byId = new Map(metered.map((r) => [r.messageId!, r]));
  const sum = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };
  for (const r of byId.values()) {
    sum.input += r.inputTokens!;
    sum.output += r.outputTokens!;
    sum.cacheRead += r.cacheReadInputTokens!;
    sum.cacheWrite += r.cacheWrite5mInputTokens! + r.cacheWrite1hInputTokens!;
  }
  const mu = facts.modelUsage ? Object.values(facts.modelUsage) : [];
  const reported = {
    input: mu.reduce((n, m) => n + m.inputTokens, 0),
    output: mu.reduce((n, m) => n + m.outputTokens, 0),
    cacheRead: mu.reduce((n, m) => n + m.cacheReadInputTokens, 0),
    cacheWrite: mu.reduce((n, m) => n + m.cacheCreationInputTokens, 0),
  };
  if (facts.modelUsage === null && byId.size > 0) problems.push(`the gateway metered ${byId.size} replies but the transcript has no modelUsage`);
  const diffs = (Object.keys(sum) as Array<keyof typeof sum>).filter((k) => sum[k] !== reported[k]).map((k) => `${k} metered ${sum[k]} vs transcript ${reported[k]}`);
  // A resumed session's modelUsage also counts the earlier calls: its sums cannot match one call's.
  if (diffs.length > 0 && !options.cumulativeModelUsage) problems.push(`metered usage differs from the transcript's modelUsage: ${diffs.join(", ")}`);
  for (const m of facts.perMessageUsage) {
    const r = byId.get(m.messageId);
    // The CLI's own stand-in for an API error (measured: model "<synthetic>", zero usage) never came from the API.
    if (!r && m.inputTokens === 0 && m.cacheReadInputTokens === 0 && m.cacheCreationInputTokens === 0) continue;
    if (!r) {
      problems.push(`the transcript has message ${m.messageId.slice(0, 40)} that the gateway never metered`);
      continue;
    }
    const meteredPrompt = [r.inputTokens!, r.cacheReadInputTokens!, r.cacheWrite5mInputTokens! + r.cacheWrite1hInputTokens!];
    const transcriptPrompt = [m.inputTokens, m.cacheReadInputTokens, m.cacheCreationInputTokens];
    if (meteredPrompt.some((v, i) => v !== transcriptPrompt[i])) {
      problems.push(`message ${m.messageId.slice(0, 40)}: metered prompt ${meteredPrompt.join("/")} vs transcript ${transcriptPrompt.join("/")} (input/cache read/cache write)`);
    }
  }
  return problems.slice(0, 10);
}
