/**
 * Secret canaries (issue 10): a canary ANTHROPIC_API_KEY in the host environment and a canary
 * token in the CLI login. After a pilot and its adjudication, neither string is in the ledger,
 * the adjudication record, stdout, stderr, any attempt container's inspected environment or
 * labels (read from the engine while the containers ran), the argv the fake recorded, or the
 * export (its file names and contents, read while the attempts ran).
 * tests/integration/pipeline-pilot.test.ts checks the answer canary and the records of a pilot.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { runCli } from "../support/cli.ts";
import { makeFakeDir, type FakeDir } from "../support/fake-claude.ts";
import { freshLogin, ledgerOf, leftovers, prepareRun, preparePipeline, recordsOf, startPipeline, MODEL, type Pipeline } from "../support/pipeline.ts";

let p: Pipeline;
let fake: FakeDir | undefined;
beforeAll(async () => {
  p = await preparePipeline("rel-canary");
}, 300_000);
afterAll(async () => {
  await fake?.cleanup();
  await p?.cleanup();
});

/** Every file below `dir` with its content (bytes as latin1, so any byte sequence is kept). */
async function readTree(dir: string): Promise<Array<{ path: string; text: string }>> {
  const out: Array<{ path: string; text: string }> = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const full = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await readTree(full)));
    else out.push({ path: full, text: (await readFile(full)).toString("latin1") });
  }
  return out;
}

describe("secret canaries", () => {
  it("neither the API key nor the login token reaches the ledger, the adjudication record, stdout, stderr, the containers, the recorded argv or the export", async () => {
    const tag = randomBytes(8).toString("hex");
    const apiKey = `canary-api-key-${tag}`;
    const token = `canary-login-token-${tag}`;
    const secrets = [apiKey, token, tag];
    const loginDir = await freshLogin(p, token);
    // The login really holds the token: its absence below is not for want of one.
    expect(await readFile(join(loginDir, ".credentials.json"), "utf8")).toContain(token);

    const run = await prepareRun(p, { loginDir, behaviour: { default: { kind: "ok", delayMs: 3000 } }, env: { ANTHROPIC_API_KEY: apiKey } });
    const started = startPipeline(run);
    let ended = false;
    void started.done.then(() => (ended = true));

    // While the attempts run: the engine's view of each attempt container, and the export it was given.
    const inspected = new Map<string, { attempt: string; env: string[]; labels: Record<string, string> }>();
    const exported: Array<{ path: string; text: string }> = [];
    const seenExports = new Set<string>();
    while (!ended) {
      for (const c of await p.runtime.listByLabel({ [LABELS.pid]: String(started.pid) })) {
        const attempt = c.labels[LABELS.attempt]!;
        if (!c.running || attempt === "probe" || inspected.has(c.id)) continue;
        const state = await p.runtime.inspect(c.id);
        if (state) inspected.set(c.id, { attempt, env: state.env, labels: state.labels });
        for (const name of await leftovers(run.tmp, started.pid)) {
          if (!name.startsWith("study-runner-export-") || seenExports.has(name)) continue;
          seenExports.add(name);
          exported.push(...(await readTree(join(run.tmp, name)).catch(() => [])));
        }
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    const r = await started.done;
    expect(r.code, r.stderr).toBe(0);

    // The observations were real: both attempt containers inspected, both exports read.
    expect([...inspected.values()].map((i) => i.attempt).sort()).toEqual(["0", "1"]);
    for (const i of inspected.values()) expect(i.env).toContain(`STUDY_RUNNER_ATTEMPT=${i.attempt}`);
    expect(seenExports.size).toBe(2);
    expect(exported.map((f) => f.path).some((f) => f.endsWith("/README.md"))).toBe(true);
    const records = await recordsOf(run);
    expect(records.map((x) => x.record.attempt).filter((a) => a !== "probe")).toEqual(["0", "1"]);
    for (const { record } of records) expect(record.anthropicApiKeyPresent).toBe(false);

    // Adjudication of that ledger, with the same canaries in its environment and login.
    fake = await makeFakeDir({ default: { kind: "ok" } });
    const recordPath = join(p.work, "canary-adjudication.json");
    const adj = await runCli(
      [
        "adjudicate",
        "--ledger",
        run.output,
        "--output",
        recordPath,
        "--approve-budget",
        "--seed",
        "7",
        "--force-same-model",
        "--isolation",
        "offline",
        "--claude-config-dir",
        loginDir,
        "--quiet",
        "--fake-behaviour",
        join(fake.dir, "behaviour.json"),
        "--fake-records",
        join(fake.dir, "records"),
      ],
      { env: { STUDY_ADJUDICATOR_MODEL: MODEL, STUDY_ADJUDICATION_BUDGET_USD: "1", ANTHROPIC_API_KEY: apiKey }, timeoutMs: 300_000 },
    );
    expect(adj.code, adj.stderr).toBe(0);
    const adjRecords = await fake.records();
    expect(adjRecords.length).toBeGreaterThanOrEqual(2);

    const places: Array<[string, string]> = [
      ["ledger", await readFile(run.output, "utf8")],
      ["adjudication record", await readFile(recordPath, "utf8")],
      ["run stdout", r.stdout],
      ["run stderr", r.stderr],
      ["adjudicate stdout", adj.stdout],
      ["adjudicate stderr", adj.stderr],
      ...[...inspected].map(([id, i]): [string, string] => [`container ${id.slice(0, 12)} env and labels`, JSON.stringify({ env: i.env, labels: i.labels })]),
      ...records.map((x): [string, string] => [`argv recorded by the fake (${x.file})`, JSON.stringify(x.record.argv)]),
      ...records.map((x): [string, string] => [`record ${x.file}`, x.text]),
      ...adjRecords.map((x, i): [string, string] => [`adjudicator record ${i}`, JSON.stringify(x)]),
      ...exported.map((f): [string, string] => [`export file ${f.path}`, `${f.path}\n${f.text}`]),
    ];
    for (const [where, text] of places) {
      for (const secret of secrets) expect(text.includes(secret), `${where} holds a canary`).toBe(false);
    }
    expect((await ledgerOf(run)).status).toBe("awaiting-adjudication");
    expect(await leftovers(run.tmp)).toEqual([]);
  }, 600_000);
});
