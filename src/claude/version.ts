import { CLAUDE_CODE_VERSION } from "../profile/pin.ts";

/** The pinned Claude Code version (contract R13), held beside its bundled profile (src/profile/pin.ts). */
export { CLAUDE_CODE_VERSION };

/** The tag `study-runner image build` gives the real Claude Code image of `version`. */
export function claudeCodeImageRef(version: string = CLAUDE_CODE_VERSION): string {
  return `study-runner/claude-code:${version}`;
}
