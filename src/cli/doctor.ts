import { DockerRuntime } from "../sandbox/docker.ts";
import { runDoctor, formatReport, type DoctorInput } from "../doctor/doctor.ts";
import { ExitCode } from "../util/errors.ts";
import { gatewayUpstreamOf, parseDoctorFlags, type DoctorFlags } from "./config/commands.ts";
import { commandEnvironment } from "./config/flags.ts";

/** `study-runner doctor`: exit 0 only when a run with the same flags could start. */
export async function doctorCommand(flags: DoctorFlags): Promise<number> {
  const { standIns, ...parsed } = parseDoctorFlags(flags);
  const gatewayUpstream = await gatewayUpstreamOf(standIns);
  const input: DoctorInput = { ...parsed, ...(gatewayUpstream ? { gatewayUpstream } : {}) };
  const report = await runDoctor(input, { connect: () => new DockerRuntime(), env: commandEnvironment("doctor") });
  process.stdout.write(flags.json ? JSON.stringify(report, null, 2) + "\n" : formatReport(report));
  return report.ok ? ExitCode.ok : ExitCode.usage;
}
