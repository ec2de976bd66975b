import { describe, expect, it } from "vitest";
import { DockerRuntime } from "../../src/sandbox/docker.ts";
import { ContainerRuntimeError } from "../../src/sandbox/port.ts";

/** A runtime whose engine calls fail as Node fails a write on a connection the engine closed. */
function runtimeLosing(code: string): DockerRuntime {
  const runtime = new DockerRuntime({ socketPath: "/nonexistent/docker.sock" });
  const lost = () => Promise.reject(Object.assign(new Error(`write ${code}`), { code, syscall: "write" }));
  // The adapter's dockerode client, replaced: what a cut connection gives back is what is tested.
  (runtime as unknown as { docker: unknown }).docker = { getContainer: () => ({ start: lost, kill: lost }) };
  return runtime;
}

describe("the engine's connection lost", () => {
  // contract: R100
  it("a write on a connection the engine closed (EPIPE) is the engine unreachable, not an internal error", async () => {
    for (const code of ["EPIPE", "ECONNRESET", "ECONNABORTED"]) {
      const err = await runtimeLosing(code)
        .start("c1")
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ContainerRuntimeError);
      expect((err as ContainerRuntimeError).code).toBe("unavailable");
      expect((err as Error).message).toBe(`start c1: Docker engine unreachable (${code})`);
    }
  });
});
