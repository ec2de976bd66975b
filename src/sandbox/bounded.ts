import { SandboxSetupError, type PreparedSandbox, type Preparer } from "./sandbox.ts";
import { ATTEMPT_TIMEOUT_MS, STDOUT_LIMIT_BYTES } from "../terms/limits.ts";

/** The CLI may linger after its result event while MCP children exit; then it is killed. */
export const AFTER_RESULT_GRACE_MS = 5_000;
const STDERR_KEEP_BYTES = 16 * 1024;

export interface RawOutcome {
  /** Null when the sandbox could not be set up (`setupFault`): no container ran. */
  containerId: string | null;
  /** The OCI runtime the engine ran the container under, as it reports it. */
  runtime?: string;
  exitCode: number | null;
  timedOut: boolean;
  /** stdout passed the bound: reading stopped and the container was killed. */
  truncated: boolean;
  /** The stdout bound this run applied (the configured one, or the default). */
  stdoutLimitBytes: number;
  oomKilled: boolean;
  /** Killed by the runner after the result event and the grace period. */
  killedAfterResult: boolean;
  stdoutBytes: number;
  /** The last bytes of stderr, for diagnostics; never printed by the runner. */
  stderrTail: string;
  /** with-relay.cjs found the tmpfs HOME full when the CLI exited. */
  homeFull: boolean;
  wallTimeMs: number;
  /**
   * The engine-api channel's stream was refused (contract R242), or the sandbox could not be set up
   * (its relay did not listen in time, contract R258): a setup problem of the run.
   */
  channelFault?: string;
  /** What a copy of a writable folder back to the runner left out (the engine-api channel, contract R245). */
  copyBackProblems?: string[];
}

/** The line with-relay.cjs writes to stderr when the CLI exits with its HOME full. */
export const HOME_FULL_MARK = "with-relay: HOME is full";

export interface RunBounds {
  stdoutLimitBytes?: number;
  timeoutMs?: number;
  afterResultGraceMs?: number;
  /** Aborts the attempt (signals): the sandbox is stopped and cleaned up. */
  signal?: AbortSignal;
  /** Called once the container has started: the runner is idle until it ends. */
  onStarted?: () => void;
}

/** Why the runner killed a run; recorded before the kill, so the outcome never depends on who won a race. */
type KillReason = "timeout" | "truncated" | "after-result" | "abort";

/**
 * The run's stdout as lines, under the byte bound: every complete line goes to `onLine`; past the
 * bound reading stops and `onBound` is called once; the first result event calls `onResult`.
 */
class BoundedLines {
  bytes = 0;
  cut = false;
  private pending = "";
  private sawResult = false;
  private readonly decoder = new TextDecoder("utf-8");

  constructor(
    private readonly limit: number,
    private readonly onLine: (line: string) => void,
    private readonly onBound: () => void,
    private readonly onResult: () => void,
  ) {}

  push(chunk: Buffer): void {
    if (this.cut) return;
    if (this.bytes + chunk.length > this.limit) {
      chunk = chunk.subarray(0, this.limit - this.bytes);
      this.bytes = this.limit;
      this.cut = true;
      this.onBound();
    } else this.bytes += chunk.length;
    this.pending += this.decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = this.pending.indexOf("\n")) >= 0) {
      const line = this.pending.slice(0, nl);
      this.pending = this.pending.slice(nl + 1);
      if (!this.sawResult && line.includes('"result"') && /"type"\s*:\s*"result"/.test(line)) {
        this.sawResult = true;
        this.onResult();
      }
      this.onLine(line);
    }
  }

  /** A final line without a newline is still a line (a truncated one is not: it was cut). */
  finish(): void {
    if (!this.cut && this.pending.length > 0) this.onLine(this.pending);
  }
}

/** Resolves when the stream has ended, closed or failed. */
function drained(stream: NodeJS.ReadableStream): Promise<void> {
  return new Promise<void>((resolve) => {
    stream.on("end", resolve);
    stream.on("close", resolve);
    stream.on("error", () => resolve());
  });
}

/**
 * Runs one sandbox to its end under the bounds and feeds every complete stdout line to `onLine`
 * as it arrives. Outcomes (timeout, truncation, non-zero exit, OOM kill) are results; only the
 * runner's own faults (the engine unreachable) throw. The sandbox is cleaned up whatever happened.
 * `sandbox` is a `Sandbox` given a `SandboxSpec`, or the Docker provider's `containers` given a
 * container spec as it is (tests).
 */
export async function runBounded<S>(sandbox: Preparer<S>, spec: S, onLine: (line: string) => void, bounds: RunBounds = {}): Promise<RawOutcome> {
  const limit = bounds.stdoutLimitBytes ?? STDOUT_LIMIT_BYTES;
  const started = Date.now();
  let prepared: PreparedSandbox;
  try {
    prepared = await sandbox.prepare(spec);
  } catch (err) {
    if (!(err instanceof SandboxSetupError)) throw err;
    // Nothing ran: the attempt's setup failed (contract R258).
    return {
      containerId: null,
      exitCode: null,
      timedOut: false,
      truncated: false,
      stdoutLimitBytes: limit,
      oomKilled: false,
      killedAfterResult: false,
      stdoutBytes: 0,
      stderrTail: "",
      homeFull: false,
      wallTimeMs: Date.now() - started,
      channelFault: err.message,
    };
  }
  const killed = new Set<KillReason>();
  const timers: NodeJS.Timeout[] = [];
  const kill = (why: KillReason) => {
    killed.add(why);
    prepared.stop().catch(() => {});
  };
  const lines = new BoundedLines(
    limit,
    onLine,
    () => kill("truncated"),
    () => timers.push(setTimeout(() => kill("after-result"), bounds.afterResultGraceMs ?? AFTER_RESULT_GRACE_MS)),
  );
  const onAbort = () => kill("abort");
  let stderrTail = "";
  try {
    timers.push(setTimeout(() => kill("timeout"), bounds.timeoutMs ?? ATTEMPT_TIMEOUT_MS));
    bounds.signal?.addEventListener("abort", onAbort, { once: true });
    if (bounds.signal?.aborted) onAbort();
    const streams = await prepared.run();
    streams.stdout.on("data", (chunk: Buffer) => lines.push(chunk));
    const stdoutDone = drained(streams.stdout);
    streams.stderr.on("data", (chunk: Buffer) => {
      stderrTail = (stderrTail + chunk.toString("utf8")).slice(-STDERR_KEEP_BYTES);
    });
    bounds.onStarted?.();
    const exit = await prepared.wait();
    await Promise.race([stdoutDone, new Promise((r) => setTimeout(r, 2_000))]);
    lines.finish();
    return {
      containerId: prepared.id,
      ...(exit.ociRuntime !== undefined ? { runtime: exit.ociRuntime } : {}),
      exitCode: exit.exitCode,
      timedOut: killed.has("timeout"),
      truncated: lines.cut,
      stdoutLimitBytes: limit,
      oomKilled: exit.oomKilled,
      killedAfterResult: killed.has("after-result"),
      stdoutBytes: lines.bytes,
      stderrTail,
      homeFull: stderrTail.includes(HOME_FULL_MARK),
      wallTimeMs: Date.now() - started,
      ...(exit.channelFault !== undefined ? { channelFault: exit.channelFault } : {}),
      ...(exit.copyBackProblems !== undefined ? { copyBackProblems: exit.copyBackProblems } : {}),
    };
  } finally {
    for (const t of timers) clearTimeout(t);
    bounds.signal?.removeEventListener("abort", onAbort);
    await prepared.cleanup();
  }
}
