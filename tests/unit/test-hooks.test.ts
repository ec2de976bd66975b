/**
 * The knobs only tests set live in one `testHooks` object (src/transport/test-hooks.ts), and
 * production code never sets it: neither a command (src/cli) nor the demo (src/demo).
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

/** A line that names `testHooks` outside a comment: setting it, spreading it or reading it. */
const SETS_TEST_HOOKS = /^(?!\s*(\/\/|\*|\/\*)).*\btestHooks\b/;

async function sourceFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries.filter((e) => e.isFile() && e.name.endsWith(".ts")).map((e) => join(e.parentPath, e.name));
}

describe("testHooks", () => {
  it("the check finds a hook set in code and passes one named in a comment", () => {
    expect(SETS_TEST_HOOKS.test("    testHooks: { stdoutLimitBytes: 1 },")).toBe(true);
    expect(SETS_TEST_HOOKS.test("  ...(x ? { testHooks } : {}),")).toBe(true);
    expect(SETS_TEST_HOOKS.test(" * production code never sets testHooks")).toBe(false);
  });

  it("is never set by production code: src/cli and src/demo", async () => {
    const files = [...(await sourceFiles(join(PROJECT_ROOT, "src/cli"))), ...(await sourceFiles(join(PROJECT_ROOT, "src/demo")))];
    expect(files.length).toBeGreaterThan(10);
    const found: string[] = [];
    for (const file of files) {
      const lines = (await readFile(file, "utf8")).split("\n");
      lines.forEach((line, i) => {
        if (SETS_TEST_HOOKS.test(line)) found.push(`${file.slice(PROJECT_ROOT.length + 1)}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(found).toEqual([]);
  });
});
