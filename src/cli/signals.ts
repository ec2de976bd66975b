import { ExitCode } from "../util/errors.ts";

/**
 * Runs `work` with SIGINT and SIGTERM turned into an abort of its signal. The first signal stops
 * the current `unit` (its container is stopped, its reservation stays charged, the run ends
 * blocked); a second one exits at once, since the record on disk is always a complete atomic write.
 */
export async function withStopSignals(unit: string, work: (signal: AbortSignal) => Promise<number>): Promise<number> {
  const controller = new AbortController();
  let signals = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    signals++;
    if (signals > 1) process.exit(sig === "SIGTERM" ? ExitCode.sigterm : ExitCode.sigint);
    process.stderr.write(`study-runner: ${sig} received; stopping the current ${unit} (send it again to exit at once)\n`);
    controller.abort(sig);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  try {
    return await work(controller.signal);
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}

const ignoreSignal = () => undefined;

/**
 * A write past the file size limit (RLIMIT_FSIZE, `ulimit -f`) fails with EFBIG, as Node makes it
 * by ignoring SIGXFSZ, and is handled like a full disk. signal-exit (loaded by proper-lockfile)
 * listens for SIGXFSZ and, when it is the only listener, raises it again, which kills the runner
 * in the middle of the write; a listener of the runner's own keeps it a write error.
 */
export function keepFileSizeLimitAWriteError(): void {
  if (process.platform !== "win32" && !process.listeners("SIGXFSZ").includes(ignoreSignal)) process.on("SIGXFSZ", ignoreSignal);
}

function ignoreClosedReader(err: NodeJS.ErrnoException): void {
  if (err.code !== "EPIPE") throw err;
}

/**
 * Output piped into a reader that has gone (`study-runner --help | head -3`): the next write fails
 * with EPIPE, which Node raises as an unhandled 'error' event, ending the runner with a stack trace
 * and exit 1. What the reader no longer wants is dropped instead, and the command ends as it would
 * have, with its own exit code: what a run keeps (ledger, records, reports) is in files, and its
 * summary on stdout is printed again from the ledger by `study-runner report`.
 */
export function dropOutputNobodyReads(): void {
  for (const stream of [process.stdout, process.stderr]) {
    if (!stream.listeners("error").includes(ignoreClosedReader)) stream.on("error", ignoreClosedReader);
  }
}
