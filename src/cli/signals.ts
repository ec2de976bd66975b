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
