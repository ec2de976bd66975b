import { mkdir, mkdtemp, readdir, readFile, realpath, rename, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { checkOutputPath, createLedger, InvalidLedgerError, readLedger, writeLedger } from "../../src/ledger/store.ts";
import { computeRunnerHash } from "../../src/ledger/runner-hash.ts";
import { UsageError } from "../../src/util/errors.ts";
import { completedObservation, reservedObservation, sampleLedger } from "../support/ledger-sample.ts";

let base: string;
let checkout: string;
let project: string;
let outside: string;

beforeEach(async () => {
  base = await realpath(await mkdtemp(join(tmpdir(), "ledger-store-")));
  checkout = join(base, "checkouts", "docs");
  project = join(base, "project");
  outside = join(base, "private");
  await mkdir(checkout, { recursive: true });
  await mkdir(project);
  await mkdir(outside);
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

const context = () => ({ checkouts: new Map([["docs", checkout]]), projectRoot: project });

describe("checkOutputPath", () => {
  it("accepts a new file in an existing folder outside every checkout and the project", async () => {
    expect(await checkOutputPath(join(outside, "ledger.json"), context())).toEqual([]);
  });

  it("refuses a path inside a checkout, naming the checkout, its root name and the fix", async () => {
    const path = join(checkout, "sub", "..", "ledger.json");
    expect(await checkOutputPath(path, context())).toEqual([`--output ${path} is inside the checkout ${checkout} (root 'docs'); choose a path outside every checkout and outside the project`]);
    // Plain paths work too (no root name then).
    expect((await checkOutputPath(join(checkout, "l.json"), { checkouts: [checkout], projectRoot: project })).join()).toMatch(/is inside the checkout .*docs; choose a path outside/);
  });

  it("refuses a path inside the project", async () => {
    const problems = await checkOutputPath(join(project, "out", "..", "ledger.json"), context());
    expect(problems.join()).toMatch(/is inside the project .*project; choose a path outside every checkout and outside the project/);
  });

  it("refuses a folder that is a symlink into a checkout, and says where it resolves to", async () => {
    const link = join(outside, "innocent");
    await symlink(checkout, link);
    const problems = await checkOutputPath(join(link, "ledger.json"), context());
    expect(problems).toHaveLength(1);
    expect(problems[0]).toContain(`(it resolves to ${join(checkout, "ledger.json")})`);
    expect(problems[0]).toContain("(root 'docs')");
  });

  it("refuses a checkout that is itself reached through a symlink", async () => {
    const linkedCheckout = join(base, "linked-docs");
    await symlink(checkout, linkedCheckout);
    const problems = await checkOutputPath(join(checkout, "ledger.json"), { checkouts: new Map([["docs", linkedCheckout]]), projectRoot: project });
    expect(problems.join()).toMatch(/is inside the checkout/);
  });

  it("refuses an existing file, a dangling symlink and a missing folder", async () => {
    const existing = join(outside, "old.json");
    await writeFile(existing, "{}");
    expect((await checkOutputPath(existing, context())).join()).toMatch(/already exists; a ledger is never overwritten or reused: choose a new file name/);
    const dangling = join(outside, "dangling.json");
    await symlink(join(outside, "nowhere"), dangling);
    expect((await checkOutputPath(dangling, context())).join()).toMatch(/already exists/);
    const missing = join(outside, "no-such-folder", "ledger.json");
    expect((await checkOutputPath(missing, context())).join()).toMatch(/its folder .*no-such-folder does not exist or is not a folder \(ENOENT\); create it first \(mkdir -p /);
  });

  it("does not mistake a sibling folder sharing a name prefix for the checkout", async () => {
    const sibling = `${checkout}-private`;
    await mkdir(sibling);
    expect(await checkOutputPath(join(sibling, "ledger.json"), context())).toEqual([]);
  });
});

describe("createLedger", () => {
  it("creates the file with mode 0600 even under umask 0, and it reads back equal", async () => {
    const previous = process.umask(0);
    try {
      const path = join(outside, "ledger.json");
      const handle = await createLedger(path, sampleLedger(), context());
      expect(handle.path).toBe(path);
      expect((await stat(path)).mode & 0o777).toBe(0o600);
      expect(await readLedger(path)).toEqual(sampleLedger());
    } finally {
      process.umask(previous);
    }
  });

  it("refuses a second create of the same path and leaves the first ledger intact", async () => {
    const path = join(outside, "ledger.json");
    await createLedger(path, sampleLedger({ runId: "first" }), context());
    const before = await readFile(path, "utf8");
    await expect(createLedger(path, sampleLedger({ runId: "second" }), context())).rejects.toThrow(/already exists/);
    expect(await readFile(path, "utf8")).toBe(before);
  });

  it("lets exactly one of several concurrent creates win", async () => {
    const path = join(outside, "ledger.json");
    const runs = ["a", "b", "c", "d"];
    const results = await Promise.allSettled(runs.map((runId) => createLedger(path, sampleLedger({ runId }), context())));
    const winners = results.flatMap((r, i) => (r.status === "fulfilled" ? [runs[i]] : []));
    expect(winners).toHaveLength(1);
    for (const r of results) if (r.status === "rejected") expect(String(r.reason)).toMatch(/already exists/);
    expect((await readLedger(path)).runId).toBe(winners[0]);
  });

  it("refuses paths inside a checkout, the project or via a symlinked folder, creating nothing", async () => {
    const link = join(outside, "via");
    await symlink(checkout, link);
    for (const path of [join(checkout, "l.json"), join(project, "l.json"), join(link, "l.json")]) {
      const err = await createLedger(path, sampleLedger(), context()).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UsageError);
      expect(String(err)).toMatch(/choose a path outside every checkout and outside the project/);
    }
    expect(await readdir(checkout)).toEqual([]);
    expect(await readdir(project)).toEqual([]);
  });

  it("refuses an invalid initial ledger before creating the file", async () => {
    const path = join(outside, "ledger.json");
    const bad = sampleLedger({ cliVersion: "2.1.297" });
    await expect(createLedger(path, bad, context())).rejects.toBeInstanceOf(InvalidLedgerError);
    expect(await readdir(outside)).toEqual([]);
  });
});

describe("writeLedger and readLedger", () => {
  it("replaces the content atomically: concurrent readers only ever see a whole ledger", async () => {
    const path = join(outside, "ledger.json");
    const handle = await createLedger(path, sampleLedger(), context());
    let writing = true;
    let reads = 0;
    const reader = (async () => {
      while (writing) {
        const ledger = await readLedger(path); // throws on a torn or empty file
        expect(ledger.runId).toBe("run-1");
        reads++;
      }
    })();
    for (let i = 1; i <= 25; i++) {
      // Large answers make a non-atomic rewrite (truncate, then write) observable.
      const observation = completedObservation(0, 0.002, { answer: "x".repeat(50_000 * i) });
      await writeLedger(handle, sampleLedger({ observations: [observation], budget: { ...sampleLedger().budget, spentUsd: 0.002 } }));
    }
    writing = false;
    await reader;
    expect(reads).toBeGreaterThan(0);
    expect((await readLedger(path)).observations[0]!.answer).toHaveLength(50_000 * 25);
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    expect(await readdir(outside)).toEqual(["ledger.json"]); // no temp file left behind
  });

  it("refuses to write a ledger that does not match the schema, leaving the file as it was", async () => {
    const path = join(outside, "ledger.json");
    const handle = await createLedger(path, sampleLedger(), context());
    const before = await readFile(path);
    const underCounted = sampleLedger({ observations: [reservedObservation(0)] }); // budget omits the open reservation
    const err = await writeLedger(handle, underCounted).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidLedgerError);
    expect(String(err)).toContain(`refusing to write the ledger ${path}`);
    expect(String(err)).toMatch(/budget\.spentUsd/);
    expect(await readFile(path)).toEqual(before);
    expect(await readdir(outside)).toEqual(["ledger.json"]);
  });

  it("refuses to write another run's ledger over this one", async () => {
    const handle = await createLedger(join(outside, "ledger.json"), sampleLedger(), context());
    await expect(writeLedger(handle, sampleLedger({ runId: "other-run" }))).rejects.toThrow(/runId 'other-run' is not the run 'run-1'/);
  });

  it("reports a damaged ledger without quoting its private content", async () => {
    const path = join(outside, "damaged.json");
    await writeFile(path, '{"answer": "THE-PRIVATE-ANSWER" ');
    const err = String(await readLedger(path).catch((e: unknown) => e));
    expect(err).toContain(`ledger ${path} is not valid JSON`);
    expect(err).not.toContain("THE-PRIVATE-ANSWER");
    await expect(readLedger(join(outside, "missing.json"))).rejects.toThrow(/cannot read ledger .*missing\.json: ENOENT/);
    await writeFile(path, JSON.stringify({ ...sampleLedger(), schemaVersion: 2 }));
    await expect(readLedger(path)).rejects.toThrow(/does not match the ledger schema:\n {2}schemaVersion/);
  });
});

describe("computeRunnerHash", () => {
  async function makeProject(): Promise<string> {
    const root = join(base, "runner");
    await mkdir(join(root, "src", "a"), { recursive: true });
    await mkdir(join(root, "docker"), { recursive: true });
    await mkdir(join(root, "tests"), { recursive: true });
    await writeFile(join(root, "src", "main.ts"), "export const a = 1;\n");
    await writeFile(join(root, "src", "a", "b.ts"), "export const b = 2;\n");
    await writeFile(join(root, "src", "notes.md"), "notes\n");
    await writeFile(join(root, "docker", "Dockerfile"), "FROM scratch\n");
    await writeFile(join(root, "tests", "x.test.ts"), "test\n");
    await writeFile(join(root, "package.json"), "{}\n");
    await writeFile(join(root, "package-lock.json"), "{}\n");
    return root;
  }

  it("changes with sources, image inputs and dependency pins, and only with those", async () => {
    const root = await makeProject();
    const original = await computeRunnerHash(root);
    expect(original).toMatch(/^[0-9a-f]{64}$/);
    expect(await computeRunnerHash(root)).toBe(original);

    await writeFile(join(root, "tests", "x.test.ts"), "changed\n");
    await writeFile(join(root, "src", "notes.md"), "changed\n");
    expect(await computeRunnerHash(root)).toBe(original);

    for (const [file, content] of [
      ["src/a/b.ts", "export const b = 3;\n"],
      ["docker/Dockerfile", "FROM scratch\nUSER 1000\n"],
      ["package-lock.json", '{"lockfileVersion":3}\n'],
      ["package.json", '{"name":"x"}\n'],
    ] as const) {
      const path = join(root, file);
      const saved = await readFile(path);
      await writeFile(path, content);
      expect(await computeRunnerHash(root), file).not.toBe(original);
      await writeFile(path, saved);
    }
    expect(await computeRunnerHash(root)).toBe(original);
  });

  it("changes when a file is renamed with the same content", async () => {
    const root = await makeProject();
    const original = await computeRunnerHash(root);
    await rm(join(root, "src", "main.ts"));
    await writeFile(join(root, "src", "index.ts"), "export const a = 1;\n");
    expect(await computeRunnerHash(root)).not.toBe(original);
  });

  it("throws when package.json is missing", async () => {
    const root = await makeProject();
    await rm(join(root, "package.json"));
    await expect(computeRunnerHash(root)).rejects.toThrow(/ENOENT/);
  });

  // contract: R163
  it("is the same when the lock file ships as npm-shrinkwrap.json (the installed package), and throws without either", async () => {
    const root = await makeProject();
    const original = await computeRunnerHash(root);
    await rename(join(root, "package-lock.json"), join(root, "npm-shrinkwrap.json"));
    expect(await computeRunnerHash(root)).toBe(original);
    await writeFile(join(root, "npm-shrinkwrap.json"), '{"lockfileVersion":3}\n');
    expect(await computeRunnerHash(root)).not.toBe(original);
    await rm(join(root, "npm-shrinkwrap.json"));
    await expect(computeRunnerHash(root)).rejects.toThrow(/ENOENT.*package-lock\.json/);
  });
});
