/**
 * The adjudicator through the model gateway, the default of `adjudicate`, on the real engine with
 * the fake claude image (which sends no model request): even in the standard profile every
 * adjudicator container has network none and only `lo`, holds a placeholder login instead of a
 * copy of the host login, and the host token is in no container's environment.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { prepareDemo, writeTestLogin, type DemoSetup } from "../../src/demo/setup.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { readRecord } from "../../src/adjudicate/store.ts";
import { PLACEHOLDER_EXPIRES_AT } from "../../src/gateway/credential.ts";
import { runCli } from "../support/cli.ts";
import { makeFakeDir, type FakeDir } from "../support/fake-claude.ts";

const MODEL = "claude-haiku-5-5";
const TOKEN = "test-host-login-token-for-the-adjudicator-gateway";
let work = "";
let demo: DemoSetup;
const fakes: FakeDir[] = [];
const runtime = new DockerRuntime();

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-adjudicate-gateway-"));
  demo = await prepareDemo(join(work, "demo"), runtime);
  // By id: other checkouts on this engine retag the same name.
  demo.image = demo.imageId;
  await writeTestLogin(demo.loginDir, TOKEN);
}, 300_000);
afterAll(async () => {
  for (const f of fakes) await f.cleanup();
  await rm(work, { recursive: true, force: true });
});

async function fake(file: object): Promise<FakeDir> {
  const f = await makeFakeDir(file as never);
  fakes.push(f);
  return f;
}

const common = () => [...Object.entries(demo.roots).flatMap(([name, dir]) => ["--root", `${name}=${dir}`]), "--image", demo.image, "--claude-config-dir", demo.loginDir, "--quiet"];

/** Inspects every adjudicator container of item 1 seen running until `done` settles. */
async function watchContainers(done: Promise<unknown>): Promise<Map<string, Docker.ContainerInspectInfo>> {
  const seen = new Map<string, Docker.ContainerInspectInfo>();
  let finished = false;
  void done.finally(() => (finished = true));
  while (!finished) {
    for (const c of await runtime.listByLabel({ [LABELS.attempt]: "adjudicate-0" })) {
      if (c.running && !seen.has(c.id)) seen.set(c.id, await new Docker().getContainer(c.id).inspect());
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return seen;
}

describe("adjudicate with --credentials gateway (the default)", () => {
  // contract: R281
  it("runs every adjudicator with network none and only loopback, a placeholder login and no copy of the host token", async () => {
    const study = await fake({ default: { kind: "ok" } });
    const ledger = join(work, "pilot.ledger.json");
    const ran = await runCli(
      [
        "--pilot",
        "--approve-budget",
        "--transport",
        "cli",
        "--isolation",
        "offline",
        "--output",
        ledger,
        "--fake-behaviour",
        join(study.dir, "behaviour.json"),
        "--fake-records",
        join(study.dir, "records"),
        ...common(),
      ],
      { env: { STUDY_MODEL: MODEL, STUDY_BUDGET_USD: "5" }, timeoutMs: 600_000 },
    );
    expect(ran.code, ran.stderr).toBe(0);

    const f = await fake({ default: { kind: "ok", delayMs: 1500 } });
    const out = join(work, "pilot.adjudication.json");
    // No --isolation: the standard profile, which would put a login-copy container on the bridge.
    const adjudicated = runCli(
      [
        "adjudicate",
        "--ledger",
        ledger,
        "--output",
        out,
        "--approve-budget",
        "--seed",
        "5",
        "--force-same-model",
        "--fake-behaviour",
        join(f.dir, "behaviour.json"),
        "--fake-records",
        join(f.dir, "records"),
        ...common(),
      ],
      { env: { STUDY_ADJUDICATOR_MODEL: MODEL, STUDY_ADJUDICATION_BUDGET_USD: "5" }, timeoutMs: 600_000 },
    );
    const containers = await watchContainers(adjudicated);
    const r = await adjudicated;
    expect(r.code, r.stderr).toBe(0);

    const record = await readRecord(out);
    expect(record.status).toBe("complete");
    expect(record.adjudicator).toMatchObject({ credentials: "gateway", isolation: "standard" });
    for (const item of record.items) {
      // The verdict call and, after it, the arm-guess call: both through the gateway.
      for (const run of [item.run, item.armGuess?.run]) {
        expect(run?.status).toBe("completed");
        // Metered on the host: the fake sends no request, and nothing was refused.
        expect(run?.gateway).toMatchObject({ refused: 0 });
      }
    }
    const mine = [...containers.values()].filter((c) => c.Config.Labels?.[LABELS.run] === record.adjudicationId);
    expect(mine).toHaveLength(1);
    for (const c of mine) {
      expect(c.HostConfig.NetworkMode).toBe("none");
      // No name to look up, so no network sandbox of the engine's at all (contract R281).
      expect((c.Config as { NetworkDisabled?: boolean }).NetworkDisabled).toBe(true);
      expect((c.Config.Env ?? []).join("\n")).not.toContain(TOKEN);
    }
    const records = await f.records();
    const runs = records.filter((x) => x.file.match(/^\d+-/));
    expect(runs).toHaveLength(2 * record.items.length);
    for (const { record: rec } of runs) {
      expect(rec.networkInterfaces).toEqual(["lo"]);
      expect(rec.localhostNamed).toBe(false);
      expect(rec.credentialsPresent).toBe(true);
      // The placeholder's expiry, not the host login's (2099): the container never saw a copy of it.
      expect((rec as unknown as { credentialsExpiresAt: number | null }).credentialsExpiresAt).toBe(PLACEHOLDER_EXPIRES_AT);
    }
    const written = await Promise.all(runs.map(({ file }) => readFile(join(f.dir, "records", file), "utf8")));
    expect(written.join("\n")).not.toContain(TOKEN);
  }, 600_000);
});
