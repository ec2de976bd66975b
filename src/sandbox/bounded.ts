import type { ContainerRuntime, ContainerSpec } from "./port.ts";
import { ATTEMPT_TIMEOUT_MS, STDOUT_LIMIT_BYTES } from "../terms/limits.ts";

/** The CLI may linger after its result event while MCP children exit; then it is killed. */
export const AFTER_RESULT_GRACE_MS = 5_000;
const STDERR_KEEP_BYTES = 16 * 1024;

export interface RawOutcome {
  containerId: string;
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
}

/** The line with-relay.cjs writes to stderr when the CLI exits with its HOME full. */
export const HOME_FULL_MARK = "with-relay: HOME is full";

export interface RunBounds {
  stdoutLimitBytes?: number;
  timeoutMs?: number;
  afterResultGraceMs?: number;
  /** Aborts the attempt (signals): the container is killed and removed. */
  signal?: AbortSignal;
  /** Called once the container has started: the runner is idle until it ends. */
  onStarted?: () => void;
}

/**
 * Runs one container to its end under the bounds and feeds every complete stdout line to
 * `onLine` as it arrives. Outcomes (timeout, truncation, non-zero exit, OOM kill) are
 * results; only the runner's own faults (the engine unreachable) throw. The container is
 * removed whatever happened.
 */
export async function runBounded(runtime: ContainerRuntime, spec: ContainerSpec, onLine: (line: string) => void, bounds: RunBounds = {}): Promise<RawOutcome> {
  const limit = bounds.stdoutLimitBytes ?? STDOUT_LIMIT_BYTES;
  const started = Date.now();
  const id = await runtime.create(spec);
  let timedOut = false;
  let truncated = false;
  let killedAfterResult = false;
  let stdoutBytes = 0;
  let stderrTail = "";
  const timers: NodeJS.Timeout[] = [];
  // The reason is recorded before the kill, so the outcome never depends on who won a race.
  const kill = (why: "timeout" | "truncated" | "after-result" | "abort") => {
    if (why === "timeout") timedOut = true;
    if (why === "truncated") truncated = true;
    if (why === "after-result") killedAfterResult = true;
    runtime.kill(id).catch(() => {});
  };
  const onAbort = () => kill("abort");
  try {
    const streams = await runtime.attach(id);
    let pending = "";
    let sawResult = false;
    const decoder = new TextDecoder("utf-8");
    const stdoutDone = new Promise<void>((resolve) => {
      streams.stdout.on("data", (chunk: Buffer) => {
        if (truncated) return;
        if (stdoutBytes + chunk.length > limit) {
          chunk = chunk.subarray(0, limit - stdoutBytes);
          stdoutBytes = limit;
          kill("truncated");
        } else stdoutBytes += chunk.length;
        pending += decoder.decode(chunk, { stream: true });
        let nl: number;
        while ((nl = pending.indexOf("\n")) >= 0) {
          const line = pending.slice(0, nl);
          pending = pending.slice(nl + 1);
          if (!sawResult && line.includes('"result"') && /"type"\s*:\s*"result"/.test(line)) {
            sawResult = true;
            timers.push(setTimeout(() => kill("after-result"), bounds.afterResultGraceMs ?? AFTER_RESULT_GRACE_MS));
          }
          onLine(line);
        }
      });
      streams.stdout.on("end", resolve);
      streams.stdout.on("close", resolve);
      streams.stdout.on("error", () => resolve());
    });
    streams.stderr.on("data", (chunk: Buffer) => {
      stderrTail = (stderrTail + chunk.toString("utf8")).slice(-STDERR_KEEP_BYTES);
    });
    timers.push(setTimeout(() => kill("timeout"), bounds.timeoutMs ?? ATTEMPT_TIMEOUT_MS));
    bounds.signal?.addEventListener("abort", onAbort, { once: true });
    if (bounds.signal?.aborted) onAbort();
    await runtime.start(id);
    bounds.onStarted?.();
    const waited = await runtime.wait(id);
    await Promise.race([stdoutDone, new Promise((r) => setTimeout(r, 2_000))]);
    // A final line without a newline is still a line (a truncated one is not: it was cut).
    if (!truncated && pending.length > 0) onLine(pending);
    const info = await runtime.inspect(id);
    return {
      containerId: id,
      ...(info ? { runtime: info.runtime } : {}),
      exitCode: waited.exitCode,
      timedOut,
      truncated,
      stdoutLimitBytes: limit,
      oomKilled: waited.oomKilled || (info?.oomKilled ?? false),
      killedAfterResult,
      stdoutBytes,
      stderrTail,
      homeFull: stderrTail.includes(HOME_FULL_MARK),
      wallTimeMs: Date.now() - started,
    };
  } finally {
    for (const t of timers) clearTimeout(t);
    bounds.signal?.removeEventListener("abort", onAbort);
    await runtime.remove(id);
  }
}
