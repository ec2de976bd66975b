import { access, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { defaultDemoWorkdir } from "../../src/cli/demo.ts";
import { runCli } from "../support/cli.ts";

// Two demos on one workdir: the demo remakes its corpus, login and index there, so before the
// lock both failed with exit 3 (ENOTEMPTY removing the corpus, or git init failing).

const work = await mkdtemp(join(tmpdir(), "sr-demo-lock-"));
afterAll(() => rm(work, { recursive: true, force: true }));

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

describe("one demo per workdir", () => {
  // contract: R187
  it("refuses a second demo on a workdir in use, exit 2 naming the first one's pid, and the first one ends well", async () => {
    const workdir = join(work, "demo");
    let firstPid = 0;
    const first = runCli(["demo", "--pilot", "--quiet", "--workdir", workdir], { timeoutMs: 600_000, onSpawn: (pid) => (firstPid = pid) });
    // The second starts once the first is making its corpus there.
    const deadline = Date.now() + 60_000;
    while (!(await exists(join(workdir, "corpus"))) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(await exists(join(workdir, "corpus"))).toBe(true);
    const second = await runCli(["demo", "--pilot", "--quiet", "--workdir", workdir], { timeoutMs: 120_000 });
    expect(second.code, second.stderr).toBe(2);
    expect(second.stderr).toContain(`--workdir ${workdir}: another demo is running there`);
    expect(second.stderr).toContain(`pid ${firstPid} `);
    const done = await first;
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout).toContain('"demo"');
    // The lock is gone with its holder: nothing of it is left in the workdir.
    expect((await readdir(workdir)).filter((f) => f.startsWith("demo."))).toEqual([]);
  }, 700_000);

  // contract: R187
  it("puts the default workdir under the temp dir, one per user", () => {
    expect(defaultDemoWorkdir()).toBe(join(tmpdir(), `study-runner-demo-${process.getuid!()}`));
  });
});
