import { access } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RefusalError } from "../../src/util/errors.ts";
import { runCli } from "../support/cli.ts";
import { MODEL, prepareFixture, runIsolated, type Fixture } from "./isolation-fixtures.ts";

// --runtime (issue 9) on the real engine, and the isolation flags as a user passes them.

let f: Fixture;
beforeAll(async () => {
  f = await prepareFixture("runtime");
}, 300_000);
afterAll(() => f?.cleanup());

const ok = { default: { kind: "ok" } };

describe("--runtime", () => {
  it("refuses to start, with nothing written, when the engine lacks the named runtime", async () => {
    const err = await runIsolated(f, { isolation: "offline", behaviour: ok, plan: "repository", runtime: "no-such-runtime" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RefusalError);
    expect((err as Error).message).toMatch(/no OCI runtime 'no-such-runtime' \(--runtime\); it offers .*runc/);
  }, 120_000);

  it("runs every attempt container under a runtime the engine has, and records it in the ledger", async () => {
    const runtimes = (await f.runtime.ping()).runtimes;
    expect(runtimes).toContain("runc");
    const run = await runIsolated(f, { isolation: "offline", behaviour: ok, plan: "repository", runtime: "runc" });
    expect(run.code, run.stderr).toBe(0);
    expect(run.ledger.runtime).toBe("runc");
    expect(run.ledger.observations[0]!.runtime).toBe("runc");
    expect(run.specs.length).toBe(1);
    expect(run.specs[0]!.runtime).toBe("runc");
  }, 120_000);

  // contract: R173
  it("records the engine's default runtime by name when no --runtime is given, for the run and for each attempt", async () => {
    const { defaultRuntime } = await f.runtime.ping();
    const run = await runIsolated(f, { isolation: "offline", behaviour: ok, plan: "repository" });
    expect(run.code, run.stderr).toBe(0);
    // By name, not null: the ledger says which runtime ran even when nobody chose one.
    expect(run.ledger.runtime).toBe(defaultRuntime);
    expect(run.ledger.observations.map((o) => o.runtime)).toEqual([defaultRuntime]);
    expect(run.specs.map((s) => s.runtime)).toEqual([defaultRuntime]);
  }, 120_000);
});

describe("isolation flags of the shipped command", () => {
  const base = (output: string) => [
    "--pilot",
    "--transport",
    "cli",
    "--approve-budget",
    "--quiet",
    "--image",
    f.demo.image,
    "--claude-config-dir",
    f.demo.loginDir,
    "--output",
    output,
    ...Object.entries(f.demo.roots).flatMap(([n, d]) => ["--root", `${n}=${d}`]),
  ];
  const env = { STUDY_MODEL: MODEL, STUDY_BUDGET_USD: "1" };

  it("refuses --egress-allow without strict, a bad host, and a missing runtime, before any ledger exists", async () => {
    const output = join(f.work, "cli-ledger.json");
    const noStrict = await runCli([...base(output), "--isolation", "offline", "--egress-allow", "api.anthropic.com"], { env });
    expect(noStrict.code).toBe(2);
    expect(noStrict.stderr).toMatch(/--egress-allow applies to --isolation strict only/);
    const badHost = await runCli([...base(output), "--isolation", "strict", "--egress-allow", "api.anthropic.com,10.0.0.1"], { env });
    expect(badHost.code).toBe(2);
    expect(badHost.stderr).toMatch(/--egress-allow 10\.0\.0\.1: an IP address/);
    const missing = await runCli([...base(output), "--isolation", "offline", "--runtime", "no-such-runtime"], { env });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/no OCI runtime 'no-such-runtime'/);
    await expect(access(output)).rejects.toThrow(/ENOENT/);
  }, 120_000);

  it("records strict isolation, its allowlist and the runtime in the ledger header of a real run", async () => {
    const output = join(f.work, "cli-strict-ledger.json");
    // The proxy and its allowlist belong to the login-copy mode: with the gateway no container has either.
    const r = await runCli([...base(output), "--credentials", "login-copy", "--isolation", "strict", "--egress-allow", "Api.Anthropic.com,platform.claude.com", "--runtime", "runc"], { env });
    expect(r.code, r.stderr).toBe(0);
    const { readLedger } = await import("../../src/ledger/store.ts");
    const ledger = await readLedger(output);
    expect(ledger).toMatchObject({ isolation: "strict", egressAllow: ["api.anthropic.com", "platform.claude.com"], runtime: "runc" });
    // The fake makes no request of its own: an empty record per attempt, not a missing one.
    for (const o of ledger.observations) expect(o.egress).toEqual({ requests: 0, allowed: 0, refused: 0, bytesUp: 0, bytesDown: 0, entries: [], entriesDropped: 0, droppedConnections: 0 });
  }, 120_000);
});
