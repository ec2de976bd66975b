import { RefusalError } from "../util/errors.ts";
import { acquireLoginLock, inspectLogin, resolveLogin, type LoginLocation, type LoginLock, type LoginLockOptions } from "./login.ts";

/**
 * The CLI login of a run kind's units, one way for every kind that runs the CLI in a container
 * (the study's attempts, the adjudicator's items, the sessions' calls) and for the gateway's read
 * of the real token: the login is checked before anything is reserved, and each unit takes the
 * login lock with the same wait, the same takeover of a dead run's lock and the same note while it
 * waits.
 */

/** How long a unit waits for another run to release the login before refusing (the config's `loginLockTimeoutMs` otherwise). */
export const LOGIN_LOCK_TIMEOUT_MS = 10 * 60_000;

/** Who takes the login lock for a unit, and the run's lock timings. */
export interface UnitLock {
  /** How long to wait for another run (LOGIN_LOCK_TIMEOUT_MS when undefined). */
  timeoutMs?: number;
  /** After how long a dead run's lock is taken over (acquireLoginLock's default, 30 s, when undefined). */
  staleMs?: number;
  /** The run's id, shown to a run that has to wait. */
  holder?: string;
  /** Ends the wait (SIGINT/SIGTERM) with a refusal. */
  signal?: AbortSignal;
  /** Where the run says that a unit is waiting for the login (its progress lines). */
  note?: (line: string) => void;
}

/** The lock options of a unit's login lock. */
export function unitLockOptions(o: UnitLock): LoginLockOptions {
  return {
    timeoutMs: o.timeoutMs ?? LOGIN_LOCK_TIMEOUT_MS,
    staleMs: o.staleMs,
    holder: o.holder,
    signal: o.signal,
    // Not silent: a dead run's lock is only taken over once it is stale (30 s).
    onWait: (holder) => o.note?.(`waiting for the CLI login (${holder})`),
  };
}

/**
 * A unit's hold on the login, taken before its reservation: a unit that never gets the login
 * (another run holds it past the timeout, or a signal ends the wait) has reserved nothing.
 */
export function lockUnitLogin(login: LoginLocation, o: UnitLock): Promise<LoginLock> {
  return acquireLoginLock(login, unitLockOptions(o));
}

/** The run's login (the flag's folder, else the environment's, else `~/.claude`), refused when it cannot be used; nothing is reserved yet. */
export async function usableLogin(configDir: string | undefined): Promise<LoginLocation> {
  const login = resolveLogin({ configDir });
  const facts = await inspectLogin(login);
  if (facts.problems.length) throw new RefusalError(facts.problems.join("\n"), facts.problems);
  return login;
}
