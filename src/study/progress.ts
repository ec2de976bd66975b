import type { Observation } from "../ledger/schema.ts";
import type { PlannedAttempt } from "../plan/plan.ts";

export interface ProgressOptions {
  /** Rewrite a live line while an attempt runs; default: when the stream is a terminal. */
  live?: boolean;
  /** How often the live line is rewritten. */
  tickMs?: number;
}

/** Carriage return, then "erase the whole line" (ECMA-48 EL 2): the live line is redrawn in place. */
const CLEAR_LINE = "\r\x1b[2K";

/**
 * Progress on stderr: one line as each attempt starts and one as it ends; nothing private
 * (no answer, no credential). On a terminal a live line under the start line is rewritten
 * every second while the attempt runs and erased before its end line, so a log or a pipe
 * only ever holds the plain lines. Silent with --quiet.
 */
export class Progress {
  /** The attempts running now and when each started (several with --concurrency). */
  private readonly inFlight = new Map<number, { tag: string; startedAt: number }>();
  private readonly runStarted = Date.now();
  private spentUsd = 0;
  private readonly live: boolean;
  private readonly tickMs: number;
  private ticker: NodeJS.Timeout | undefined;
  private drawn = false;
  /** Lines to print under the next end line (settledNote). */
  private readonly afterEnd: string[] = [];

  constructor(
    private readonly out: NodeJS.WritableStream,
    private readonly total: number,
    private readonly capUsd: number,
    private readonly quiet: boolean,
    options: ProgressOptions = {},
  ) {
    this.live = !quiet && (options.live ?? (out as { isTTY?: boolean }).isTTY === true);
    this.tickMs = options.tickMs ?? 1000;
  }

  private tag(a: PlannedAttempt): string {
    return `[${a.index + 1}/${this.total}] ${a.taskId} ${a.scenario} rep ${a.repetition}`;
  }

  start(a: PlannedAttempt): void {
    this.stopLive();
    this.inFlight.set(a.index, { tag: this.tag(a), startedAt: Date.now() });
    this.write(`${this.tag(a)}: started`);
    this.startTicker();
  }

  end(a: PlannedAttempt, o: Observation, spentUsd: number): void {
    this.stopLive();
    const startedAt = this.inFlight.get(a.index)?.startedAt ?? Date.now();
    this.inFlight.delete(a.index);
    this.spentUsd = spentUsd;
    const tokens = o.inputTokens === null || o.outputTokens === null ? "tokens unknown" : `${o.inputTokens} in / ${o.outputTokens} out`;
    const secs = ((Date.now() - startedAt) / 1000).toFixed(1);
    const total = ((Date.now() - this.runStarted) / 1000).toFixed(1);
    // With attempts in flight the end line says how many still run.
    const others = this.inFlight.size > 0 ? `, ${this.inFlight.size} still running` : "";
    this.write(
      `${this.tag(a)}: ${o.status}, ${tokens}, ${o.toolCalls} tool calls, charged ${usd(o.chargedUsd ?? 0)}, spent ${usd(spentUsd)} of ${usd(this.capUsd)}, ${secs}s (run ${total}s)${others}`,
    );
    for (const line of this.afterEnd.splice(0)) this.write(line);
    this.startTicker();
  }

  /** A line about the attempt being settled (its evidence digest): printed under its end line, never into the live line. */
  settledNote(text: string): void {
    this.afterEnd.push(text);
  }

  /** Prints what waits for an end line that will not come (the run ended, a runner fault among the ways). */
  flushSettled(): void {
    if (this.afterEnd.length === 0) return;
    this.stopLive();
    for (const line of this.afterEnd.splice(0)) this.write(line);
  }

  /** The live line: the one running attempt, or how many run and which. */
  private frame(): string {
    const now = Date.now();
    const total = Math.round((now - this.runStarted) / 1000);
    const money = `spent ${usd(this.spentUsd)} of ${usd(this.capUsd)}, run ${total}s`;
    const running = [...this.inFlight.values()];
    if (running.length === 1) return `study-runner: ${running[0]!.tag}: running ${Math.round((now - running[0]!.startedAt) / 1000)}s, ${money}`;
    const which = running.map((r) => r.tag.slice(0, r.tag.indexOf("]") + 1)).join(" ");
    return `study-runner: ${running.length} attempts running ${which}, ${money}`;
  }

  private startTicker(): void {
    if (!this.live || this.ticker || this.inFlight.size === 0) return;
    this.ticker = setInterval(() => {
      if (this.inFlight.size === 0) return;
      this.out.write(`${CLEAR_LINE}${this.frame()}`);
      this.drawn = true;
    }, this.tickMs);
    // Never what keeps the process alive: a runner fault must still end it.
    this.ticker.unref();
  }

  /** Stops and erases the live line (also when an attempt ends by a runner fault). */
  stopLive(): void {
    clearInterval(this.ticker);
    this.ticker = undefined;
    if (this.drawn) this.out.write(CLEAR_LINE);
    this.drawn = false;
  }

  /** A one-off line about the run (e.g. a wait), nothing private: the live line is erased first and drawn again after. */
  note(text: string): void {
    this.stopLive();
    for (const line of [...this.afterEnd.splice(0), text]) this.write(line);
    this.startTicker();
  }

  private write(line: string): void {
    if (!this.quiet) this.out.write(`study-runner: ${line}\n`);
  }
}

const usd = (n: number) => `$${n.toFixed(6)}`;
