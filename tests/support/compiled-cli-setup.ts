/**
 * globalSetup of the tiers whose runner starts use the compiled runner (tests/support/compiled-cli.ts):
 * it is built here, with the demo's doc-bridge indexes for it, before any test runs, so no test's
 * own time limit pays for the build; and the tier is told to use it (`runCli`, tests/support/cli.ts).
 */
import type { TestProject } from "vitest/node";
import { compiledRunner } from "./compiled-cli.ts";

export default async function setup(project: TestProject): Promise<void> {
  await compiledRunner();
  project.provide("compiledRunner", true);
}
