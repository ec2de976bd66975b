/**
 * Everything the demo (and the end-to-end tests) needs besides the runner itself: the demo
 * corpus at its pins, a doc-bridge index per checkout (in the runner's index folder, built with
 * the export's own exclusions: the manifest's answer keys never reach it),
 * the fake claude image built offline, and a test login that holds no real credential.
 */
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { makeDemoCorpus } from "./corpus.ts";
import { buildIndex } from "../mcp/reference-server.ts";
import { exportSourceFor } from "../export/options.ts";
import { loadManifest } from "../manifest/load.ts";
import { DEMO_MANIFEST } from "../util/paths.ts";
import { buildImage } from "../image/build.ts";
import { fakeImageSpec } from "./fake-image.ts";
import type { ContainerRuntime } from "../sandbox/port.ts";

export interface DemoSetup {
  roots: Record<string, string>;
  /** The fake claude image's tag. */
  image: string;
  /** The id of the image that tag named when it was built here (another checkout may retag it later). */
  imageId: string;
  /** Folder holding the test login `.credentials.json` (pass as --claude-config-dir). */
  loginDir: string;
}

/** A login file of the CLI's own shape; the token is a placeholder that authenticates nothing. */
export async function writeTestLogin(dir: string, token = "test-access-token-not-a-real-credential"): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const login = {
    claudeAiOauth: {
      accessToken: token,
      refreshToken: "test-refresh-token-not-a-real-credential",
      expiresAt: Date.parse("2099-01-01T00:00:00Z"),
      scopes: ["user:inference", "user:profile"],
      subscriptionType: "pro",
    },
  };
  const path = join(dir, ".credentials.json");
  await writeFile(path, JSON.stringify(login), { mode: 0o600 });
  await chmod(path, 0o600);
}

export async function prepareDemo(workdir: string, runtime: ContainerRuntime): Promise<DemoSetup> {
  const corpus = await makeDemoCorpus(join(workdir, "corpus"));
  const loaded = await loadManifest(DEMO_MANIFEST);
  for (const [name, { dir }] of Object.entries(corpus)) await buildIndex(dir, { exclude: await exportSourceFor(loaded, name, dir) });
  const image = await buildImage(runtime, await fakeImageSpec());
  const loginDir = join(workdir, "login");
  await writeTestLogin(loginDir);
  return { roots: Object.fromEntries(Object.entries(corpus).map(([name, { dir }]) => [name, dir])), image: image.tag, imageId: image.id, loginDir };
}
