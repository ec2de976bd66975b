import { exportAtPin, removeExport, type ExportOptions, type ExportResult } from "./export.ts";

/**
 * Exports made one attempt ahead: while an attempt runs, the export of the next one is written,
 * so its own setup does not wait for git (docs/performance.md, "attempt"). Each export is still
 * made for its attempt alone, fresh, from the pinned blobs (contract R58); what is prepared but
 * never taken (the run stopped first) is removed by `close`, and a runner that dies leaves an
 * export folder the next run's reaper removes, as for any export.
 */
export class ExportsAhead {
  private readonly prepared = new Map<string, Promise<ExportResult>>();
  /** Units that took their export: preparing theirs again would make one nobody removes until `close`. */
  private readonly taken = new Set<string>();
  private closed = false;

  constructor(private readonly make: (options: ExportOptions) => Promise<ExportResult> = exportAtPin) {}

  /** Starts the export of the unit `key` now, unless it is already under way. */
  prepare(key: string, options: ExportOptions): void {
    if (this.closed || this.prepared.has(key) || this.taken.has(key)) return;
    const made = this.make(options);
    // A failure is the taking attempt's to report (or nobody's, once the run stopped).
    made.catch(() => {});
    this.prepared.set(key, made);
  }

  /** The export prepared for `key`, or a fresh one made now; the caller owns (and removes) it. */
  take(key: string, options: ExportOptions): Promise<ExportResult> {
    const made = this.prepared.get(key);
    this.prepared.delete(key);
    this.taken.add(key);
    return made ?? this.make(options);
  }

  /** Removes every export prepared and not taken; nothing is prepared afterwards. */
  async close(): Promise<void> {
    this.closed = true;
    const left = [...this.prepared.values()];
    this.prepared.clear();
    await Promise.all(left.map((made) => made.then((e) => removeExport(e.dir)).catch(() => {})));
  }
}
