import { afterEach, describe, expect, it } from "vitest";
import { attemptContainerSpec, CONTAINER, type AttemptContainerInput } from "../../src/transport/cli/spec.ts";

const base: AttemptContainerInput = {
  image: "study-runner/claude-code:2.1.296",
  argv: ["-p", "--model", "claude-haiku-5-5", "--", "question"],
  exportDir: "/tmp/study-runner-export-1-abc",
  homeDir: "/tmp/study-runner-home-1-abc/home",
  network: { mode: "none" },
  labels: { "study-runner.run": "r" },
  attemptIndex: 3,
};

/** What the container's environment may hold without any relay or proxy: nothing from the host. */
const ALLOWLIST = ["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_AUTOUPDATER", "HOME", "LANG", "PATH", "STUDY_RUNNER_ATTEMPT", "TERM", "TMPDIR", "USER"];

describe("the attempt container's environment", () => {
  const saved = { ...process.env };
  afterEach(() => {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  });

  // contract: R68
  it("builds the environment from an allowlist, never from the host's", () => {
    process.env.ANTHROPIC_API_KEY = "test-key-not-real";
    process.env.STUDY_RUNNER_CANARY = "host-only";
    process.env.HOME = "/root-of-the-host";
    const spec = attemptContainerSpec(base);
    expect(Object.keys(spec.env).sort()).toEqual(ALLOWLIST);
    expect(spec.env.HOME).toBe(CONTAINER.home);
    expect(spec.env.STUDY_RUNNER_ATTEMPT).toBe("3");
    expect(Object.values(spec.env)).not.toContain("test-key-not-real");
    expect(Object.values(spec.env)).not.toContain("host-only");
  });

  // contract: R68
  it("refuses a key, a token or cloud credentials even when the runner asks for them", () => {
    for (const name of ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_CLIENT_SECRET"]) {
      expect(() => attemptContainerSpec({ ...base, extraEnv: { [name]: "x" } }), name).toThrow(`refusing to pass ${name} into an attempt container`);
    }
    // A variable the runner decided on that is none of those passes.
    expect(attemptContainerSpec({ ...base, extraEnv: { STUDY_RUNNER_NOTE: "x" } }).env.STUDY_RUNNER_NOTE).toBe("x");
  });
});

describe("the attempt container's hardening", () => {
  // contract: R67
  it("runs as uid 1000 on a read-only root with every capability dropped, the export read-only and the HOME a bounded tmpfs", () => {
    const spec = attemptContainerSpec(base);
    expect(spec.user).toBe("1000:1000");
    expect(spec.readOnlyRootfs).toBe(true);
    expect(spec.capDrop).toEqual(["ALL"]);
    expect(spec.securityOpt).toEqual(["no-new-privileges"]);
    expect(spec.pidsLimit).toBeGreaterThan(0);
    expect(spec.memoryBytes).toBeGreaterThan(0);
    expect(Object.keys(spec.tmpfs).sort()).toEqual([CONTAINER.home, "/tmp"].sort());
    expect(spec.tmpfs[CONTAINER.home]).toMatch(/size=\d+,uid=1000,gid=1000,mode=0700/);
    expect(spec.workingDir).toBe(CONTAINER.workspace);
    // The staged login is a folder of its own, copied into the tmpfs HOME by the login wrapper.
    expect(spec.mounts).toEqual([{ source: base.homeDir, target: "/run/study-runner-login", readOnly: false }]);
    // The export is a read-only tree handed over as content; its host copy is what Docker binds.
    expect(spec.workspace).toMatchObject({ target: CONTAINER.workspace, hostPath: base.exportDir });
  });
});
