import { access } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultIndexRoot } from "../../src/mcp/index-store.ts";
import { runCli } from "../support/cli.ts";
import { MODEL, prepareFixture, type Fixture } from "./isolation-fixtures.ts";

// gVisor (--runtime runsc) on the real engine, registered as .ci/run registers it (ptrace, network
// none, host unix sockets open): what the doctor and the preflight see of it. The attempt kinds
// themselves run under runsc with the real CLI in tests/conformance/gvisor.test.ts. A missing
// runsc fails here; it is never skipped.

const RUNSC = "runsc";
let f: Fixture;
beforeAll(async () => {
  f = await prepareFixture("gvisor");
  expect((await f.runtime.ping()).runtimes).toContain(RUNSC);
}, 300_000);
afterAll(() => f?.cleanup());

const env = { STUDY_MODEL: MODEL, STUDY_BUDGET_USD: "1" };
const base = (output: string) => [
  "--transport",
  "cli",
  "--image",
  f.demo.image,
  "--claude-config-dir",
  f.demo.loginDir,
  "--output",
  output,
  ...Object.entries(f.demo.roots).flatMap(([n, d]) => ["--root", `${n}=${d}`]),
];

describe("gVisor (--runtime runsc)", () => {
  // contract: R172
  it("doctor --runtime runsc runs a probe container under it: gVisor's own kernel, loopback only, a bind-mounted unix socket answered", async () => {
    const r = await runCli(["doctor", ...base(join(f.work, "doctor-ledger.json")), "--runtime", RUNSC], {
      env: { ...env, STUDY_RUNNER_DOC_INDEX: defaultIndexRoot() },
    });
    const line = r.stdout.split("\n").find((l) => /^\S+\s+runtime\s/.test(l));
    expect(line, r.stdout).toMatch(/^ok\s+runtime\s/);
    // gVisor answers uname with its own kernel version, never the host's.
    const hostKernel = (await import("node:os")).release();
    const kernel = /saw kernel (\S+) and the interfaces/.exec(line!)?.[1];
    expect(kernel).toBeDefined();
    expect(kernel).not.toBe(hostKernel);
    expect(line).toMatch(/a probe container under it started with network none, saw kernel \S+ and the interfaces lo, and was answered through a bind-mounted unix socket/);
  }, 180_000);

  // contract: R171
  it("refuses, before any ledger exists, a run whose containers would need a network gVisor registered with --network=none cannot give", async () => {
    const output = join(f.work, "standard-ledger.json");
    const r = await runCli(["run", "--pilot", "--approve-budget", "--quiet", ...base(output), "--credentials", "login-copy", "--isolation", "standard", "--runtime", RUNSC], { env });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(
      /under the OCI runtime 'runsc' \(--runtime\) a container on the bridge network sees only lo, so the CLI could not reach the API; gVisor \(runsc\) registered with --network=none has no network of its own/,
    );
    expect(r.stderr).toMatch(/nothing was charged/);
    await expect(access(output)).rejects.toThrow(/ENOENT/);
  }, 180_000);
});
