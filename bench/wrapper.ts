/**
 * The entrypoint's price: what starting the CLI through docker/helpers/with-relay.cjs costs a
 * container, next to starting the CLI alone and next to a native wrapper doing the relay's part
 * (bench/fixtures/native-relay.c, compiled here with the host's `cc`; a fixture, not shipped).
 *
 * Three containers of the fake image, through the docker CLI, alike in everything but the
 * entrypoint: network none, one CPU (an attempt's default), this run's work folder bind-mounted
 * read-only at /bench, ANTHROPIC_BASE_URL set. Each runs `claude --version`:
 * - floor: the CLI alone (the attempt benchmark's floor, plus the mount and the CPU limit);
 * - node: `node with-relay.cjs --api <socket> -- claude --version`, the attempt's entrypoint;
 * - native: `native-relay --api <socket> -- claude --version`.
 * Rounds interleave the three, so a change in the machine's load hits all alike.
 *
 * No target: it tells how much of the attempt benchmark's ratio is the wrapper being a second
 * Node process, which no change inside with-relay.cjs can remove.
 */
import { execFile } from "node:child_process";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { DockerRuntime } from "../src/sandbox/docker.ts";
import { buildImage } from "../src/image/build.ts";
import { IMAGE_LAYOUT } from "../src/image/specs.ts";
import { fakeClaudeImageSpec } from "../src/stand-ins/fake-claude/image.ts";
import { PROJECT_ROOT } from "../src/util/paths.ts";
import { measure, note, ratio, round, runMain, stats } from "./lib.ts";

const execFileP = promisify(execFile);
const ROUNDS = 10;
const PER_ROUND = 2;
const PORT = 8080;

runMain("wrapper", async () => {
  const work = await mkdtemp(join(tmpdir(), "study-runner-bench-wrapper-"));
  try {
    // uid 1000 in the container reads the fixture.
    await chmod(work, 0o755);
    note("wrapper: compiling bench/fixtures/native-relay.c with cc");
    const native = join(work, "native-relay");
    try {
      await execFileP("cc", ["-O2", "-static", "-pthread", "-o", native, join(PROJECT_ROOT, "bench", "fixtures", "native-relay.c")]);
    } catch (err) {
      throw new Error(
        `cannot compile the native fixture with cc -static (a C compiler and the C library's static archive are needed: Debian's gcc and libc6-dev): ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    const image = (await buildImage(new DockerRuntime(), await fakeClaudeImageSpec())).id;
    const socket = "/bench/api.sock";
    const common = ["run", "--rm", "--network", "none", "--cpus", "1", "-v", `${work}:/bench:ro`, "-e", `ANTHROPIC_BASE_URL=http://127.0.0.1:${PORT}`];
    const variants = {
      floor: [...common, image, "--version"],
      node: [...common, "--entrypoint", "/usr/local/bin/node", image, `${IMAGE_LAYOUT.helpers}/with-relay.cjs`, "--api", socket, "--", "claude", "--version"],
      native: [...common, "--entrypoint", "/bench/native-relay", image, "--api", socket, "--", "claude", "--version"],
    };
    const samples: Record<keyof typeof variants, number[]> = { floor: [], node: [], native: [] };
    for (let r = 0; r < ROUNDS; r++) {
      note(`wrapper: round ${r + 1}/${ROUNDS}`);
      for (const [name, args] of Object.entries(variants) as [keyof typeof variants, string[]][]) {
        samples[name].push(
          ...(await measure(
            async () => {
              const { stdout } = await execFileP("docker", args);
              if (!stdout.includes("(Claude Code)")) throw new Error(`${name}: the CLI did not print its version: ${stdout.slice(0, 200)}`);
            },
            { warmup: r === 0 ? 1 : 0, runs: PER_ROUND },
          )),
        );
      }
    }
    const floor = stats(samples.floor);
    const node = stats(samples.node);
    const nativeStats = stats(samples.native);
    return {
      unit: "ms",
      floorMs: floor,
      nodeWrapperMs: node,
      nativeWrapperMs: nativeStats,
      nodeWrapperCostMs: round(node.median - floor.median, 1),
      nativeWrapperCostMs: round(nativeStats.median - floor.median, 1),
      nodeOverFloor: ratio(node.median, floor.median),
      nativeOverFloor: ratio(nativeStats.median, floor.median),
      nodeOverNative: ratio(node.median, nativeStats.median),
      containers: "fake image, claude --version, network none, --cpus 1, the same read-only mount",
    };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
});
