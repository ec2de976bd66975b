import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { DockerRuntime } from "../../src/sandbox/docker.ts";

/** The packages of dockerode's BuildKit session and docker-modem's SSH transport that this process has loaded. */
function loadedHeavy(): string[] {
  const cache = createRequire(import.meta.url).cache;
  const names = Object.keys(cache).map((k) => /node_modules\/(ssh2|@grpc\/grpc-js|@grpc\/proto-loader|protobufjs)\//.exec(k)?.[1]);
  return [...new Set(names.filter((n): n is string => n !== undefined))].sort();
}

// Each host-tier file runs in a process of its own, so nothing else has loaded dockerode here.
describe("dockerode loaded for a runner command (src/sandbox/dockerode-load.ts)", () => {
  it("reaches a unix-socket engine without loading gRPC or ssh2, and an ssh:// engine still through ssh2", async () => {
    expect(loadedHeavy()).toEqual([]);
    const local = new DockerRuntime({ socketPath: "/nonexistent/study-runner-dockerode-load.sock" });
    await expect(local.ping()).rejects.toThrow(/Docker engine unreachable \(ENOENT\)/);
    // A runner command that reached its engine over its socket paid for neither transport it did not use.
    expect(loadedHeavy()).toEqual([]);

    // An engine over SSH (a closed port on loopback): dockerode's SSH transport is loaded at its
    // first call and connects, so the refusal is the SSH client's own connection's.
    const overSsh = new DockerRuntime({ protocol: "ssh", host: "127.0.0.1", port: 1, username: "study-runner" });
    await expect(overSsh.ping()).rejects.toThrow(/Docker engine unreachable \(ECONNREFUSED\)/);
    expect(loadedHeavy()).toContain("ssh2");
    expect(loadedHeavy()).not.toContain("@grpc/grpc-js");
  });
});
