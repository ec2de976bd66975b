import { mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import { calibrate } from "../calibrate/calibrate.ts";
import { profileDifference } from "../calibrate/difference.ts";
import { CLAUDE_CODE_VERSION } from "../claude/version.ts";
import { bundledProfilePath, cachedProfilePath, profileText, readProfileFile } from "../profile/load.ts";
import { DockerRuntime } from "../sandbox/docker.ts";
import { writeFileAtomic } from "../util/atomic-file.ts";
import { ExitCode, RefusalError, UsageError } from "../util/errors.ts";
import { printable } from "../util/printable.ts";

/**
 * `study-runner calibrate --cli-version V` (contract R223, R224): measures V into its calibration
 * profile, writes it into the runner's cache folder whole or not at all, and prints its difference
 * against the bundled profile of the pin. A version that cannot serve a study is refused, exit 2,
 * naming each problem, and nothing is written.
 */
export async function calibrateCommand(flags: { cliVersion: string; quiet?: boolean }, measure: typeof calibrate = calibrate): Promise<number> {
  const version = flags.cliVersion;
  if (!/^\d+\.\d+\.\d+$/.test(version)) throw new UsageError(`--cli-version ${printable(version)} is not a version like ${CLAUDE_CODE_VERSION}; pass the Claude Code version to measure`);
  const started = Date.now();
  const result = await measure({ version, runtime: new DockerRuntime(), progress: flags.quiet ? undefined : (line) => process.stderr.write(`study-runner calibrate: ${line}\n`) });
  if (!result.profile) {
    const problems = result.problems.map((p) => `Claude Code ${version} cannot serve a study: ${p}`);
    throw new RefusalError(`${problems.join("\n")}\nnothing was written; study a version that calibrates, e.g. the pinned ${CLAUDE_CODE_VERSION}`, problems);
  }
  const path = cachedProfilePath(version);
  await mkdir(dirname(path), { recursive: true });
  // Not private (it holds no answer and no credential), but never half-written (contract R223).
  await writeFileAtomic(path, profileText(result.profile), { mode: 0o644 });
  const pin = readProfileFile(bundledProfilePath(CLAUDE_CODE_VERSION), CLAUDE_CODE_VERSION);
  const difference = profileDifference(pin, result.profile);
  const lines = [
    `Claude Code ${version} calibrated in ${Math.round((Date.now() - started) / 1000)} s (${Object.entries(result.seconds)
      .map(([step, s]) => `${step} ${Math.round(s)} s`)
      .join(", ")}): ${path}`,
    `profile sha256 ${result.profile.sha256}; binary sha256 ${result.profile.binarySha256}${result.profile.npmIntegrity ? `; npm integrity ${result.profile.npmIntegrity}` : ""}`,
    `difference against the bundled profile of ${CLAUDE_CODE_VERSION}${difference.length === 0 ? ": none" : ` (${difference.length} lines):`}`,
    ...difference.map((d) => `  ${d}`),
    `a run uses it with --cli-version ${version}`,
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
  return ExitCode.ok;
}
