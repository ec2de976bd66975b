/**
 * docs/contract-index.md, the map from every rule to the code and tests that carry it, is
 * generated (scripts/contract-index.mjs) and must be current: a rule added, or a citation added or
 * moved to another file, without `npm run contract-index` fails here.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
// @ts-expect-error: a plain .mjs script without types
import { contractIndex, INDEX_PATH } from "../../scripts/contract-index.mjs";

const index = contractIndex as (root?: string) => string;

describe("the rule index (docs/contract-index.md)", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "study-runner-contract-index-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function project(files: Record<string, string>): Promise<string> {
    const root = await mkdtemp(join(dir, "p-"));
    for (const [path, text] of Object.entries(files)) {
      await mkdir(dirname(join(root, path)), { recursive: true });
      await writeFile(join(root, path), text);
    }
    return root;
  }

  it("is what `npm run contract-index` generates from the tree as it is", async () => {
    const committed = await readFile(join(PROJECT_ROOT, INDEX_PATH as string), "utf8");
    // On failure: run `npm run contract-index` and commit docs/contract-index.md.
    expect(committed).toBe(index());
  });

  it("names each rule's citing code files and its tests, and changes when a citation moves", async () => {
    const contract = [
      "# The runner's contract",
      "## Inputs",
      "### R1. First rule",
      "- Tests:",
      "  - `tests/unit/a.test.ts` › `a`",
      "### R2. Second rule",
      "- Tests:",
      "  - `tests/unit/b.test.ts` › `b`",
      "",
    ].join("\n");
    const root = await project({
      "docs/contract.md": contract,
      "src/plan/plan.ts": "// The order is fixed (contract R1).\n// And again (contract R1, R2).\n",
      "docker/helpers/relay.cjs": "// bounded (contract R2)\n",
      "tests/unit/c.test.ts": '// contract: R2\nit("c", () => {});\n',
    });
    const before = index(root);
    expect(before).toContain("| R1. First rule | `src/plan/plan.ts` ×2 | `tests/unit/a.test.ts` |");
    expect(before).toContain("| R2. Second rule | `docker/helpers/relay.cjs`, `src/plan/plan.ts` | `tests/unit/b.test.ts`, `tests/unit/c.test.ts` |");
    expect(before).toContain("2 rules; 2 cited by the code, 0 carried without a citation.");
    await writeFile(join(root, "src/plan/plan.ts"), "// nothing cited\n");
    const after = index(root);
    expect(after).toContain("| R1. First rule | — | `tests/unit/a.test.ts` |");
    expect(after).not.toBe(before);
  });
});
