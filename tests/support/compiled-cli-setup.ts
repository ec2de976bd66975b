/**
 * globalSetup of the tiers whose tests start the compiled runner (tests/support/compiled-cli.ts):
 * it is built here, before any test runs, so no test's own time limit pays for the build.
 */
import { compiledCli } from "./compiled-cli.ts";

export default async function setup(): Promise<void> {
  await compiledCli();
}
