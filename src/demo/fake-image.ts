/**
 * The fake claude image as the demo and `image build --fake` build it: the one door from the
 * product's commands to the CLI stand-in (src/stand-ins/fake-claude), so nothing else in src/
 * leans on a stand-in (`npm run deps`).
 */
import { fakeClaudeImageSpec, type FakeImageInput } from "../stand-ins/fake-claude/image.ts";
import type { ImageSpec } from "../image/context.ts";

/** The spec of `study-runner/fake-claude:<version>` (default: the pinned version). */
export function fakeImageSpec(input: FakeImageInput = {}): Promise<ImageSpec> {
  return fakeClaudeImageSpec(input);
}
