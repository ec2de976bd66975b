import { execFile } from "node:child_process";
import { appendFile, cp, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

const run = promisify(execFile);

/** Runs `npm run deps` (the layering check that `npm test` runs) in `dir`; returns its exit code and output. */
async function layeringCheck(dir: string): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run("npm", ["run", "--silent", "deps"], { cwd: dir, timeout: 60_000 });
    return { code: 0, output: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : -1, output: `${e.stdout ?? ""}${e.stderr ?? ""}` };
  }
}

/** A copy of the project's src/ with the files the check reads, and the project's node_modules linked in. */
async function copyOfProject(parent: string, name: string): Promise<string> {
  const dir = join(parent, name);
  await mkdir(dir);
  await cp(join(PROJECT_ROOT, "src"), join(dir, "src"), { recursive: true });
  for (const file of ["package.json", "tsconfig.json", ".dependency-cruiser.cjs"]) await cp(join(PROJECT_ROOT, file), join(dir, file));
  await symlink(join(PROJECT_ROOT, "node_modules"), join(dir, "node_modules"), "dir");
  return dir;
}

describe.concurrent("the layering check (npm run deps)", () => {
  let parent: string;
  beforeAll(async () => {
    parent = await mkdtemp(join(tmpdir(), "study-runner-layering-"));
  });
  afterAll(async () => {
    await rm(parent, { recursive: true, force: true });
  });

  it("passes on the real tree", async () => {
    const { code, output } = await layeringCheck(PROJECT_ROOT);
    expect(output).toContain("no dependency violations found");
    expect(code).toBe(0);
  });

  it("fails when a lower folder imports one above it, closing a cycle between folders", async () => {
    const dir = await copyOfProject(parent, "cycle");
    // ledger/ imports util/; util/ importing ledger/ closes the loop.
    await appendFile(join(dir, "src", "util", "errors.ts"), '\nexport { LedgerSchema as _cycle } from "../ledger/schema.ts";\n');
    const { code, output } = await layeringCheck(dir);
    expect(code).not.toBe(0);
    expect(output).toMatch(/error no-cycle-between-folders: src\/util →\s+src\/ledger →\s+src\/util/);
  });

  it("fails when src imports from outside src, or a module other than the Docker adapter imports dockerode", async () => {
    const dir = await copyOfProject(parent, "outside");
    await mkdir(join(dir, "tests"));
    await writeFile(join(dir, "tests", "helper.ts"), "export const helper = 1;\n");
    await appendFile(join(dir, "src", "plan", "plan.ts"), '\nexport { helper as _helper } from "../../tests/helper.ts";\n');
    await appendFile(join(dir, "src", "attempt", "run.ts"), '\nimport type Docker from "dockerode";\nexport type _Docker = Docker;\n');
    const { code, output } = await layeringCheck(dir);
    expect(code).not.toBe(0);
    expect(output).toContain("error src-imports-only-src: src/plan/plan.ts → tests/helper.ts");
    expect(output).toMatch(/error only-the-docker-adapter-imports-dockerode: src\/attempt\/run\.ts → \S*node_modules\/dockerode\//);
    expect(output).not.toContain("src/runtime/docker.ts →");
  });
});
