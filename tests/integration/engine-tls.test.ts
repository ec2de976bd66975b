import { cp, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LABELS } from "../../src/sandbox/reaper.ts";
import { runCli } from "../support/cli.ts";
import { secondEngineTls, SECOND_ENGINE_DIR, startSecondEngine } from "../support/second-engine.ts";
import { makeTestCa } from "../support/test-ca.ts";

/**
 * The engine that shares no files with the runner (tests/support/second-engine.ts), reached the
 * way a remote engine is: DOCKER_HOST=tcp://127.0.0.1:PORT with DOCKER_TLS_VERIFY=1 and a
 * client certificate of the engine's test CA in DOCKER_CERT_PATH. Loopback only.
 */

const FAKE_IMAGE = "study-runner/fake-claude:2.1.296";
let tls: ReturnType<typeof secondEngineTls>;
let engine: Docker;
let work: string;

beforeAll(async () => {
  await startSecondEngine();
  tls = secondEngineTls();
  engine = new Docker({ socketPath: `${SECOND_ENGINE_DIR}/docker.sock` });
  work = await mkdtemp(join(tmpdir(), "sr-engine-tls-"));
}, 180_000);
afterAll(() => rm(work, { recursive: true, force: true }));

/** A DOCKER_CERT_PATH folder holding the engine's CA, with a client certificate of another CA (or none). */
async function certFolder(name: string, files: { clientOfAnotherCa?: boolean; caOfAnotherCa?: boolean; leaveOut?: string }): Promise<string> {
  const dir = join(work, name);
  await mkdir(dir, { mode: 0o700 });
  await cp(tls.DOCKER_CERT_PATH, dir, { recursive: true });
  const other = makeTestCa({ client: true });
  if (files.clientOfAnotherCa) {
    await writeFile(join(dir, "cert.pem"), other.client!.cert, { mode: 0o600 });
    await writeFile(join(dir, "key.pem"), other.client!.key, { mode: 0o600 });
  }
  if (files.caOfAnotherCa) await writeFile(join(dir, "ca.pem"), other.ca, { mode: 0o600 });
  if (files.leaveOut) await rm(join(dir, files.leaveOut));
  return dir;
}

describe("an engine reached over TLS on 127.0.0.1", () => {
  // contract: R250
  it("`demo --pilot` runs on it over the engine's API, and `doctor` names the engine and the channel", async () => {
    expect(tls.DOCKER_HOST).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    const workdir = join(work, "demo");
    const r = await runCli(["demo", "--pilot", "--quiet", "--workdir", workdir], { env: tls, timeoutMs: 600_000 });
    expect(r.code, r.stderr).toBe(0);
    const name = (await readdir(join(workdir, "ledgers"))).find((n) => /^run-.*\.json$/.test(n) && !n.includes("adjudication"))!;
    const ledger = JSON.parse(await readFile(join(workdir, "ledgers", name), "utf8"));
    const endpoint = tls.DOCKER_HOST.replace(/^tcp:/, "tcp+tls:");
    expect(ledger.sandbox).toEqual({ provider: "docker", channel: "engine-api", endpoint, os: "linux", arch: expect.any(String) });
    expect(ledger.observations.map((o: { status: string }) => o.status)).toEqual(["completed", "completed"]);
    expect(ledger.observations.find((o: { arm: string }) => o.arm === "mcp").mcp.toolCalls.length).toBeGreaterThan(0);
    // Nothing of its runs (the study's and the adjudication's) is left on the engine, which other test files share.
    const runIds = await Promise.all(
      (await readdir(join(workdir, "ledgers"))).filter((n) => n.endsWith(".json")).map(async (n) => JSON.parse(await readFile(join(workdir, "ledgers", n), "utf8")).runId as string),
    );
    expect(runIds.length).toBeGreaterThan(1);
    for (const runId of runIds) {
      expect(await engine.listContainers({ all: true, filters: { label: [`${LABELS.run}=${runId}`] } })).toEqual([]);
      expect((await engine.listVolumes({ filters: { label: [`${LABELS.run}=${runId}`] } })).Volumes ?? []).toEqual([]);
    }

    const doctor = await runCli(["doctor", "--transport", "cli", "--image", FAKE_IMAGE], { env: tls });
    const line = (name: string) => doctor.stdout.split("\n").find((l) => l.split(/\s+/)[1] === name);
    expect(line("docker"), doctor.stdout).toMatch(new RegExp(`^ok\\s+docker\\s+Docker .* on linux/\\S+ at ${endpoint.replace(/[.+]/g, "\\$&")}, from DOCKER_HOST`));
    expect(line("engine-files"), doctor.stdout).toMatch(/channel engine-api/);
  }, 600_000);

  // contract: R250
  it("a missing, foreign or untrusting certificate is refused naming DOCKER_CERT_PATH and the fix, before anything is reserved", async () => {
    const cases = [
      { dir: await certFolder("no-key", { leaveOut: "key.pem" }), says: /DOCKER_CERT_PATH=\S+ has no readable key\.pem; set DOCKER_CERT_PATH to the folder holding ca\.pem/ },
      { dir: await certFolder("foreign-client", { clientOfAnotherCa: true }), says: /the engine refused the client certificate .*DOCKER_CERT_PATH=\S+foreign-client: set DOCKER_CERT_PATH/ },
      { dir: await certFolder("foreign-ca", { caOfAnotherCa: true }), says: /the engine's certificate is not one the CA in ca\.pem signed .*DOCKER_CERT_PATH=\S+foreign-ca: set DOCKER_CERT_PATH/ },
    ];
    for (const c of cases) {
      const workdir = join(work, `refused-${c.dir.split("/").pop()}`);
      const r = await runCli(["demo", "--pilot", "--quiet", "--workdir", workdir], { env: { ...tls, DOCKER_CERT_PATH: c.dir }, timeoutMs: 120_000 });
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(c.says);
      expect(r.stderr).toMatch(/nothing was charged/);
      // Nothing reserved: no ledger was written.
      expect(await readdir(join(workdir, "ledgers")).catch(() => [])).toEqual([]);
      const doctor = await runCli(["doctor", "--transport", "cli"], { env: { ...tls, DOCKER_CERT_PATH: c.dir } });
      expect(doctor.stdout).toMatch(new RegExp(`FAIL\\s+docker\\s+.*${c.says.source}`));
    }
    const unset = await runCli(["demo", "--pilot", "--quiet", "--workdir", join(work, "unset")], { env: { ...tls, DOCKER_CERT_PATH: undefined } });
    expect(unset.code).toBe(2);
    expect(unset.stderr).toMatch(/DOCKER_TLS_VERIFY=1 asks for TLS to the engine at tcp:\/\/127\.0\.0\.1:\d+, but DOCKER_CERT_PATH is not set; set DOCKER_CERT_PATH/);
  }, 300_000);
});
