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
