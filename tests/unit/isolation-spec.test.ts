import { describe, expect, it } from "vitest";
import { attemptContainerSpec, CONTAINER, DEFAULT_HOME_BYTES, EGRESS_RELAY_PORT, MODEL_API_RELAY_PORT, type AttemptContainerInput } from "../../src/transport/cli/spec.ts";
import { networkFor } from "../../src/isolation/profile.ts";

// The container spec of each --isolation profile (issue 9). Standard is checked here only: the
// test engine has no bridge network, and no test sends bridge traffic.

const base: AttemptContainerInput = {
  image: "study-runner/claude-code:2.1.296",
  argv: ["-p", "--model", "claude-haiku-5-5", "--", "question"],
  exportDir: "/tmp/export-1",
  homeDir: "/tmp/home-1",
  network: { mode: "none" },
  labels: { "study-runner.run": "r" },
  attemptIndex: 0,
};
const PROXY_VARS = ["HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"];

describe("isolation profiles in the attempt container spec", () => {
  it("standard: the engine's default bridge, the login wrapper without relays, no proxy", () => {
    const spec = attemptContainerSpec({ ...base, network: networkFor("standard") });
    expect(spec.networkMode).toBe("bridge");
    expect(spec.entrypoint).toEqual(["/usr/local/bin/node", "/opt/study-runner/with-relay.cjs", "--login", CONTAINER.loginDir, "--", "/usr/local/bin/claude"]);
    for (const v of PROXY_VARS) expect(spec.env[v], v).toBeUndefined();
    expect(spec.mounts.map((m) => m.target)).not.toContain(CONTAINER.egressDir);
    // The rest of the hardening is the same in every profile.
    expect(spec).toMatchObject({ readOnlyRootfs: true, capDrop: ["ALL"], securityOpt: ["no-new-privileges"], user: "1000:1000" });
  });

  it("offline: network none and nothing else: no proxy variables, no relay, no socket folder", () => {
    const spec = attemptContainerSpec({ ...base, network: networkFor("offline") });
    expect(spec.networkMode).toBe("none");
    expect(spec.entrypoint).toEqual(["/usr/local/bin/node", "/opt/study-runner/with-relay.cjs", "--login", CONTAINER.loginDir, "--", "/usr/local/bin/claude"]);
    for (const v of PROXY_VARS) expect(spec.env[v], v).toBeUndefined();
    expect(spec.mounts.map((m) => m.target)).toEqual([CONTAINER.loginDir]);
    expect(spec.workspace?.target).toBe(CONTAINER.workspace);
  });

  it("strict: network none, the proxy socket's folder read-only, the CLI behind the relay, HTTPS_PROXY and HTTP_PROXY on it, loopback exempt", () => {
    const spec = attemptContainerSpec({ ...base, network: networkFor("strict"), egressProxySocket: "/tmp/egress-x/egress.sock" });
    expect(spec.networkMode).toBe("none");
    expect(spec.entrypoint).toEqual([
      "/usr/local/bin/node",
      "/opt/study-runner/with-relay.cjs",
      "--login",
      CONTAINER.loginDir,
      "--proxy",
      "/run/study-runner-egress/egress.sock",
      "--",
      "/usr/local/bin/claude",
    ]);
    expect(spec.cmd).toEqual(base.argv);
    expect(spec.env.HTTPS_PROXY).toBe(`http://127.0.0.1:${EGRESS_RELAY_PORT}`);
    expect(spec.env.HTTP_PROXY).toBe(spec.env.HTTPS_PROXY);
    expect(spec.env.NO_PROXY).toBe("127.0.0.1,localhost");
    expect(spec.env.ANTHROPIC_BASE_URL).toBeUndefined();
    expect(spec.mounts).toContainEqual({ source: "/tmp/egress-x", target: CONTAINER.egressDir, readOnly: true });
  });

  it("strict beside a model API socket: two relays on two ports, the API reached directly", () => {
    const spec = attemptContainerSpec({ ...base, network: networkFor("strict"), modelApiSocket: "/tmp/api/api.sock", egressProxySocket: "/tmp/egress-x/egress.sock" });
    expect(spec.entrypoint).toEqual([
      "/usr/local/bin/node",
      "/opt/study-runner/with-relay.cjs",
      "--login",
      CONTAINER.loginDir,
      "--api",
      "/run/study-runner-api/api.sock",
      "--proxy",
      "/run/study-runner-egress/egress.sock",
      "--",
      "/usr/local/bin/claude",
    ]);
    expect(spec.env.ANTHROPIC_BASE_URL).toBe(`http://127.0.0.1:${MODEL_API_RELAY_PORT}`);
    expect(MODEL_API_RELAY_PORT).not.toBe(EGRESS_RELAY_PORT);
  });

  it("HOME is a tmpfs of the bound owned by the container user, one CPU by default, the doc-bridge socket folder read-only", () => {
    const spec = attemptContainerSpec({ ...base, network: networkFor("offline"), mcpSocketDir: "/tmp/mcp-x/socket" });
    expect(spec.tmpfs[CONTAINER.home]).toBe(`rw,nosuid,nodev,size=${DEFAULT_HOME_BYTES},uid=1000,gid=1000,mode=0700`);
    expect(spec.mounts.map((m) => m.target)).not.toContain(CONTAINER.home);
    expect(spec.mounts).toContainEqual({ source: "/tmp/mcp-x/socket", target: CONTAINER.mcpDir, readOnly: true });
    expect(spec.nanoCpus).toBe(1e9);
    expect(attemptContainerSpec({ ...base, network: networkFor("offline"), cpus: 2.5, homeBytes: 8 << 20 })).toMatchObject({
      nanoCpus: 2.5e9,
      tmpfs: { [CONTAINER.home]: expect.stringContaining("size=8388608,") },
    });
    expect(() => attemptContainerSpec({ ...base, network: networkFor("offline"), cpus: 0 })).toThrow(/CPU limit/);
    expect(() => attemptContainerSpec({ ...base, network: networkFor("offline"), homeBytes: 1000 })).toThrow(/HOME size bound/);
  });

  it("refuses the proxy on any network but none: a bridge would be a second way out", () => {
    expect(() => attemptContainerSpec({ ...base, network: { mode: "bridge" }, egressProxySocket: "/tmp/e/egress.sock" })).toThrow(/egress proxy needs network "none"/);
    expect(() => attemptContainerSpec({ ...base, network: { mode: "container", id: "abc" }, egressProxySocket: "/tmp/e/egress.sock" })).toThrow(/network "none"/);
  });

  it("refuses proxy variables from anywhere but the runner's own proxy setting", () => {
    for (const name of ["HTTPS_PROXY", "http_proxy", "ALL_PROXY", "NO_PROXY"]) {
      expect(() => attemptContainerSpec({ ...base, extraEnv: { [name]: "http://127.0.0.1:1" } }), name).toThrow(new RegExp(`refusing ${name}`));
    }
  });

  it("passes the OCI runtime through, and leaves it to the engine's default when absent", () => {
    expect(attemptContainerSpec({ ...base, runtime: "runsc" }).runtime).toBe("runsc");
    expect("runtime" in attemptContainerSpec(base)).toBe(false);
  });
});
