import { describe, expect, it } from "vitest";
import { checkIsolation, checkRuntime } from "../../src/doctor/checks.ts";
import { FakeRuntime } from "../support/fake-runtime.ts";
import type { ContainerRuntime } from "../../src/sandbox/port.ts";

// The doctor's checks for --runtime and --isolation strict (issue 9): the run's own rules.

const engine = (runtimes: string[]) => new FakeRuntime({ program: () => 0, info: { runtimes } });

describe("doctor: runtime", () => {
  it("passes when the engine offers the named runtime, naming what it offers", async () => {
    const c = await checkRuntime(engine(["runc", "runsc"]), "runsc");
    expect(c).toMatchObject({ name: "runtime", ok: true });
    expect(c.detail).toMatch(/'runsc' \(offered: runc, runsc\)/);
  });

  it("fails with the fix when it does not, or when the engine cannot say", async () => {
    const c = await checkRuntime(engine(["runc"]), "runsc");
    expect(c).toMatchObject({ name: "runtime", ok: false });
    expect(c.detail).toBe("the engine has no OCI runtime 'runsc'; it offers runc");
    expect(c.fix).toMatch(/daemon\.json "runtimes"/);
    const down = { ping: () => Promise.reject(new Error("connection refused")) } as unknown as ContainerRuntime;
    expect(await checkRuntime(down, "runsc")).toMatchObject({ ok: false, detail: expect.stringMatching(/connection refused/) });
  });
});

describe("doctor: isolation", () => {
  it("strict needs root or the container uid to share the proxy socket", () => {
    expect(checkIsolation("strict", ["api.anthropic.com"], 0)).toMatchObject({ ok: true, detail: expect.stringMatching(/api\.anthropic\.com on port 443/) });
    expect(checkIsolation("strict", ["api.anthropic.com"], 1000).ok).toBe(true);
    const other = checkIsolation("strict", ["api.anthropic.com"], 1001);
    expect(other).toMatchObject({ ok: false, detail: expect.stringMatching(/uid 1001/) });
    expect(other.fix).toMatch(/root/);
  });

  it("other profiles have no such need", () => {
    expect(checkIsolation("offline", [], 1001).ok).toBe(true);
    expect(checkIsolation("standard", [], 1001).ok).toBe(true);
  });
});
