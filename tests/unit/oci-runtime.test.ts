import { afterEach, describe, expect, it, vi } from "vitest";
import { resolveOciRuntime, runtimeNeeds, runtimeProblem } from "../../src/isolation/oci-runtime.ts";
import { FakeRuntime } from "../support/fake-runtime.ts";

// What the preflight refuses from a probe container's findings (src/isolation/oci-runtime.ts): each
// gVisor limit named with its fix, derived from what the run will use.

const gvisorKernel = { kernel: "4.4.0", interfaces: ["lo"] };

describe("runtimeProblem", () => {
  // contract: R171
  it("refuses a run that reaches a host unix socket when the runtime cannot connect to one, naming gVisor's --host-uds", () => {
    const needs = runtimeNeeds({ network: "none", gateway: true, modelApiSocket: false, docBridge: true });
    const problem = runtimeProblem("runsc", "--runtime", needs, { ...gvisorKernel, socket: "ECONNREFUSED" });
    expect(problem).toBe(
      "under the OCI runtime 'runsc' (--runtime) a container cannot connect to a host unix socket bind-mounted into it (ECONNREFUSED), and this run reaches the model gateway, the doc-bridge server (the mcp arm) through one; gVisor (runsc) refuses host unix sockets unless runsc runs with --host-uds=open in the runtime's runtimeArgs; register it so, or use --credentials login-copy with a repository-only plan and no --isolation strict",
    );
    // A run that uses no socket (login-copy, repository arm, offline) is not refused for it.
    const none = runtimeNeeds({ network: "none", gateway: false, modelApiSocket: false, docBridge: false, egressProxy: false });
    expect(none.unixSockets).toEqual([]);
    expect(runtimeProblem("runsc", "--runtime", none, { ...gvisorKernel, socket: "ECONNREFUSED" })).toBeNull();
  });

  it("refuses the bridge when the container sees loopback alone, and passes what the probe showed working", () => {
    const bridge = runtimeNeeds({ network: "bridge", gateway: false, modelApiSocket: false });
    expect(runtimeProblem("runsc", "--runtime", bridge, { ...gvisorKernel, socket: "ok" })).toMatch(
      /sees only lo, so the CLI could not reach the API; gVisor \(runsc\) registered with --network=none/,
    );
    expect(runtimeProblem("runsc", "--runtime", bridge, { kernel: "4.4.0", interfaces: ["eth0", "lo"], socket: "ok" })).toBeNull();
    const strict = runtimeNeeds({ network: "none", gateway: false, modelApiSocket: false, egressProxy: true });
    expect(runtimeProblem("runsc", "--runtime", strict, { ...gvisorKernel, socket: "ok" })).toBeNull();
    // Another runtime's name is not called gVisor outright.
    expect(runtimeProblem("kata", "--runtime", strict, { ...gvisorKernel, socket: "EACCES" })).toMatch(/if 'kata' is gVisor, it refuses host unix sockets/);
  });
});

describe("resolveOciRuntime", () => {
  afterEach(() => vi.restoreAllMocks());
  const engine = { serverVersion: "fake", apiVersion: "1.41", endpoint: "fake://", runtimes: ["runc", "runsc"], defaultRuntime: "runc" };
  const input = (name?: string) => ({ name, flag: "--runtime", image: "img", labels: {}, needs: runtimeNeeds({ network: "none", gateway: true, modelApiSocket: false }) });

  it("records the engine's default by name without a probe, and refuses a runner that cannot share a socket for that reason, not the runtime's", async () => {
    const fake = new FakeRuntime({ program: () => 0 });
    expect(await resolveOciRuntime(fake, engine, input())).toBe("runc");
    expect(await resolveOciRuntime(fake, engine, input("runc"))).toBe("runc");
    vi.spyOn(process, "getuid").mockReturnValue(1001);
    await expect(resolveOciRuntime(fake, engine, input("runsc"))).rejects.toThrow(/the model gateway: the runner must run as root or as uid 1000 .* it runs as uid 1001; nothing was charged/);
    // Nothing was started: no probe container for the default, none for a runner that is refused.
    expect(fake.created).toEqual([]);
  });
});
