import { execFile } from "node:child_process";
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

const run = promisify(execFile);

/**
 * Runs the `deps` script of package.json (the layering check that `npm test` runs) in `dir`, as
 * `npm run deps` would: through sh with node_modules/.bin first on PATH (npm itself only adds startup time).
 */
async function layeringCheck(dir: string): Promise<{ code: number; output: string }> {
  const script = (JSON.parse(await readFile(join(dir, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts.deps!;
  const env = { ...process.env, PATH: `${join(dir, "node_modules", ".bin")}${delimiter}${process.env.PATH ?? ""}` };
  try {
    const { stdout, stderr } = await run("sh", ["-c", script], { cwd: dir, env, timeout: 60_000 });
    return { code: 0, output: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === "number" ? e.code : -1, output: `${e.stdout ?? ""}${e.stderr ?? ""}` };
  }
}

/**
 * A small project laid out like this one: src/ folders that import downward only (plan -> util,
 * sandbox/docker.ts -> dockerode), with the project's own package.json, tsconfig and rules, and its
 * node_modules linked in. `files` adds or replaces files to break one rule at a time.
 */
async function miniProject(parent: string, name: string, files: Record<string, string> = {}): Promise<string> {
  const dir = join(parent, name);
  const tree: Record<string, string> = {
    "src/util/errors.ts": "export class UsageError extends Error {}\n",
    "src/plan/plan.ts": 'import { UsageError } from "../util/errors.ts";\nexport const plan = () => new UsageError("x");\n',
    "src/sandbox/docker.ts": 'import Docker from "dockerode";\nimport { plan } from "../plan/plan.ts";\nexport const engine = () => [new Docker(), plan()];\n',
    ...files,
  };
  for (const [path, text] of Object.entries(tree)) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), text);
  }
  for (const file of ["package.json", "tsconfig.json", ".dependency-cruiser.cjs"]) await cp(join(PROJECT_ROOT, file), join(dir, file));
  await symlink(join(PROJECT_ROOT, "node_modules"), join(dir, "node_modules"), "dir");
  return dir;
}

describe.concurrent("the layering check (the deps script, part of npm test)", () => {
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

  it("passes on a small tree that imports downward only", async () => {
    const { code, output } = await layeringCheck(await miniProject(parent, "clean"));
    expect(output).toContain("no dependency violations found");
    expect(code).toBe(0);
  });

  it("fails when a lower folder imports one above it, closing a cycle between folders", async () => {
    // plan/ imports util/; util/ importing plan/ closes the loop.
    const dir = await miniProject(parent, "cycle", { "src/util/errors.ts": 'import { plan } from "../plan/plan.ts";\nexport class UsageError extends Error {}\nexport const again = () => plan();\n' });
    const { code, output } = await layeringCheck(dir);
    expect(code).not.toBe(0);
    expect(output).toMatch(/error no-cycle-between-folders: src\/util →\s+src\/plan →\s+src\/util/);
  });

  it("fails when src imports from outside src, or a module other than the Docker adapter imports dockerode", async () => {
    const dir = await miniProject(parent, "outside", {
      "tests/helper.ts": "export const helper = 1;\n",
      "src/plan/plan.ts": 'import { UsageError } from "../util/errors.ts";\nexport { helper } from "../../tests/helper.ts";\nexport const plan = () => new UsageError("x");\n',
      "src/sandbox/bounded.ts": 'import type Docker from "dockerode";\nexport type Engine = Docker;\n',
    });
    const { code, output } = await layeringCheck(dir);
    expect(code).not.toBe(0);
    expect(output).toContain("error src-imports-only-src: src/plan/plan.ts → tests/helper.ts");
    expect(output).toMatch(/error only-the-docker-adapter-imports-dockerode: src\/sandbox\/bounded\.ts → \S*node_modules\/dockerode\//);
    expect(output).not.toContain("src/sandbox/docker.ts →");
  });
});
