/**
 * package.json as the installable package needs it (README, "Install"): every runtime dependency
 * travels inside the tarball, so `npm install --offline ./study-runner-<version>.tgz` needs no
 * registry; no TypeScript toolchain is a runtime dependency; the command is the compiled entry.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

const pkg = JSON.parse(readFileSync(join(PROJECT_ROOT, "package.json"), "utf8")) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  bundleDependencies: string[];
  bin: Record<string, string>;
  files: string[];
};

describe("package.json of the installable package", () => {
  it("bundles exactly its runtime dependencies (add a new dependency to bundleDependencies too)", () => {
    expect([...pkg.bundleDependencies].sort()).toEqual(Object.keys(pkg.dependencies).sort());
  });

  it("keeps the TypeScript toolchain out of the runtime dependencies, and its command is the compiled entry of src/cli/bin.ts", () => {
    for (const tool of ["tsx", "typescript", "vitest"]) {
      expect(Object.keys(pkg.dependencies), tool).not.toContain(tool);
      expect(Object.keys(pkg.devDependencies), tool).toContain(tool);
    }
    expect(pkg.bin).toEqual({ "study-runner": "dist/cli/study-runner.mjs" });
    expect(readFileSync(join(PROJECT_ROOT, "src", "cli", "bin.ts"), "utf8").startsWith("#!/usr/bin/env node\n")).toBe(true);
    expect(pkg.files).toEqual(expect.arrayContaining(["dist/", "docker/", "study/demo/"]));
  });
});
