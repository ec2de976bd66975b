import { describe, expect, it } from "vitest";
import { attemptContainerSpec, CONTAINER, type AttemptContainerInput } from "../../src/transport/cli/spec.ts";
import { stageSessionCall } from "../../src/session/state.ts";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

const base: AttemptContainerInput = {
  image: "study-runner/claude-code:2.1.296",
  argv: ["-p", "--model", "claude-haiku-5-5"],
  exportDir: "/tmp/study-runner-worktree-1-abc",
  homeDir: "/tmp/study-runner-home-1-abc/home",
  network: { mode: "none" },
  labels: { "study-runner.run": "r" },
  attemptIndex: 0,
  writableWorkspace: true,
};

const inside = (path: string, folder: string) => path === folder || path.startsWith(`${folder}/`);

describe("a session call's container", () => {
  // contract: R116
  it("can write only its worktree and HOME, with the gateway's read-only login and with a login copy alike", async () => {
    const staged = await mkdtemp(join(tmpdir(), "sr-session-spec-"));
    try {
      const paths = await stageSessionCall(staged, { worktree: base.exportDir, exportHash: "0".repeat(64), prompt: "p", stateDir: join(staged, "none"), priorMessageUsage: [] });
      for (const loginReadOnly of [true, false]) {
        const spec = attemptContainerSpec({ ...base, loginReadOnly, session: { ...paths, channelSocket: "/tmp/study-runner-home-1-abc/session-channel/session.sock" } });
        expect(spec.readOnlyRootfs).toBe(true);
        // No tmpfs but HOME: a session container has no writable /tmp, its TMPDIR is in HOME.
        expect(Object.keys(spec.tmpfs ?? {})).toEqual([CONTAINER.home]);
        expect(inside(spec.env.TMPDIR!, CONTAINER.home)).toBe(true);
        const writable = spec.mounts.filter((m) => !m.readOnly).map((m) => m.target);
        expect(writable.length).toBeGreaterThan(0);
        for (const target of writable) expect(inside(target, CONTAINER.workspace) || inside(target, CONTAINER.home), target).toBe(true);
        // Where with-relay.cjs reads the prompt and the session files from is in HOME.
        const entry = spec.entrypoint!;
        for (const flag of ["--login", "--stdin", "--projects"]) {
          expect(inside(entry[entry.indexOf(flag) + 1]!, CONTAINER.home), flag).toBe(true);
        }
        // The session files leave through the channel's socket, in a folder mounted read-only (contract R141).
        expect(entry[entry.indexOf("--session-out") + 1]).toBe(`${CONTAINER.sessionChannelDir}/session.sock`);
        expect(spec.mounts.find((m) => m.target === CONTAINER.sessionChannelDir)).toEqual({
          source: "/tmp/study-runner-home-1-abc/session-channel",
          target: CONTAINER.sessionChannelDir,
          readOnly: true,
        });
        expect(spec.mounts.find((m) => m.target === CONTAINER.sessionLoginDir)?.readOnly).toBe(loginReadOnly);
      }
      // An ordinary attempt keeps its tmpfs /tmp and the login folder outside HOME.
      const ordinary = attemptContainerSpec({ ...base, writableWorkspace: false, exportDir: staged });
      expect(Object.keys(ordinary.tmpfs ?? {}).sort()).toEqual([CONTAINER.home, "/tmp"].sort());
      expect(ordinary.env.TMPDIR).toBe("/tmp");
    } finally {
      await rm(staged, { recursive: true, force: true });
    }
  });
});
