import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { relativeImportClosure } from "../../src/mcp/reference-bundle.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

/** `import … from "./x.ts"`, `import "./x.ts"` and `export … from "./x.ts"`, not `import type` and not `import()`: what loading a module loads at once. */
const STATIC_IMPORT = /^(?:import|export)\s+(?!type\b)(?:[^;]*?\bfrom\s+)?["'](\.{1,2}\/[^"']+)["']/gm;

/** The project modules that loading `entry` loads, as paths relative to the project root. */
const staticClosure = (entry: string) => relativeImportClosure(join(PROJECT_ROOT, entry), STATIC_IMPORT).map((f) => relative(PROJECT_ROOT, f));

describe("what every runner command loads before its action (src/cli/main.ts)", () => {
  it("is the command line and its config, not the machinery that runs studies, sessions or containers", () => {
    const closure = staticClosure("src/cli/main.ts");
    // The closure is real: main's own flags and config are in it.
    expect(closure).toContain("src/cli/config/flags.ts");
    expect(closure).toContain("src/cli/session.ts");
    // A command's machinery is imported by its action: `--version`, `--help`, `ledger verify` and
    // `report` do not load the session runner's graph (about 170 modules) at their start.
    for (const machinery of ["src/session/run.ts", "src/study/run.ts", "src/sandbox/docker.ts", "src/sandbox/engine-api.ts", "src/transport/cli/run.ts"]) {
      expect(closure, machinery).not.toContain(machinery);
    }
  });
});
