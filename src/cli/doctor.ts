import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { DockerRuntime } from "../sandbox/docker.ts";
import { runDoctor, formatReport, type DoctorInput } from "../doctor/doctor.ts";
import { ExitCode } from "../util/errors.ts";
import { parseDoctorFlags, type DoctorFlags } from "./config/commands.ts";

/** `study-runner doctor`: exit 0 only when a run with the same flags could start. */
export async function doctorCommand(flags: DoctorFlags): Promise<number> {
  const input: DoctorInput = parseDoctorFlags(flags);
  if (flags.testGatewayUpstream !== undefined) {
    input.gatewayUpstream = { url: flags.testGatewayUpstream, ...(flags.testGatewayCa ? { ca: await readFile(resolve(flags.testGatewayCa), "utf8") } : {}) };
  }
  const report = await runDoctor(input, { connect: () => new DockerRuntime(), env: process.env });
  process.stdout.write(flags.json ? JSON.stringify(report, null, 2) + "\n" : formatReport(report));
  return report.ok ? ExitCode.ok : ExitCode.usage;
}
