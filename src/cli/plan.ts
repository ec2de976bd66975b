import { loadManifest } from "../manifest/load.ts";
import { planStudy } from "../plan/plan.ts";
import { ExitCode } from "../util/errors.ts";

export async function planCommand(flags: { manifest: string; pilot?: boolean; json?: boolean }): Promise<number> {
  const { manifest } = await loadManifest(flags.manifest);
  const plan = planStudy(manifest, flags.pilot ? "pilot" : "full");
  if (flags.json) {
    process.stdout.write(JSON.stringify(plan, null, 2) + "\n");
    return ExitCode.ok;
  }
  const rows = plan.map((a) => [String(a.index + 1), a.taskId, a.scenario, String(a.repetition), a.repository, a.pin.slice(0, 12)]);
  const head = ["#", "task", "scenario", "rep", "repository", "pin"];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join("  ")
      .trimEnd();
  process.stdout.write([line(head), ...rows.map(line)].join("\n") + "\n");
  return ExitCode.ok;
}
