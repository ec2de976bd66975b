import { setTimeout as sleep } from "node:timers/promises";
import type { ContainerRuntime } from "./port.ts";

/**
 * Stops a container: a SIGTERM, then after `graceMs` (0: at once) a SIGKILL. No error when it has
 * already ended or is gone (`PreparedSandbox.stop` of both Docker channels).
 */
export async function stopContainer(runtime: ContainerRuntime, id: string, graceMs = 0): Promise<void> {
  if (graceMs > 0) {
    await runtime.kill(id, "SIGTERM");
    const ended = runtime.wait(id).then(() => "ended" as const);
    ended.catch(() => undefined);
    if ((await Promise.race([ended, sleep(graceMs, "grace" as const)])) === "ended") return;
  }
  await runtime.kill(id);
}
