import { parseExportLimits } from "../export/options.ts";
import { DockerRuntime } from "../sandbox/docker.ts";
import { runDoctor, formatReport } from "../doctor/doctor.ts";
import { ExitCode, UsageError } from "../util/errors.ts";
import { parseRoots } from "../settings/run-options.ts";
import { parseEngineCommand } from "./run.ts";
import { parseEgressAllow } from "../isolation/policy.ts";
import type { Transport } from "../terms/terms.ts";

export interface DoctorFlags {
  maxExportFiles?: string;
  maxExportBytes?: string;
  manifest: string;
  root?: string[];
  transport: Transport;
  image: string;
  claudeConfigDir?: string;
  docBridgeCommand?: string;
  output?: string;
  attemptBudgetUsd?: string;
  cliVersion: string;
  pilot?: boolean;
  run?: boolean;
  json?: boolean;
  isolation?: string;
  egressAllow?: string[];
  runtime?: string;
}

/** `study-runner doctor`: exit 0 only when a run with the same flags could start. */
export async function doctorCommand(flags: DoctorFlags): Promise<number> {
  if (flags.pilot && flags.run) throw new UsageError("--pilot and --run exclude each other; choose one");
  if (flags.egressAllow !== undefined && flags.isolation !== "strict") throw new UsageError("--egress-allow applies to --isolation strict only");
  const report = await runDoctor(
    {
      manifest: flags.manifest,
      mode: flags.run ? "full" : "pilot",
      transport: flags.transport,
      roots: parseRoots(flags.root),
      image: flags.image,
      expectedCliVersion: flags.cliVersion,
      claudeConfigDir: flags.claudeConfigDir,
      docBridgeCommand: parseEngineCommand(flags.docBridgeCommand),
      output: flags.output,
      attemptBudgetUsd: flags.attemptBudgetUsd,
      isolation: flags.isolation,
      egressAllow: flags.egressAllow !== undefined ? parseEgressAllow(flags.egressAllow) : undefined,
      runtime: flags.runtime,
      exportLimits: parseExportLimits(flags),
    },
    { connect: () => new DockerRuntime(), env: process.env },
  );
  process.stdout.write(flags.json ? JSON.stringify(report, null, 2) + "\n" : formatReport(report));
  return report.ok ? ExitCode.ok : ExitCode.usage;
}
