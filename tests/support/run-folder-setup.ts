/**
 * globalSetup of the host and integration tiers: one empty folder per tier and `vitest run` for what
 * its files share or keep until the run ends (tests/host/mcp-fixtures.ts's index folders, the suite's
 * shared demo: tests/support/shared-demo.ts), removed at the end of the run by vitest's own
 * process. A file's own `exit` handler cannot do it: vitest stops each worker with SIGTERM, which
 * runs no `exit` handler, and every run left the index folders of its mcp files in the temp folder.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";

declare module "vitest" {
  export interface ProvidedContext {
    /** The tier's folder of this `vitest run`, removed at its end. */
    runFolder: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const root = await mkdtemp(join(tmpdir(), `sr-${project.name}-run-`));
  project.provide("runFolder", root);
  return () => rm(root, { recursive: true, force: true });
}
