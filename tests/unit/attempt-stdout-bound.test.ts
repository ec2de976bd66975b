import { describe, expect, it } from "vitest";
import { runBounded } from "../../src/sandbox/bounded.ts";
import { dockerSandbox } from "../../src/sandbox/docker-sandbox.ts";
import { FakeRuntime } from "../support/fake-runtime.ts";
import { STDOUT_LIMIT_BYTES } from "../../src/terms/limits.ts";
import { evaluate, baseEvents, toText } from "./transcript-fixtures.ts";

const spec = { image: "img:1", cmd: [], env: {}, mounts: [], tmpfs: {}, readOnlyRootfs: true, networkMode: "none" as const, capDrop: [], securityOpt: [], labels: {} };

/** A container that writes the start of a transcript, then one endless line (as a runaway answer would) until it is killed. */
function floodingRuntime(): FakeRuntime {
  const runtime = new FakeRuntime({
    program: async ({ stdout, signal }) => {
      stdout.write(`${toText(baseEvents("repository").slice(0, 3))}\n{"type":"assistant","text":"`);
      const chunk = "x".repeat(16 * 1024);
      while (!signal.aborted) {
        stdout.write(chunk);
        await new Promise((r) => setImmediate(r));
      }
      return 137;
    },
  });
  runtime.addImage("img:1");
  return runtime;
}

describe("the stdout bound of one attempt", () => {
  it("cuts at a configured bound lower than the default, reports that bound, and the attempt's reason names it", async () => {
    const lines: string[] = [];
    const raw = await runBounded(dockerSandbox(floodingRuntime()).containers, spec, (l) => lines.push(l), { stdoutLimitBytes: 64 * 1024, timeoutMs: 30_000 });
    expect(raw.truncated).toBe(true);
    expect(raw.timedOut).toBe(false);
    expect(raw.stdoutLimitBytes).toBe(64 * 1024);
    expect(raw.stdoutBytes).toBe(64 * 1024);
    const verdict = evaluate(lines.join("\n"), "repository", { truncated: raw.truncated, exitCode: raw.exitCode, stdoutLimitBytes: raw.stdoutLimitBytes }).classification;
    expect(verdict).toEqual({ status: "failed", reason: "stdout reached the 64 KiB bound and was cut" });
  });

  it("applies the 4 MiB default when no bound is configured, and reports it", async () => {
    const raw = await runBounded(dockerSandbox(floodingRuntime()).containers, spec, () => {}, { timeoutMs: 60_000 });
    expect(raw.truncated).toBe(true);
    expect(raw.stdoutLimitBytes).toBe(STDOUT_LIMIT_BYTES);
    expect(STDOUT_LIMIT_BYTES).toBe(4 * 1024 * 1024);
  });
});
