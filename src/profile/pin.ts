/**
 * The pinned Claude Code version (contract R13): one CLI version for every attempt; the runner
 * refuses an image whose `claude --version` reports another. Every default in the CLI, the image
 * tags and the doctor's fixes read it (through src/claude/version.ts); its calibration profile is
 * bundled beside this file (contract R220). Moving the pin: docs/conformance.md.
 */
export const CLAUDE_CODE_VERSION = "2.1.296";
