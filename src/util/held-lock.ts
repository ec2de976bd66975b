import { readFile, unlink, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import { lock as lockFile } from "proper-lockfile";
import { RefusalError } from "./errors.ts";

/**
 * An exclusive lock between processes on one path (proper-lockfile: a `PATH.lock` folder, kept
 * fresh while held, taken over once not refreshed for `staleMs`), with a record beside it of who
 * holds it, so whoever has to wait or is refused can be told the holder's pid.
 */
export interface HeldLock {
  /** The locked path. */
  readonly path: string;
  /** Set when the lock was lost while held (its folder was removed or went stale). */
  readonly compromised: Error | undefined;
  release(): Promise<void>;
}

export interface HeldLockOptions {
  /** How long to wait for the holder to release the lock before refusing (0: refuse at once). */
  timeoutMs: number;
  pollMs?: number;
  /** A lock not refreshed for this long is taken over (its holder died). */
  staleMs?: number;
  /** Who holds it, e.g. the run id; shown to a process that has to wait. */
  holder?: string;
  /** Called once when the lock is busy and the wait begins, with a description of its holder. */
  onWait?: (holder: string) => void;
  /** Ends the wait (SIGINT/SIGTERM) with a refusal. */
  signal?: AbortSignal;
  /** The refusal's message once the wait is over, given the holder's description. */
  busy: (holder: string) => string;
  /** The refusal's message when `signal` ends the wait. */
  interrupted: (reason: string, holder: string) => string;
}

/** The default `staleMs`: proper-lockfile refreshes a held lock every half of it. */
export const LOCK_STALE_MS = 30_000;

interface HolderRecord {
  pid: number;
  hostname: string;
  holder: string | null;
  since: string;
}

function holderPath(path: string): string {
  // Beside the lock folder, not inside it: proper-lockfile removes its folder with rmdir.
  return `${path}.lock-holder.json`;
}

async function describeHolder(path: string): Promise<string> {
  try {
    const record = JSON.parse(await readFile(holderPath(path), "utf8")) as HolderRecord;
    const who = record.holder ? `run ${record.holder}, ` : "";
    return `held by ${who}pid ${record.pid} on ${record.hostname} since ${record.since}`;
  } catch {
    return "holder unknown";
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Takes the lock on `path` (which need not exist), waiting up to `timeoutMs`, then refuses naming the holder. */
export async function acquireHeldLock(path: string, options: HeldLockOptions): Promise<HeldLock> {
  const deadline = Date.now() + options.timeoutMs;
  const state: { compromised: Error | undefined } = { compromised: undefined };
  let release: () => Promise<void>;
  let waiting = false;
  for (;;) {
    try {
      release = await lockFile(path, {
        realpath: false,
        stale: options.staleMs ?? LOCK_STALE_MS,
        retries: 0,
        // The default throws from a timer and kills the process; record it instead.
        onCompromised: (err) => {
          state.compromised = err;
        },
      });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ELOCKED") throw err;
      if (!waiting) {
        waiting = true;
        options.onWait?.(await describeHolder(path));
      }
      if (options.signal?.aborted) throw new RefusalError(options.interrupted(String(options.signal.reason ?? "a signal"), await describeHolder(path)));
      const left = deadline - Date.now();
      if (left <= 0) throw new RefusalError(options.busy(await describeHolder(path)));
      await sleep(Math.min(options.pollMs ?? 100, left));
    }
  }
  const record: HolderRecord = { pid: process.pid, hostname: hostname(), holder: options.holder ?? null, since: new Date().toISOString() };
  const recordText = JSON.stringify(record);
  await writeFile(holderPath(path), recordText, { mode: 0o600 });
  let released = false;
  return {
    path,
    get compromised() {
      return state.compromised;
    },
    async release() {
      if (released) return;
      released = true;
      // After a takeover (compromised lock) the record is the new holder's: leave it.
      const current = await readFile(holderPath(path), "utf8").catch(() => undefined);
      if (current === recordText) await unlink(holderPath(path)).catch(() => undefined);
      await release().catch((err: unknown) => {
        // Already lost (compromised): nothing left to release.
        if (!state.compromised) throw err;
      });
    },
  };
}
