import { hostname } from "node:os";
import { isProcessAlive } from "../util/process.ts";
import { ContainerRuntimeError, hasEngineStorage, type ContainerRuntime, type EngineStorage } from "./port.ts";

export { isProcessAlive };

/** Labels every runner container carries, so a later run can find what a killed run left behind. */
export const LABELS = {
  run: "study-runner.run",
  attempt: "study-runner.attempt",
  /** The runner process that owns the container. */
  pid: "study-runner.pid",
  /** The host that runner process lives on: a pid means nothing on another host sharing the engine. */
  host: "study-runner.host",
} as const;

/** The four ownership labels for a container of this runner process. */
export function runnerLabels(run: string, attempt: string): Record<string, string> {
  return {
    [LABELS.run]: run,
    [LABELS.attempt]: attempt,
    [LABELS.pid]: String(process.pid),
    [LABELS.host]: hostname(),
  };
}

export interface ReapOptions {
  /** Defaults to this machine's hostname. */
  host?: string;
  /** Defaults to `isProcessAlive`. */
  isAlive?: (pid: number) => boolean;
}

export interface ReapResult {
  removed: string[];
  /** Labelled containers left alone because their owner is alive (or its pid label is unreadable). */
  kept: string[];
}

/**
 * Removes this host's labelled containers whose runner process is gone. A container with
 * a pid label that is not a positive integer is kept: fail closed, never remove what we
 * cannot prove is ours and orphaned. A recycled pid keeps an orphan alive until the pid
 * dies too, which errs on the side of not touching another process's container.
 * Then the same for the labelled volumes of the engine-api channel (contract R243), once the
 * containers that used them are gone; a volume a container still mounts is kept for a later reap.
 * Export folders are reaped by the export stage, not here.
 */
export async function reapOrphans(runtime: ContainerRuntime, opts: ReapOptions = {}): Promise<ReapResult> {
  const host = opts.host ?? hostname();
  const isAlive = opts.isAlive ?? isProcessAlive;
  const result: ReapResult = { removed: [], kept: [] };
  for (const c of await runtime.listByLabel({ [LABELS.host]: host })) {
    if (ownerAlive(c.labels, isAlive)) {
      result.kept.push(c.id);
      continue;
    }
    await runtime.remove(c.id);
    result.removed.push(c.id);
  }
  if (hasEngineStorage(runtime)) {
    for (const v of await runtime.listVolumesByLabel({ [LABELS.host]: host })) {
      if (ownerAlive(v.labels, isAlive)) result.kept.push(v.name);
      else if (await removedUnlessInUse(runtime, v.name)) result.removed.push(v.name);
      else result.kept.push(v.name);
    }
  }
  return result;
}

/**
 * Removes a volume unless a container still mounts it: the container's owner was alive when the
 * containers were listed and gone when the volumes were (a runner killed between the two), or the
 * container is another owner's. The engine refuses with a conflict then; a later reap removes it.
 */
async function removedUnlessInUse(runtime: ContainerRuntime & EngineStorage, name: string): Promise<boolean> {
  try {
    await runtime.removeVolume(name);
    return true;
  } catch (err) {
    if (err instanceof ContainerRuntimeError && err.code === "conflict") return false;
    throw err;
  }
}

/** Whether the owner named by the labels may still be alive: an unreadable pid label counts as alive (fail closed). */
function ownerAlive(labels: Record<string, string>, isAlive: (pid: number) => boolean): boolean {
  const raw = labels[LABELS.pid] ?? "";
  const pid = /^[1-9][0-9]*$/.test(raw) ? Number(raw) : undefined;
  return pid === undefined || isAlive(pid);
}
