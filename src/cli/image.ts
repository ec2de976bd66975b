import { DockerRuntime } from "../sandbox/docker.ts";
import { buildImage, probeVersion } from "../image/build.ts";
import { CLAUDE_CODE_VERSION } from "../claude/version.ts";
import { claudeCodeImageSpec, findClaudeBinary } from "../image/specs.ts";
import { fakeImageSpec } from "../demo/fake-image.ts";
import { ensureClaudeBinary } from "../image/install.ts";
import { ExitCode, RefusalError } from "../util/errors.ts";

export async function imageBuildCommand(flags: { fake?: boolean; claudeBinary?: string; install?: boolean; version?: string }): Promise<number> {
  const runtime = new DockerRuntime();
  const version = flags.version ?? CLAUDE_CODE_VERSION;
  let spec;
  if (flags.fake) {
    spec = await fakeImageSpec({ version });
  } else {
    const binary = flags.claudeBinary ? flags.claudeBinary : flags.install ? (await ensureClaudeBinary({ version })).path : (await findClaudeBinary({ version }))?.path;
    if (!binary) {
      throw new RefusalError(
        `no Claude Code ${version} binary found; run \`study-runner image build --install${flags.version !== undefined ? ` --version ${version}` : ""}\` (installs @anthropic-ai/claude-code-linux-x64@${version} from the npm registry into the cache) or pass --claude-binary PATH`,
      );
    }
    spec = await claudeCodeImageSpec({ claudeBinary: binary, version });
  }
  const built = await buildImage(runtime, spec);
  const probed = await probeVersion(runtime, built.tag);
  process.stdout.write(
    JSON.stringify({ tag: built.tag, id: built.id, built: built.built, contextDigest: built.contextDigest, version: probed.version, binarySha256: probed.binarySha256 }, null, 2) + "\n",
  );
  return ExitCode.ok;
}

export async function imageProbeCommand(ref: string): Promise<number> {
  const probed = await probeVersion(new DockerRuntime(), ref);
  process.stdout.write(JSON.stringify({ image: ref, ...probed }, null, 2) + "\n");
  return ExitCode.ok;
}
