/**
 * The study on the in-memory runtime, for the unit tests of its run kinds: an image whose
 * `claude --version` answers the pin and whose attempts run a test function, and a study config
 * over the demo corpus's repository-arm attempts (no doc-bridge server is started).
 */
import { join } from "node:path";
import { FakeRuntime, type FakeProcess } from "./fake-runtime.ts";
import type { StudyConfig } from "../../src/study/run.ts";
import type { LoadedManifest } from "../../src/manifest/load.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { IMAGE_LABELS } from "../../src/image/specs.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { MODEL } from "../unit/transcript-fixtures.ts";

export const UNIT_IMAGE = "study-runner/claude-code:unit";

/**
 * A runtime whose `--version` probe answers the pinned version and whose attempt containers run
 * `attempt(index, proc)`. The image is labelled the fake claude image unless `fakeImage` is false
 * (then its CLI counts as one that would send real requests).
 */
export function fakeClaudeRuntime(attempt: (n: number, proc: FakeProcess) => Promise<number> | number, o: { fakeImage?: boolean } = {}): FakeRuntime {
  const runtime = new FakeRuntime({
    program: async (proc) => {
      if (proc.spec.cmd.includes("--version")) {
        proc.stdout.write(`${CLAUDE_CODE_VERSION} (Claude Code)\n`);
        return 0;
      }
      return attempt(Number(proc.spec.env.STUDY_RUNNER_ATTEMPT), proc);
    },
  });
  runtime.addImage(UNIT_IMAGE, { [IMAGE_LABELS.claudeSha256]: "a".repeat(64), ...(o.fakeImage === false ? {} : { [IMAGE_LABELS.kind]: "fake-claude" }) });
  return runtime;
}

/** A study of the first `attempts` repository-arm attempts of the demo plan, with a private ledger in `work`. */
export function unitStudyConfig(o: {
  work: string;
  name: string;
  loaded: LoadedManifest;
  roots: ReadonlyMap<string, string>;
  loginDir: string;
  attempts: number;
  overrides?: Partial<StudyConfig>;
}): StudyConfig {
  const plan = planStudy(o.loaded.manifest, "full")
    .filter((a) => a.arm === "repository")
    .slice(0, o.attempts)
    .map((a, index) => ({ ...a, index }));
  return {
    loaded: o.loaded,
    mode: "full",
    plan,
    fullPlanSize: 36,
    roots: o.roots,
    model: MODEL,
    capUsd: 1,
    attemptBudgetUsd: 0.1,
    output: join(o.work, `${o.name}.ledger.json`),
    image: UNIT_IMAGE,
    expectedCliVersion: CLAUDE_CODE_VERSION,
    isolation: "offline",
    docBridgeCommand: ["false"],
    claudeConfigDir: o.loginDir,
    quiet: true,
    ...o.overrides,
  };
}
