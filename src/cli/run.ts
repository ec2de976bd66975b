import { loadManifest } from "../manifest/load.ts";
import { planStudy, plannedRepositories } from "../plan/plan.ts";
import { checkRoot, type RootCheck } from "../corpus/check.ts";
import { ExitCode, RefusalError, UsageError } from "../util/errors.ts";
import { checkExecution, parseRoots, type RawRunFlags } from "./options.ts";
import { PROJECT_ROOT } from "../util/paths.ts";

export interface RunFlags extends RawRunFlags {
  manifest: string;
  transport: "cli" | "http";
}

async function checkRoots(
  manifest: Awaited<ReturnType<typeof loadManifest>>["manifest"],
  roots: ReadonlyMap<string, string>,
): Promise<RootCheck[]> {
  const checks = await Promise.all([...roots].map(([name, dir]) => checkRoot(manifest, name, dir)));
  const problems = checks.flatMap((c) => c.problems);
  if (problems.length) throw new RefusalError(problems.join("\n"), problems);
  return checks;
}

export async function runCommand(flags: RunFlags): Promise<number> {
  if (flags.pilot && flags.run) throw new UsageError("--pilot and --run exclude each other; choose one");
  const loaded = await loadManifest(flags.manifest);
  const { manifest } = loaded;
  const mode = flags.pilot ? "pilot" : "full";
  const plan = planStudy(manifest, mode);
  const roots = parseRoots(flags.root);
  const unknown = [...roots.keys()].filter((name) => !(name in manifest.repositories));
  if (unknown.length) {
    throw new UsageError(
      unknown.map((n) => `--root ${n}=…: '${n}' is not a repository of the manifest (known: ${Object.keys(manifest.repositories).join(", ")})`).join("\n"),
    );
  }

  if (flags.dryRun) {
    const checks = await checkRoots(manifest, roots);
    const byName = new Map(checks.map((c) => [c.repository, c]));
    const summary = {
      dryRun: true,
      manifest: loaded.path,
      protocolHash: loaded.protocolHash,
      mode,
      attempts: plan.length,
      tasks: new Set(plan.map((a) => a.taskId)).size,
      repetitions: mode === "pilot" ? 1 : manifest.repetitions,
      scenarios: manifest.scenarios,
      transport: flags.transport,
      repositories: Object.entries(manifest.repositories).map(([name, pin]) => ({
        name,
        pin,
        planned: plannedRepositories(plan).includes(name),
        root: byName.get(name)?.root ?? null,
        checked: byName.has(name),
        sourcesChecked: byName.get(name)?.sources ?? 0,
      })),
      networkCalls: 0,
      claudeProcesses: 0,
    };
    process.stdout.write(JSON.stringify(summary, null, 2) + "\n");
    return ExitCode.ok;
  }

  const planned = plannedRepositories(plan);
  const { settings, problems } = checkExecution(flags, process.env, flags.transport, planned, roots);
  if (flags.output) {
    const { checkOutputPath } = await import("../ledger/store.ts");
    problems.push(...(await checkOutputPath(flags.output, { checkouts: [...roots.values()], projectRoot: PROJECT_ROOT })));
  }
  if (problems.length || !settings) throw new UsageError(problems.join("\n"), problems);
  await checkRoots(manifest, roots);
  throw new RefusalError("execution is not available yet in this build: only --dry-run runs");
}
