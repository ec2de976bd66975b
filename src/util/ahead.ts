/**
 * Things made one unit ahead: while an attempt's container runs, the runner is idle, so what the
 * next attempt needs from the host (its export, its doc-bridge engine's sandbox) is made then,
 * and its own setup does not wait for git (docs/performance.md, "attempt"). Each thing is still
 * made for its unit alone and taken by that unit only; what is prepared but never taken (the run
 * stopped first) is disposed of by `close`, and a runner that dies leaves folders named with its
 * pid, which the next run's reaper removes.
 */
export class Ahead<T> {
  private readonly prepared = new Map<string, Promise<T>>();
  /** Units that took theirs: preparing one again would make one nobody disposes of until `close`. */
  private readonly taken = new Set<string>();
  private closed = false;

  constructor(private readonly dispose: (thing: T) => Promise<unknown>) {}

  /** Starts making the unit `key`'s thing now, unless it is under way or taken. */
  prepare(key: string, make: () => Promise<T>): void {
    if (this.closed || this.prepared.has(key) || this.taken.has(key)) return;
    const made = make();
    // A failure is the taking unit's to report (or nobody's, once the run stopped).
    made.catch(() => {});
    this.prepared.set(key, made);
  }

  /** The thing prepared for `key`, or one made now; the caller owns (and disposes of) it. */
  take(key: string, make: () => Promise<T>): Promise<T> {
    const made = this.prepared.get(key);
    this.prepared.delete(key);
    this.taken.add(key);
    return made ?? make();
  }

  /** Disposes of everything prepared and not taken; nothing is prepared afterwards. */
  async close(): Promise<void> {
    this.closed = true;
    const left = [...this.prepared.values()];
    this.prepared.clear();
    await Promise.all(left.map((made) => made.then((thing) => this.dispose(thing)).catch(() => {})));
  }
}
