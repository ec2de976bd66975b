import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FakeProcess, FakeRuntime } from "../support/fake-runtime.ts";
import { runStudy } from "../../src/study/run.ts";
import { dockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import type { PreparedSandbox, Sandbox, SandboxSpec } from "../../src/sandbox/sandbox.ts";
import { fakeClaudeRuntime, UNIT_IMAGE, unitAdjudicationConfig, unitStudyConfig } from "../support/unit-study.ts";
import { IMAGE_LABELS } from "../../src/image/specs.ts";
import { loadManifest, type LoadedManifest } from "../../src/manifest/load.ts";
import { readLedger } from "../../src/ledger/store.ts";
import { ExitCode } from "../../src/util/errors.ts";
import type { Checkpoint } from "../../src/loop/loop.ts";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { baseEvents, toText } from "./transcript-fixtures.ts";

/**
 * The CLI attempt kind on the in-memory runtime: the real loop, ledger, export, login staging and
 * transcript rules, with containers that are functions. Only the repository arm is planned, so
 * no doc-bridge server is started.
 */

let work: string;
let loaded: LoadedManifest;
let roots: Map<string, string>;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-unit-kind-"));
  const corpus = await makeDemoCorpus(join(work, "corpus"));
  roots = new Map(Object.entries(corpus).map(([n, { dir }]) => [n, dir]));
  loaded = await loadManifest(DEMO_MANIFEST);
});
afterAll(() => rm(work, { recursive: true, force: true }));

/** A container program: `--version` answers the pin; an attempt runs `attempt(n, proc)`. */
const runtimeWith = (attempt: (n: number, proc: FakeProcess) => Promise<number> | number) => fakeClaudeRuntime(attempt);

const answer = (proc: FakeProcess) => {
  proc.stdout.write(toText(baseEvents("repository")));
  return 0;
};

async function run(name: string, runtime: FakeRuntime, o: { attempts?: number; capUsd?: number; checkpoint?: (p: Checkpoint) => void; loginDir?: string } = {}) {
  const loginDir = o.loginDir ?? join(work, `login-${name}`);
  if (!o.loginDir) await writeTestLogin(loginDir);
  const config = unitStudyConfig({ work, name, loaded, roots, loginDir, attempts: o.attempts ?? 3, overrides: { capUsd: o.capUsd ?? 1 } });
  let stdout = "";
  const code = await runStudy(config, { runtime, stdout: (t) => (stdout += t), stderr: process.stderr, checkpoint: o.checkpoint });
  return { code, summary: JSON.parse(stdout), ledger: await readLedger(config.output), loginDir };
}

describe("the CLI attempt kind on the in-memory runtime", () => {
  it("runs every attempt in its own hardened, network-less container and settles each to its cost", async () => {
    const points: string[] = [];
    const runtime = runtimeWith((_, proc) => answer(proc));
    const r = await run("ok", runtime, { checkpoint: (p) => points.push(p) });
    expect(r.code).toBe(ExitCode.ok);
    expect(r.ledger.status).toBe("awaiting-adjudication");
    expect(r.ledger.observations.map((o) => [o.status, o.chargedUsd, o.answer !== null])).toEqual([
      ["completed", 0.000602, true],
      ["completed", 0.000602, true],
      ["completed", 0.000602, true],
    ]);
    const attempts = runtime.created.filter((s) => !s.cmd.includes("--version"));
    expect(attempts).toHaveLength(3);
    for (const spec of attempts) {
      expect(spec).toMatchObject({ networkMode: "none", readOnlyRootfs: true, capDrop: ["ALL"] });
      expect(spec.workspace?.target).toBe("/workspace");
      expect(spec.mounts.find((m) => m.target === "/workspace")).toBeUndefined();
    }
    expect(points.filter((p) => p === "before-container-start")).toHaveLength(3);
    expect(points.slice(0, 4)).toEqual(["before-reserve-write", "after-reserve-write", "before-container-start", "during-attempt"]);
    expect(r.summary).toMatchObject({ status: "awaiting-adjudication", spentUsd: 0.001806 });
  });

  it("the first attempt that does not complete stops the run: charged its reservation, the rest not started, exit 1", async () => {
    const runtime = runtimeWith((n, proc) => (n === 1 ? 1 : answer(proc)));
    const r = await run("fail", runtime);
    expect(r.code).toBe(ExitCode.blocked);
    expect(r.ledger.observations.map((o) => [o.status, o.chargedUsd])).toEqual([
      ["completed", 0.000602],
      ["invalid-setup", 0.1],
    ]);
    expect(r.ledger.statusReason).toMatch(/^attempt 2 \(.*\) ended invalid-setup: no init event$/);
    expect(runtime.created.filter((s) => !s.cmd.includes("--version"))).toHaveLength(2);
  });

  it("a login that expired between attempts is an attempt that did not complete: summary, exit 1, its reservation charged", async () => {
    const loginDir = join(work, "login-expiring");
    await writeTestLogin(loginDir);
    const runtime = runtimeWith(async (n, proc) => {
      // While the first attempt runs, the host login expires (the user logged out, or it ran out).
      if (n === 0) {
        const path = join(loginDir, ".credentials.json");
        const login = JSON.parse(await readFile(path, "utf8"));
        login.claudeAiOauth.expiresAt = Date.parse("2000-01-01T00:00:00Z");
        await writeFile(path, JSON.stringify(login));
      }
      return answer(proc);
    });
    const r = await run("expiring", runtime, { loginDir });
    expect(r.code).toBe(ExitCode.blocked);
    expect(r.ledger.status).toBe("blocked");
    expect(r.ledger.observations.map((o) => [o.phase, o.status, o.chargedUsd])).toEqual([
      ["settled", "completed", 0.000602],
      ["settled", "failed", 0.1],
    ]);
    expect(r.ledger.statusReason).toMatch(/^attempt 2 \(.*\) ended failed: refused after its reservation: .*expired/);
    expect(r.summary).toMatchObject({ status: "blocked", spentUsd: 0.100602, attempts: { run: 2 } });
  });

  // contract: R255
  it("runs every attempt in the image the preflight probed, even when its tag is moved to another image mid-run", async () => {
    const ran: string[] = [];
    let runtime: FakeRuntime;
    runtime = runtimeWith((n, proc) => {
      ran.push(proc.image.id);
      // Another build of the same tag (another checkout, a rebuild) lands while the run goes on.
      if (n === 0) runtime.addImage(UNIT_IMAGE, { [IMAGE_LABELS.claudeSha256]: "b".repeat(64), [IMAGE_LABELS.kind]: "fake-claude" });
      return answer(proc);
    });
    const r = await run("moved-tag", runtime);
    expect(r.code).toBe(ExitCode.ok);
    expect(ran).toHaveLength(3);
    const probed = r.ledger.image?.id;
    expect(probed).toMatch(/^sha256:/);
    expect(ran).toEqual([probed, probed, probed]);
    expect((await runtime.inspectImage(UNIT_IMAGE))?.id).not.toBe(probed);
  });

  // contract: R242
  it("an attempt whose sandbox stream was refused is invalid-setup, with the stream's fault as its setup problem", async () => {
    const runtime = runtimeWith((_, proc) => answer(proc));
    // The Docker provider over the fake engine, with a relay that broke its stream in attempt 1.
    const docker = dockerSandbox(runtime);
    let n = 0;
    const sandbox: Sandbox = Object.assign(Object.create(docker) as Sandbox, {
      prepare: async (spec: SandboxSpec) => {
        const prepared = await docker.prepare(spec);
        const broken = n++ === 0;
        return Object.assign(Object.create(prepared) as PreparedSandbox, {
          run: () => prepared.run(),
          wait: async () => ({ ...(await prepared.wait()), ...(broken ? { channelFault: "the engine-api stream was refused: the relay sent a frame of unknown kind 9" } : {}) }),
          stop: (grace?: number) => prepared.stop(grace),
          cleanup: () => prepared.cleanup(),
        });
      },
    });
    const loginDir = join(work, "login-stream-fault");
    await writeTestLogin(loginDir);
    const config = unitStudyConfig({ work, name: "stream-fault", loaded, roots, loginDir, attempts: 1, overrides: { capUsd: 1 } });
    await runStudy(config, { runtime, sandbox, stdout: () => {}, stderr: process.stderr });
    const [first] = (await readLedger(config.output)).observations;
    expect(first!.status).toBe("invalid-setup");
    expect(first!.setupProblems).toContain("the engine-api stream was refused: the relay sent a frame of unknown kind 9");
  });

  it("a fault of the engine mid-attempt leaves the reservation open and charged on disk, and propagates", async () => {
    const runtime = runtimeWith((_, proc) => answer(proc));
    const create = runtime.create.bind(runtime);
    let n = 0;
    runtime.create = async (spec) => {
      if (!spec.cmd.includes("--version") && n++ === 1) throw new Error("Docker engine unreachable");
      return create(spec);
    };
    const output = join(work, "fault.ledger.json");
    await expect(run("fault", runtime)).rejects.toThrow("Docker engine unreachable");
    const ledger = await readLedger(output);
    expect(ledger.status).toBe("blocked");
    expect(ledger.statusReason).toMatch(/^attempt 2 stopped by a fault of the runner: Docker engine unreachable/);
    expect(ledger.observations.map((o) => o.phase)).toEqual(["settled", "running"]);
    expect(ledger.budget).toMatchObject({ reservedUsd: 0.1, spentUsd: 0.100602 });
  });
});

describe("the adjudicator kind on the in-memory runtime", () => {
  it("takes the login before reserving: a lock that times out reserves nothing and leaves the record blocked, not running", async () => {
    const { runAdjudication } = await import("../../src/adjudicate/run.ts");
    const { acquireLoginLock, resolveLogin } = await import("../../src/credentials/login.ts");
    const { readRecord } = await import("../../src/adjudicate/store.ts");
    const { syntheticLedger } = await import("../support/adjudication-fixtures.ts");
    const loginDir = join(work, "login-adjudicate");
    await writeTestLogin(loginDir);
    const held = await acquireLoginLock(resolveLogin({ configDir: loginDir }), { timeoutMs: 1000, holder: "held-by-the-test" });
    try {
      const ledger = syntheticLedger({ mode: "pilot" });
      const runtime = runtimeWith((_, proc) => answer(proc));
      const output = join(work, "lock.adjudication.json");
      let stdout = "";
      const code = await runAdjudication(unitAdjudicationConfig({ work, loaded, roots, loginDir, output, overrides: { ledger, loginLockTimeoutMs: 300, quiet: true } }), {
        runtime,
        stdout: (t) => (stdout += t),
        stderr: process.stderr,
      });
      expect(code).toBe(ExitCode.blocked);
      const record = await readRecord(output);
      expect(record.status).toBe("blocked");
      expect(record.statusReason).toMatch(/^item 1 not started, nothing reserved: .*in use by another run/);
      expect(record.budget).toMatchObject({ reservedUsd: 0, spentUsd: 0 });
      expect(record.items.every((i) => i.run === null && i.outcome === "blocked")).toBe(true);
      expect(runtime.created.filter((s) => !s.cmd.includes("--version"))).toHaveLength(0);
      expect(JSON.parse(stdout)).toMatchObject({ status: "blocked", spentUsd: 0 });
    } finally {
      await held.release();
    }
  });
});
