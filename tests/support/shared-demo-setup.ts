/**
 * The integration tier's globalSetup: one empty folder per `vitest run` for the suite's shared demo
 * (tests/support/shared-demo.ts makes the demo in it when a test first asks), removed at the end.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const root = await mkdtemp(join(tmpdir(), "sr-shared-demo-"));
  project.provide("sharedDemoRoot", root);
  return () => rm(root, { recursive: true, force: true });
}
