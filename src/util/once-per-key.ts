/**
 * One promise per key, made by the first asker and shared with every later one, for what does not
 * change within its owner's life (a pin's export plan, a repository's index key, an export's
 * volume). A promise that fails is forgotten, so the next asker makes it again, and each one that
 * shared it fails with it.
 */
export class OncePerKey<T> {
  private readonly made = new Map<string, Promise<T>>();

  /** The promise kept for `key`, or `make()`'s, kept from now on unless it fails. */
  get(key: string, make: () => Promise<T>): Promise<T> {
    const known = this.made.get(key);
    if (known) return known;
    const made = make();
    this.made.set(key, made);
    made.catch(() => {
      if (this.made.get(key) === made) this.made.delete(key);
    });
    return made;
  }

  /** Every promise kept, forgotten from here on (for its owner to dispose of what they made). */
  drain(): Promise<T>[] {
    const all = [...this.made.values()];
    this.made.clear();
    return all;
  }
}
