#!/usr/bin/env node
// The package's build, run by npm around `npm pack` (package.json "prepack" and "postpack"):
//
//   build     dist/ afresh: the sources compiled by the pinned TypeScript (tsconfig.build.json),
//             relative `.ts` imports rewritten to `.js`, so the installed package runs on Node alone;
//             then the compiled reference doc-bridge server bundled into one file beside it
//             (dist/mcp/reference-engine.mjs), which the package starts for every doc-bridge attempt;
//             and the command, dist/cli/bin.js with all it imports, as one module
//             (dist/cli/study-runner.mjs, package.json "bin")
//   prepack   build, then copy package-lock.json to npm-shrinkwrap.json, the only name under which
//             npm ships a lock file: installing the package then resolves the exact dependency tree
//             the clone was tested with, and records the same runner hash (src/ledger/runner-hash.ts)
//   postpack  remove that copy again, so the clone keeps package-lock.json as its one lock file
import { spawnSync } from "node:child_process";
import { copyFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));
const SHRINKWRAP = join(ROOT, "npm-shrinkwrap.json");

async function build() {
  rmSync(join(ROOT, "dist"), { recursive: true, force: true });
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const r = spawnSync(process.execPath, [tsc, "-p", join(ROOT, "tsconfig.build.json")], { cwd: ROOT, stdio: "inherit" });
  if (r.status !== 0) {
    process.stderr.write(`package: tsc -p tsconfig.build.json failed (exit ${r.status ?? r.signal})\n`);
    process.exit(1);
  }
  // The compiled bundler, so the package's engine is made exactly as the runner describes it (src/mcp/reference-bundle.ts).
  const { bundleCompiledServer } = await import(pathToFileURL(join(ROOT, "dist", "mcp", "reference-bundle.js")).href);
  bundleCompiledServer(join(ROOT, "dist", "mcp"), ROOT);
  // The command itself as one module (package.json "bin"), made the same way (src/cli/runner-bundle.ts).
  const { bundleCompiledRunner } = await import(pathToFileURL(join(ROOT, "dist", "cli", "runner-bundle.js")).href);
  await bundleCompiledRunner(join(ROOT, "dist"));
}

const step = process.argv[2];
if (step === "build") await build();
else if (step === "prepack") {
  await build();
  copyFileSync(join(ROOT, "package-lock.json"), SHRINKWRAP);
} else if (step === "postpack") rmSync(SHRINKWRAP, { force: true });
else {
  process.stderr.write("usage: node scripts/package.mjs build|prepack|postpack\n");
  process.exit(2);
}
