import { probeSpec } from "../image/build.ts";
import type { ContainerRuntime } from "../sandbox/port.ts";

/**
 * Runs the image's `claude <args>` (e.g. `--help`) in a throwaway container with the version
 * probe's hardening (network none, read-only root, no capabilities) and returns its stdout, so a
 * version's flags are read from that version's own binary (contract R222).
 */
export async function claudeInImage(runtime: ContainerRuntime, image: string, args: string[], labels: Record<string, string>): Promise<{ exitCode: number; stdout: string }> {
  const id = await runtime.create({ ...probeSpec(image, labels), cmd: args });
  try {
    const { stdout } = await runtime.attach(id);
    const chunks: Buffer[] = [];
    stdout.on("data", (d: Buffer) => chunks.push(d));
    const ended = new Promise((r) => stdout.on("end", r));
    await runtime.start(id);
    const exit = await runtime.wait(id);
    await ended;
    return { exitCode: exit.exitCode, stdout: Buffer.concat(chunks).toString("utf8") };
  } finally {
    await runtime.remove(id);
  }
}
