import { chmod, mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Writable } from "node:stream";
import { prepareDemo } from "../../src/demo/setup.ts";
import { ExportHasher, FILE_MODE } from "../../src/export/export.ts";
import { readLedger } from "../../src/ledger/store.ts";
import type { Ledger } from "../../src/ledger/schema.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import { referenceEngineCommand } from "../../src/mcp/preflight.ts";
import { planStudy, type PlannedAttempt } from "../../src/plan/plan.ts";
import type { ContainerRuntime } from "../../src/sandbox/port.ts";
import type { Sandbox } from "../../src/sandbox/sandbox.ts";
import { runStudy } from "../../src/study/run.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";

/** A folder of export-like files (mode 444) in `parent` and the export hash of what it holds. */
export async function exportFolder(parent: string, files: Record<string, string>): Promise<{ dir: string; hash: string }> {
  const dir = await mkdtemp(join(parent, "export-"));
  await chmod(dir, 0o755);
  const hasher = new ExportHasher();
  for (const [path, content] of Object.entries(files).sort(([a], [b]) => Buffer.compare(Buffer.from(a), Buffer.from(b)))) {
    await mkdir(join(dir, path, ".."), { recursive: true, mode: 0o755 });
    await writeFile(join(dir, path), content, { mode: FILE_MODE });
    hasher.add(path, Buffer.from(content));
  }
  return { dir, hash: hasher.digest() };
}

/**
 * The demo's pilot study (or the first `attempts` of it) run with `runStudy` on the engine-api
 * channel through the gateway, in `folder`: over `runtime`, and over `sandbox` when given (else the
 * run kinds' provider of that runtime). Returns the exit code, the ledger and what it wrote to stderr.
 */
export async function demoPilotOnEngineApi(
  folder: string,
  runtime: ContainerRuntime,
  o: { attempts?: number; sandbox?: Sandbox } = {},
): Promise<{ code: number; ledger: Ledger; plan: PlannedAttempt[]; stderr: string }> {
  const demo = await prepareDemo(folder, runtime);
  const loaded = await loadManifest(DEMO_MANIFEST);
  const plan = planStudy(loaded.manifest, "pilot").slice(0, o.attempts);
  const output = join(folder, "ledger.json");
  let stderr = "";
  const code = await runStudy(
    {
      loaded,
      mode: "pilot",
      plan,
      fullPlanSize: planStudy(loaded.manifest, "full").length,
      roots: new Map(Object.entries(demo.roots)),
      model: "claude-haiku-5-5",
      capUsd: 1,
      attemptBudgetUsd: 0.1,
      output,
      image: demo.image,
      expectedCliVersion: "2.1.296",
      isolation: "offline",
      credentials: "gateway",
      sandboxChannel: "engine-api",
      docBridgeCommand: referenceEngineCommand(),
      claudeConfigDir: demo.loginDir,
      quiet: true,
    },
    {
      runtime,
      ...(o.sandbox ? { sandbox: o.sandbox } : {}),
      stdout: () => {},
      stderr: new Writable({
        write(chunk, _enc, cb) {
          stderr += String(chunk);
          cb();
        },
      }),
    },
  );
  return { code, ledger: await readLedger(output), plan, stderr };
}
