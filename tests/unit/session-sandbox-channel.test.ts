import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { writeTestLogin } from "../../src/demo/setup.ts";
import { makeSessionDemo, type SessionDemo } from "../../src/demo/sessions.ts";
import { IMAGE_LABELS } from "../../src/image/specs.ts";
import { startSessions } from "../../src/session/run.ts";
import { FakeRuntime } from "../support/fake-runtime.ts";
import { sessionTestConfig } from "../support/session-config.ts";

/** The channel of a session task's containers, chosen by the session preflight as a study's is (contract R247). */

const IMAGE = "study-runner/fake-claude:2.1.296";
let dir: string;
let demo: SessionDemo;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "sr-session-channel-"));
  demo = await makeSessionDemo(join(dir, "demo"));
  await writeTestLogin(join(dir, "login"));
});
afterEach(() => rm(dir, { recursive: true, force: true }));

/** The fake engine with the engine-api channel's operations, which the preflight checks for but never calls. */
function engineApiRuntime(): FakeRuntime {
  const runtime = new FakeRuntime({ program: ({ stdout }) => void stdout.write("2.1.296 (Claude Code)\n") });
  runtime.addImage(IMAGE, { [IMAGE_LABELS.claudeSha256]: "a".repeat(64), [IMAGE_LABELS.kind]: "fake-claude" });
  const unused = () => Promise.reject(new Error("not called by the preflight"));
  return Object.assign(runtime, { createVolume: unused, putArchive: unused, attachStdio: unused });
}

describe("the session preflight's channel", () => {
  // contract: R247
  it("refuses the login-copy mode of a session task on the engine-api channel before any ledger exists", async () => {
    const output = join(dir, "ledger.json");
    const config = sessionTestConfig(
      { manifestPath: demo.manifestPath, roots: demo.roots, output, model: "claude-haiku-5-5", image: IMAGE, loginDir: join(dir, "login") },
      { credentials: "login-copy", sandboxChannel: "engine-api" },
    );
    await expect(startSessions(config, { runtime: engineApiRuntime() })).rejects.toThrow(
      /--sandbox-channel engine-api: the login-copy mode is not carried over it.*use --credentials gateway.*nothing was charged/,
    );
    expect((await readdir(dir)).sort()).toEqual(["demo", "login"]);
  });
});
