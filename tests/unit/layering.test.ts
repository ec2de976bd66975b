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
 * sandbox/docker.ts -> plan and dockerode), with the project's own package.json, tsconfig and rules, and its
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

/** The check's output on a small project with `files` that break a rule; the check must have failed. */
async function violations(parent: string, name: string, files: Record<string, string>): Promise<string> {
  const { code, output } = await layeringCheck(await miniProject(parent, name, files));
  expect(code).not.toBe(0);
  return output;
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

  it("passes on a small tree that imports downward only: each layer its own layer or lower ones", async () => {
    // entry -> run kinds -> attempt machinery -> core, and imports within a layer (transport -> sandbox, plan -> util).
    const dir = await miniProject(parent, "clean", {
      "src/cli/main.ts": 'import { study } from "../study/run.ts";\nexport const main = () => study();\n',
      "src/study/run.ts": 'import { attempt } from "../transport/cli/run.ts";\nexport const study = () => attempt();\n',
      "src/transport/cli/run.ts":
        'import { engine } from "../../sandbox/docker.ts";\nimport { UsageError } from "../../util/errors.ts";\nexport const attempt = () => [engine(), new UsageError("y")];\n',
    });
    const { code, output } = await layeringCheck(dir);
    expect(output).toContain("no dependency violations found");
    expect(code).toBe(0);
  });

  it("fails when a module imports one of a higher layer, or lies in a src/ folder the layer table does not name", async () => {
    const output = await violations(parent, "misplaced", {
      // util (core) -> study (run kinds), corpus (core) -> adjudicate (run kinds): upward, though no cycle.
      "src/study/run.ts": "export const study = () => 1;\n",
      "src/util/x.ts": 'import { study } from "../study/run.ts";\nexport const x = study();\n',
      "src/adjudicate/plan.ts": "export const verdicts = () => 1;\n",
      "src/corpus/options.ts": 'import { verdicts } from "../adjudicate/plan.ts";\nexport const options = verdicts();\n',
      // Folders the table does not name: one that imports, one that is imported, one that stands alone, and a file outside any folder.
      "src/newthing/helper.ts": 'import { UsageError } from "../util/errors.ts";\nexport const helper = () => new UsageError("z");\n',
      "src/shapes/shape.ts": "export type Shape = { a: number };\n",
      "src/plan/plan.ts": 'import { UsageError } from "../util/errors.ts";\nimport type { Shape } from "../shapes/shape.ts";\nexport const plan = (s?: Shape) => new UsageError(String(s));\n',
      "src/alone/alone.ts": "export const alone = 1;\n",
      "src/index.ts": "export const top = 1;\n",
    });
    expect(output).toContain("error no-import-from-a-higher-layer: src/util/x.ts → src/study/run.ts");
    expect(output).toContain("error no-import-from-a-higher-layer: src/corpus/options.ts → src/adjudicate/plan.ts");
    expect(output).not.toContain("no-cycle-between-folders");
    expect(output).toContain("error every-src-folder-in-a-layer: src/newthing/helper.ts → src/util/errors.ts");
    expect(output).toContain("error every-src-folder-in-a-layer: src/plan/plan.ts → src/shapes/shape.ts");
    expect(output).toMatch(/error every-src-folder-in-a-layer: src\/alone\/alone\.ts\n/);
    expect(output).toMatch(/error every-src-folder-in-a-layer: src\/index\.ts\n/);
    // The placed modules' own imports are not flagged.
    expect(output).not.toMatch(/every-src-folder-in-a-layer: src\/(util|sandbox)\//);
  });

  it("fails when a lower folder imports one above it, closing a cycle between folders", async () => {
    // plan/ imports util/; util/ importing plan/ closes the loop.
    const output = await violations(parent, "cycle", {
      "src/util/errors.ts": 'import { plan } from "../plan/plan.ts";\nexport class UsageError extends Error {}\nexport const again = () => plan();\n',
    });
    expect(output).toMatch(/error no-cycle-between-folders: src\/util →\s+src\/plan →\s+src\/util/);
  });

  it("fails when a product module imports a stand-in; the demo may", async () => {
    const output = await violations(parent, "stand-in", {
      "src/stand-ins/scripted-api/server.ts": 'import { UsageError } from "../../util/errors.ts";\nexport const api = () => new UsageError("scripted");\n',
      "src/gateway/gateway.ts": 'import { api } from "../stand-ins/scripted-api/server.ts";\nexport const gateway = () => api();\n',
      "src/demo/setup.ts": 'import { api } from "../stand-ins/scripted-api/server.ts";\nexport const demo = () => api();\n',
    });
    expect(output).toContain("error stand-ins-only-for-the-demo: src/gateway/gateway.ts → src/stand-ins/scripted-api/server.ts");
    expect(output).not.toContain("src/demo/setup.ts →");
  });

  it("fails when src imports from outside src, or a module other than the Docker adapter imports dockerode", async () => {
    const output = await violations(parent, "outside", {
      "tests/helper.ts": "export const helper = 1;\n",
      "src/plan/plan.ts": 'import { UsageError } from "../util/errors.ts";\nexport { helper } from "../../tests/helper.ts";\nexport const plan = () => new UsageError("x");\n',
      "src/sandbox/bounded.ts": 'import type Docker from "dockerode";\nexport type Engine = Docker;\n',
    });
    expect(output).toContain("error src-imports-only-src: src/plan/plan.ts → tests/helper.ts");
    expect(output).toMatch(/error only-the-docker-adapter-imports-dockerode: src\/sandbox\/bounded\.ts → \S*node_modules\/dockerode\//);
    expect(output).not.toContain("src/sandbox/docker.ts →");
  });
});
