import { afterEach, describe, expect, it, vi } from "vitest";
import { runBounded } from "../../src/sandbox/bounded.ts";
import { dockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import { ATTEMPT_TIMEOUT_MS } from "../../src/terms/limits.ts";
import { FakeRuntime } from "../support/fake-runtime.ts";
import type { ContainerSpec } from "../../src/sandbox/port.ts";

/** The contract's attempt timeout: five minutes unless a test shortens it. */

afterEach(() => vi.useRealTimers());

const spec: ContainerSpec = { image: "img:1", cmd: [], env: {}, mounts: [], tmpfs: {}, readOnlyRootfs: true, networkMode: "none", capDrop: [], securityOpt: [], labels: {} };

describe("the attempt timeout default", () => {
  it("is five minutes", () => {
    expect(ATTEMPT_TIMEOUT_MS).toBe(300_000);
  });

  it("an attempt given no timeout is killed at five minutes, not a moment before", async () => {
    vi.useFakeTimers();
    const runtime = new FakeRuntime({
      // A CLI that hangs until it is killed.
      program: ({ signal }) => new Promise<number>((resolve) => signal.addEventListener("abort", () => resolve(137))),
    });
    runtime.addImage("img:1");
    let done = false;
    const outcome = runBounded(dockerSandbox(runtime).containers, spec, () => {}).finally(() => (done = true));
    await vi.advanceTimersByTimeAsync(5 * 60_000 - 1);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await vi.advanceTimersByTimeAsync(3_000);
    expect(done).toBe(true);
    expect(await outcome).toMatchObject({ timedOut: true, truncated: false });
  });
});
