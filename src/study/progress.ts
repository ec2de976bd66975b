import type { Observation } from "../ledger/schema.ts";
import type { PlannedAttempt } from "../plan/plan.ts";

/**
 * Progress on stderr: one line as each attempt starts and one as it ends; nothing private
 * (no answer, no credential). Silent with --quiet.
 */
export class Progress {
  private startedAt = 0;
  private readonly runStarted = Date.now();

  constructor(
    private readonly out: NodeJS.WritableStream,
    private readonly total: number,
    private readonly capUsd: number,
    private readonly quiet: boolean,
  ) {}

  private tag(a: PlannedAttempt): string {
    return `[${a.index + 1}/${this.total}] ${a.taskId} ${a.scenario} rep ${a.repetition}`;
  }

  start(a: PlannedAttempt): void {
    this.startedAt = Date.now();
    this.write(`${this.tag(a)}: started`);
  }

  end(a: PlannedAttempt, o: Observation, spentUsd: number): void {
    const tokens = o.inputTokens === null || o.outputTokens === null ? "tokens unknown" : `${o.inputTokens} in / ${o.outputTokens} out`;
    const secs = ((Date.now() - this.startedAt) / 1000).toFixed(1);
    const total = ((Date.now() - this.runStarted) / 1000).toFixed(1);
    this.write(
      `${this.tag(a)}: ${o.status}, ${tokens}, ${o.toolCalls} tool calls, charged ${usd(o.chargedUsd ?? 0)}, spent ${usd(spentUsd)} of ${usd(this.capUsd)}, ${secs}s (run ${total}s)`,
    );
  }

  private write(line: string): void {
    if (!this.quiet) this.out.write(`study-runner: ${line}\n`);
  }
}

const usd = (n: number) => `$${n.toFixed(6)}`;
