/**
 * The fake claude image, `study-runner/fake-claude:<version>`: the real image's layout with the
 * scripted stand-in claude.cjs (beside this file) as `claude`. A stand-in for the CLI, for the
 * demo, CI's offline replay, benches and tests; never what a study of the real CLI runs.
 */
import { resolve } from "node:path";
import { activeProfile } from "../../profile/load.ts";
import { CLAUDE_CODE_VERSION } from "../../claude/version.ts";
import { fileSha256, type ImageSpec } from "../../image/context.ts";
import { baseLayout, IMAGE_LABELS, IMAGE_LAYOUT, imageSpec, type BaseImageInput } from "../../image/specs.ts";
import { PROJECT_ROOT } from "../../util/paths.ts";

/**
 * The stand-in's script, run as /usr/local/bin/claude in the fake image (and on the host by quick
 * tests). Named from the project root, not from this module: tsc compiles this file into dist/ but
 * copies no .mjs there, and the installed package ships the script where the clone has it, in src/.
 */
export const FAKE_CLAUDE_SCRIPT = resolve(PROJECT_ROOT, "src", "stand-ins", "fake-claude", "claude.cjs");

/** Where the fake image holds the measured price table (read by claude.cjs). */
export const FAKE_PRICES_PATH = "/opt/study-runner/cli-prices.json";
/** Where the fake image holds the measured init events (read by claude.cjs). */
export const FAKE_INIT_PATH = "/opt/study-runner/cli-init.json";

export interface FakeImageInput extends BaseImageInput {
  /** The version the fake reports by default; also the tag. */
  version?: string;
  /** Default: claude.cjs beside this file. */
  script?: string;
}

/** `study-runner/fake-claude:<version>`: the same layout with the scripted fake as `claude`. */
export async function fakeClaudeImageSpec(input: FakeImageInput = {}): Promise<ImageSpec> {
  const version = input.version ?? CLAUDE_CODE_VERSION;
  const script = input.script ?? FAKE_CLAUDE_SCRIPT;
  const layout = await baseLayout(input, []);
  layout.files.push({ path: IMAGE_LAYOUT.claude, mode: 0o755, source: { hostPath: script } });
  // The fake prices every model as the pinned CLI does, from the one measured table, so it can
  // answer as any model (the adjudicator's too) with a cost the runner's check accepts.
  layout.files.push({ path: FAKE_PRICES_PATH, mode: 0o644, source: { content: JSON.stringify(activeProfile().prices.models) } });
  // Its init events likewise: the measured init of each kind of run (contract R125).
  layout.files.push({ path: FAKE_INIT_PATH, mode: 0o644, source: { content: JSON.stringify(activeProfile().initEvents) } });
  return imageSpec(`study-runner/fake-claude:${version}`, layout, {
    [IMAGE_LABELS.kind]: "fake-claude",
    [IMAGE_LABELS.claudeVersion]: version,
    [IMAGE_LABELS.claudeSha256]: await fileSha256(script),
  });
}
