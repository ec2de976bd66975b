/**
 * The pinned Claude Code version (contract R13): one CLI version for every attempt; the runner refuses an image whose `claude --version` reports another. Every default
 * in the CLI, the image tags and the doctor's fixes read it from here.
 */
export const CLAUDE_CODE_VERSION = "2.1.296";

/** The tag `study-runner image build` gives the real Claude Code image of `version`. */
export function claudeCodeImageRef(version: string = CLAUDE_CODE_VERSION): string {
  return `study-runner/claude-code:${version}`;
}
