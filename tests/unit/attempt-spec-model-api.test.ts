import { describe, expect, it } from "vitest";
import { attemptContainerSpec, CONTAINER, MODEL_API_RELAY_PORT, type AttemptContainerInput } from "../../src/transport/cli/spec.ts";

const base: AttemptContainerInput = {
  image: "study-runner/claude-code:2.1.296",
  argv: ["-p", "--model", "claude-haiku-5-5", "--", "question"],
  exportDir: "/tmp/export-1",
  homeDir: "/tmp/home-1",
  network: { mode: "none" },
  labels: { "study-runner.run": "r" },
  attemptIndex: 0,
};

describe("attemptContainerSpec with a model API on a unix socket", () => {
  it("mounts the socket's folder read-only, starts the CLI behind with-relay.cjs, and points ANTHROPIC_BASE_URL at the relay", () => {
    const spec = attemptContainerSpec({ ...base, modelApiSocket: "/tmp/api-folder/api.sock" });
    expect(spec.entrypoint).toEqual([
      "/usr/local/bin/node",
      "/opt/study-runner/with-relay.cjs",
      "--login",
      CONTAINER.loginDir,
      "--api",
      "/run/study-runner-api/api.sock",
      "--",
      "/usr/local/bin/claude",
    ]);
    expect(spec.cmd).toEqual(base.argv);
    expect(spec.env.ANTHROPIC_BASE_URL).toBe(`http://127.0.0.1:${MODEL_API_RELAY_PORT}`);
    expect(spec.mounts).toContainEqual({ source: "/tmp/api-folder", target: CONTAINER.modelApiDir, readOnly: true });
    expect(spec.networkMode).toBe("none");
    // Still the CLI's own login: no key of any kind.
    expect(Object.keys(spec.env).filter((k) => /KEY|TOKEN/.test(k))).toEqual([]);
  });

  it("without it, the CLI runs behind the login wrapper only and no base URL is set", () => {
    const spec = attemptContainerSpec(base);
    expect(spec.entrypoint).toEqual(["/usr/local/bin/node", "/opt/study-runner/with-relay.cjs", "--login", CONTAINER.loginDir, "--", "/usr/local/bin/claude"]);
    expect(spec.env.ANTHROPIC_BASE_URL).toBeUndefined();
    expect(spec.mounts.map((m) => m.target)).not.toContain(CONTAINER.modelApiDir);
  });

  it("refuses any network but none: the route stays on loopback and unix sockets", () => {
    expect(() => attemptContainerSpec({ ...base, network: { mode: "bridge" }, modelApiSocket: "/tmp/a/api.sock" })).toThrow(/network "none"/);
    expect(() => attemptContainerSpec({ ...base, network: { mode: "container", id: "abc" }, modelApiSocket: "/tmp/a/api.sock" })).toThrow(/network "none"/);
  });

  it("refuses ANTHROPIC_BASE_URL from anywhere but the runner's own socket setting", () => {
    expect(() => attemptContainerSpec({ ...base, extraEnv: { ANTHROPIC_BASE_URL: "http://127.0.0.1:9999" } })).toThrow(/ANTHROPIC_BASE_URL/);
  });
});
