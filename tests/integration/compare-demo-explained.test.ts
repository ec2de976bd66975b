import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cp, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PROJECT_ROOT } from "../../src/util/paths.ts";
import { demoAsMade, type DemoFiles } from "../support/shared-demo.ts";

/**
 * `npm run compare-demo` against a base tree from before a field existed: a field the base's code
 * never declares, the report cell that names the calibration profile, and a money amount that
 * differs only in floating-point noise are explained, each derived from the base tree and the
 * files; the same differences against a base that declares the field, or a real change of an
 * amount, are counted. The sides are the suite's demo, copied and edited as an older tree would
 * have written it, so nothing here runs a demo.
 */

let work: string;
let demo: DemoFiles;
let workdir: string;

/** The side's files copied into `dir` (the record keeps quoting the demo's ledger path on both sides); `extra` goes into its side.json. */
async function side(name: string, tree: string, edit: (files: Record<string, string>) => void, extra: Record<string, unknown> = {}): Promise<void> {
  const dir = join(work, name);
  await mkdir(join(dir, "inspect"), { recursive: true });
  const files: Record<string, string> = {
    ledger: await readFile(demo.ledger, "utf8"),
    adjudication: await readFile(demo.adjudication, "utf8"),
    markdown: await readFile(demo.report.markdown, "utf8"),
    json: await readFile(demo.report.json, "utf8"),
    html: await readFile(demo.report.html, "utf8"),
  };
  // A side made in another checkout names that checkout's files (the manifest), as the demo there would.
  for (const key of Object.keys(files)) files[key] = files[key]!.split(PROJECT_ROOT).join(tree);
  edit(files);
  const paths = {
    ledger: join(dir, basename(demo.ledger)),
    adjudication: join(dir, basename(demo.adjudication)),
    report: { markdown: join(dir, "report.md"), json: join(dir, "report.json"), html: join(dir, "report.html") },
  };
  for (const [key, path] of [
    ["ledger", paths.ledger],
    ["adjudication", paths.adjudication],
    ["markdown", paths.report.markdown],
    ["json", paths.report.json],
    ["html", paths.report.html],
  ] as const) {
    await writeFile(path, files[key]!);
  }
  await writeFile(join(work, `${name}.json`), JSON.stringify({ name, tree, work: workdir, dockerHost: "unix:///var/run/docker.sock", seconds: 0, ...paths, inspect: join(dir, "inspect"), ...extra }));
}

const compareDemo = () => spawnSync(process.execPath, [join(PROJECT_ROOT, "scripts", "compare-demo.mjs"), "--reuse", work], { cwd: PROJECT_ROOT, encoding: "utf8" });

/** A tree whose ledger code declares `fields` and nothing else (a stand-in for an older checkout). */
async function olderTree(fields: string[]): Promise<string> {
  const tree = await mkdtemp(join(work, "tree-"));
  for (const folder of ["src/ledger", "src/report", "src/adjudicate"]) await mkdir(join(tree, folder), { recursive: true });
  await writeFile(join(tree, "src/ledger/schema.ts"), `export const Header = { runId: "", ${fields.map((f) => `${f}: ""`).join(", ")} };\n`);
  await writeFile(join(tree, "src/report/build.ts"), "export const run = { runId: '' };\n");
  return tree;
}

const COST_ROW = "| cost per correct answer USD |";
const BASE_USD = 0.0016334999999999998;
const CURRENT_USD = 0.0016335000000000002;

/** The repository arm's cost per correct answer set to `usd` in report.json and its Markdown row (printed to the row's digits). */
function setCost(files: Record<string, string>, usd: number): void {
  const report = JSON.parse(files.json!) as { behaviour: { arms: { repository: { costPerCorrectUsd: number } } } };
  report.behaviour.arms.repository.costPerCorrectUsd = usd;
  files.json = JSON.stringify(report, null, 2);
  files.markdown = files
    .markdown!.split("\n")
    .map((line) => {
      if (!line.startsWith(COST_ROW)) return line;
      const cells = line.split("|");
      const digits = cells[2]!.trim().split(".")[1]!.length;
      cells[2] = ` ${usd.toFixed(digits)} `;
      return cells.join("|");
    })
    .join("\n");
}

/** The base side as a tree without calibration profiles wrote it: no profileSha256, no profile in the CLI cell. */
function withoutProfile(files: Record<string, string>): void {
  const ledger = JSON.parse(files.ledger!) as { profileSha256?: string };
  const cell = ` (profile sha256 ${ledger.profileSha256!.slice(0, 12)})`;
  delete ledger.profileSha256;
  files.ledger = JSON.stringify(ledger, null, 2);
  const report = JSON.parse(files.json!) as { run: { profileSha256?: string } };
  delete report.run.profileSha256;
  files.json = JSON.stringify(report, null, 2);
  files.markdown = files.markdown!.split(cell).join("");
  files.html = files.html!.split(cell).join("");
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-compare-explained-"));
  ({ demo, workdir } = await demoAsMade());
}, 900_000);
afterAll(() => rm(work, { recursive: true, force: true }));

describe("compare-demo against a tree from before a field existed", () => {
  it("explains an added header field, the profile's report cell and floating-point noise in money, and counts them against a tree that declares them", async () => {
    const ledger = JSON.parse(await readFile(demo.ledger, "utf8")) as { profileSha256?: string };
    expect(ledger.profileSha256).toMatch(/^[0-9a-f]{64}$/);
    await side("current", PROJECT_ROOT, (f) => setCost(f, CURRENT_USD));
    await side("base", await olderTree([]), (f) => {
      withoutProfile(f);
      setCost(f, BASE_USD);
    });
    const explained = compareDemo();
    expect(explained.status, explained.stdout + explained.stderr).toBe(0);
    expect(explained.stdout).toContain("(explained) $.profileSha256: added since the base (the base's src/ledger declares no `profileSha256`)");
    expect(explained.stdout).toContain("(explained) $.run.profileSha256: added since the base");
    expect(explained.stdout).toMatch(/\(explained\) line \d+: the current side names its calibration profile/);
    expect(explained.stdout).toMatch(/\(explained\) \$\.behaviour\.arms\.repository\.costPerCorrectUsd: base 0\.0016334999999999998, current 0\.0016335000000000002: the same amount/);
    expect(explained.stdout).toMatch(/\(explained\) line \d+: a money amount on a rounding boundary/);

    // The base's code declares the field: its absence is a difference, and so is the profile's cell.
    await side("base", await olderTree(["profileSha256"]), (f) => {
      withoutProfile(f);
      setCost(f, BASE_USD);
    });
    const declared = compareDemo();
    expect(declared.status).toBe(1);
    expect(declared.stdout).toMatch(/ledger: 1 difference\(s\)\n {2}\$\.profileSha256: only in current/);
    expect(declared.stdout).toMatch(/report\.md: 1 difference\(s\)\n {2}line \d+:\n {4}base: .*\| 2\.1\.\d+ \|/);

    // A real change of an amount is never noise, and neither is its printed figure.
    await side("base", await olderTree([]), (f) => {
      withoutProfile(f);
      setCost(f, CURRENT_USD * 1.01);
    });
    const changed = compareDemo();
    expect(changed.status).toBe(1);
    expect(changed.stdout).toMatch(/report\.json: 1 difference\(s\)\n {2}\$\.behaviour\.arms\.repository\.costPerCorrectUsd: base 0\.00164/);
    expect(changed.stdout).toMatch(/report\.md: 1 difference\(s\)\n {2}line \d+:\n {4}base: {4}\| cost per correct answer USD \| 0\.00165/);
  }, 120_000);
});

/** The demo's reports as the current tree writes them for the same records, edited by `edit`: a side.json's `reportedByCurrent`. */
async function reportedByCurrent(edit: (files: Record<string, string>) => void): Promise<Record<string, unknown>> {
  const dir = await mkdtemp(join(work, "reported-by-current-"));
  await mkdir(join(dir, "inspect"));
  const files: Record<string, string> = { markdown: await readFile(demo.report.markdown, "utf8"), json: await readFile(demo.report.json, "utf8"), html: await readFile(demo.report.html, "utf8") };
  edit(files);
  const report = { markdown: join(dir, "report.md"), json: join(dir, "report.json"), html: join(dir, "report.html") };
  for (const key of ["markdown", "json", "html"] as const) await writeFile(report[key], files[key]!);
  return { reportedByCurrent: { report, inspect: join(dir, "inspect") } };
}

/** The aggregation method as a report of older code states it: the unit of analysis said twice, in report.md and report.json. */
function olderAggregation(files: Record<string, string>): void {
  const said = "Aggregation: each arm's value";
  expect(files.markdown).toContain(said);
  files.markdown = files.markdown!.split(said).join("Aggregation: unit of analysis: the task. Each arm's value");
  const report = JSON.parse(files.json!) as { analysis: { methods: { aggregation: string } } };
  report.analysis.methods.aggregation = `unit of analysis: the task. ${report.analysis.methods.aggregation}`;
  files.json = JSON.stringify(report, null, 2);
}

/** The current tree's report of a ledger without a calibration profile: `run.profileSha256` null, no profile in the CLI cell. */
function profileReportedNull(files: Record<string, string>): void {
  const profile = (JSON.parse(files.json!) as { run: { profileSha256: string } }).run.profileSha256;
  const cell = ` (profile sha256 ${profile.slice(0, 12)})`;
  files.markdown = files.markdown!.split(cell).join("");
  files.html = files.html!.split(cell).join("");
  const report = JSON.parse(files.json!) as { run: { profileSha256: string | null } };
  report.run.profileSha256 = null;
  files.json = JSON.stringify(report, null, 2);
}

/** One more correct answer in the repository arm's row of "Correctness per arm": what other records would make the report say. */
function oneMoreCorrect(files: Record<string, string>): void {
  const row = /^\| repository-only \| (\d+) \|/m;
  expect(files.markdown).toMatch(row);
  files.markdown = files.markdown!.replace(row, (_, n: string) => `| repository-only | ${Number(n) + 1} |`);
}

describe("compare-demo when the report code changed since the base", () => {
  // contract: R278
  it("counts no line the current tree's report of the base's own records accounts for, and every line those records make differ", async () => {
    await side("current", PROJECT_ROOT, () => {});
    // The base's records, its reports written by older report code.
    await side("base", await olderTree([]), olderAggregation);
    const unexplained = compareDemo();
    expect(unexplained.status).toBe(1);
    expect(unexplained.stdout).toMatch(/report\.md: 1 difference\(s\)\n {2}line \d+:\n {4}base: {4}Unit of analysis: the task\. Aggregation: unit of analysis/);

    // The current tree's report of those records is the current side's, but for the profile the
    // base's ledger does not have: the difference is the report code's.
    await side(
      "base",
      await olderTree([]),
      (f) => {
        withoutProfile(f);
        olderAggregation(f);
      },
      await reportedByCurrent(profileReportedNull),
    );
    const explained = compareDemo();
    expect(explained.status, explained.stdout + explained.stderr).toBe(0);
    expect(explained.stdout).toContain(
      "report.md: same\n  (explained) 1 difference(s) from the base's report.md are the report code's: the current tree's `report` of the base's ledger and adjudication record writes the current side's file",
    );
    expect(explained.stdout).toContain("report.json: same\n  (explained) 1 difference(s) from the base's report.json are the report code's");
    expect(explained.stdout).toContain("(explained) $.run.profileSha256: the base's ledger holds no `profileSha256` (the base's src/ledger declares none), and the current side's is its ledger's");

    // What the records make differ still counts: the current tree's report of the base's records says one more correct answer.
    await side(
      "base",
      await olderTree([]),
      (f) => {
        olderAggregation(f);
        oneMoreCorrect(f);
      },
      await reportedByCurrent(oneMoreCorrect),
    );
    const counted = compareDemo();
    expect(counted.status).toBe(1);
    expect(counted.stdout).toMatch(/report\.md: 1 difference\(s\)\n {2}line \d+:\n {4}base: {4}\| repository-only \| \d+ \|/);
    expect(counted.stdout).toContain(
      "(explained) 2 difference(s) from the base's report.md are the report code's: the current tree's `report` of the base's ledger and adjudication record writes a file that differs from the current side's only as listed",
    );
  }, 120_000);
});

/** How the fake claude of trees from before contract R186 read the answer of an arm-guess prompt: everything after the first "<<<ANSWER". */
const LINE_READER = 'const answer = /^<<<ANSWER\\n(.*)\\nANSWER>>>$/m.exec(String(prompt))?.[1] ?? "";';
const OLD_READER = 'const answer = String(prompt).split("<<<ANSWER")[1] ?? "";';

/** A tree with this checkout's code and demo manifest, whose fake claude reads the arm-guess answer as `reader` does. */
async function fakeTree(reader: string): Promise<string> {
  const tree = await mkdtemp(join(work, "fake-tree-"));
  await cp(join(PROJECT_ROOT, "src"), join(tree, "src"), { recursive: true });
  await cp(join(PROJECT_ROOT, "package.json"), join(tree, "package.json"));
  await mkdir(join(tree, "study", "demo"), { recursive: true });
  await cp(join(PROJECT_ROOT, "study", "demo", "manifest.json"), join(tree, "study", "demo", "manifest.json"));
  await symlink(join(PROJECT_ROOT, "node_modules"), join(tree, "node_modules"), "dir");
  const fake = join(tree, "src", "stand-ins", "fake-claude", "claude.cjs");
  const text = await readFile(fake, "utf8");
  expect(text).toContain(LINE_READER);
  await writeFile(fake, text.replace(LINE_READER, reader));
  return tree;
}

/** Every arm guess of the record made the other choice, as a fake that always sees a masked word answers. */
function guessedDocs(files: Record<string, string>): void {
  const record = JSON.parse(files.adjudication!) as { items: { armGuess: { guess: string; arm: string; correct: boolean } | null }[] };
  for (const item of record.items) {
    if (!item.armGuess) continue;
    expect(item.armGuess.guess).toBe("files-only");
    item.armGuess.guess = "files-and-docs-server";
    item.armGuess.correct = !item.armGuess.correct;
  }
  files.adjudication = JSON.stringify(record, null, 2);
}

describe("compare-demo when the fake model's arm guess changed since the base", () => {
  // contract: R279
  it("explains a guess that each tree's own fake claude gives to its own prompt, and counts one its fake does not give", async () => {
    expect((await readdir(workdir)).filter((f) => f.startsWith("adjudicator-behaviour-"))).toHaveLength(1);
    await side("current", PROJECT_ROOT, () => {});
    await side("base", await fakeTree(OLD_READER), guessedDocs);
    const explained = compareDemo();
    expect(explained.status, explained.stdout + explained.stderr).toBe(0);
    expect(explained.stdout).toMatch(
      /adjudication record: same\n(?: {2}\(explained\) .*\n)*? {2}\(explained\) \d+ differences: an arm guess \(\$\.items\[…\]\.armGuess\.guess\): the fake model's guess changed/,
    );
    expect(explained.stdout).toMatch(/\(explained\) \d+ differences: an arm guess \(\$\.items\[…\]\.armGuess\.correct\)/);

    // The base's own fake answers "files-only" to its prompt: a recorded "files-and-docs-server" is not its answer.
    await side("base", await fakeTree(LINE_READER), guessedDocs);
    const counted = compareDemo();
    expect(counted.status).toBe(1);
    expect(counted.stdout).toContain('$.items[0].armGuess.guess: base "files-and-docs-server", current "files-only"');
    expect(counted.stdout).not.toContain("the fake model's guess changed");
  }, 180_000);
});

/** A tree whose doc-bridge index command runs a server file of `server`'s bytes; its revision as the engine derives it (src/mcp/reference-server.ts). */
async function engineTree(server: string): Promise<{ tree: string; revision: string }> {
  const tree = await mkdtemp(join(work, "engine-tree-"));
  await mkdir(join(tree, "src", "mcp"), { recursive: true });
  // The derivation runs in the tree through tsx, as it runs in a worktree of the base.
  await symlink(join(PROJECT_ROOT, "node_modules"), join(tree, "node_modules"), "dir");
  await writeFile(join(tree, "package.json"), JSON.stringify({ type: "module" }));
  await writeFile(join(tree, "src/mcp/reference-server.ts"), server);
  await writeFile(join(tree, "src/mcp/preflight.ts"), 'export const referenceIndexCommand = () => [process.execPath, new URL("./reference-server.ts", import.meta.url).pathname, "index"];\n');
  return { tree, revision: `reference-${createHash("sha256").update(server).digest("hex").slice(0, 12)}` };
}

/** A side's ledger recording `revision` as its doc-bridge engine's, and an Inspect log whose tool result quotes it in an attachment. */
async function withRevision(name: string, tree: string, revision: string, recorded: string): Promise<void> {
  await side(name, tree, (f) => {
    f.ledger = f.ledger!.split(recorded).join(revision);
  });
  const result = JSON.stringify({ pin: "e2ff563dc35b3da1d8b11ab55f4447489db3f3e5", engineRevision: revision, matches: [] });
  const key = createHash("md5").update(result).digest("hex");
  const log = { samples: [{ id: 1, messages: [{ role: "tool", content: result }], events: [{ event: "tool", result: `attachment://${key}` }], attachments: { [key]: result } }] };
  await writeFile(join(work, name, "inspect", "0001.json"), JSON.stringify(log));
}

describe("compare-demo and the doc-bridge engine's revision", () => {
  // contract: R287
  // The revision is a digest of the engine's server file: a base from before the engine changed records another one.
  it("explains each side's revision that its own tree derives, wherever a file quotes it (an Inspect attachment's name too), and counts one its tree does not derive", async () => {
    const recorded = (JSON.parse(await readFile(demo.ledger, "utf8")) as { docBridge: { engineRevision: string } }).docBridge.engineRevision;
    expect(recorded).toMatch(/^reference-[0-9a-f]{12}$/);
    const base = await engineTree("// the base's engine\n");
    const current = await engineTree("// the current engine\n");
    await withRevision("current", current.tree, current.revision, recorded);
    await withRevision("base", base.tree, base.revision, recorded);
    const explained = compareDemo();
    expect(explained.status, explained.stdout + explained.stderr).toBe(0);
    expect(explained.stdout).toContain(`(explained) the doc-bridge engine's revision, base ${base.revision}, current ${current.revision}: each side's is the one its own tree derives`);
    expect(explained.stdout).toMatch(/inspect log #1: same/);

    // A revision the base's tree does not derive is a difference, in the ledger and in every quote.
    await withRevision("base", base.tree, "reference-000000000000", recorded);
    const counted = compareDemo();
    expect(counted.status).toBe(1);
    expect(counted.stdout).not.toContain("(explained) the doc-bridge engine's revision");
    expect(counted.stdout).toContain(`$.docBridge.engineRevision: base "reference-000000000000", current "${current.revision}"`);
    expect(counted.stdout).toMatch(/inspect log #1: \d+ difference\(s\)/);
  }, 120_000);
});
