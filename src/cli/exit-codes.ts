import { ExitCode } from "../util/errors.ts";

/**
 * What each exit code of `study-runner` means, in the words `--help`, README.md and docs/pilot.md
 * use (a test compares all three with this list and runs a study that ends with each code).
 */
export const EXIT_CODES: ReadonlyArray<{ code: number; meaning: string }> = [
  { code: ExitCode.ok, meaning: "the run reached awaiting-adjudication, or a dry run, doctor or check passed" },
  { code: ExitCode.blocked, meaning: "an attempt did not complete: the run is blocked, its summary is on stdout" },
  { code: ExitCode.usage, meaning: "bad input or a refused start: nothing was spent" },
  { code: ExitCode.fault, meaning: "the runner's own fault (Docker unreachable, disk full, a bug): read the ledger with `study-runner ledger check`" },
  { code: ExitCode.sigint, meaning: "interrupted by SIGINT: the run is blocked, its summary is on stdout, the ledger names the signal" },
  { code: ExitCode.sigterm, meaning: "interrupted by SIGTERM: the run is blocked, its summary is on stdout, the ledger names the signal" },
];

/** The `--help` block: one line per code. */
export function exitCodeHelp(): string {
  return ["Exit codes:", ...EXIT_CODES.map(({ code, meaning }) => `  ${String(code).padEnd(4)}${meaning}`)].join("\n");
}
