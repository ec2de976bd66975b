import { mkdir, mkdtemp, open, readFile, realpath, rename, rm, unlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createLedger, writeLedger } from "../../src/ledger/store.ts";
import type { FileLayer } from "../../src/util/atomic-file.ts";
import { reservedObservation, sampleLedger } from "../support/ledger-sample.ts";

/**
 * The ledger's write points are durable in the documented order (docs/reliability.md): the
 * ledger is created exclusively, written, fsync'd, then its folder fsync'd; every later write goes
 * to a temp file that is written and fsync'd before it is renamed over the ledger, and the folder
 * is fsync'd after the rename. A file layer handed in records every call on the real file system.
 */

let base: string;
let dir: string;
beforeEach(async () => {
  base = await realpath(await mkdtemp(join(tmpdir(), "ledger-fsync-")));
  dir = join(base, "private");
  await mkdir(dir);
});
afterEach(() => rm(base, { recursive: true, force: true }));

function recordingFiles(calls: string[]): FileLayer {
  const name = (path: string) => (path === dir ? "<folder>" : basename(path).endsWith(".tmp") ? "<temp>" : basename(path));
  return {
    async open(path, flags, mode) {
      const handle = await open(path, flags, mode);
      calls.push(`open ${name(path)} ${flags}`);
      const wrap = <K extends "sync" | "writeFile" | "close" | "chmod">(k: K) => {
        const original = handle[k].bind(handle) as (...a: unknown[]) => Promise<unknown>;
        (handle as unknown as Record<string, unknown>)[k] = async (...a: unknown[]) => {
          const r = await original(...a);
          calls.push(`${k} ${name(path)}`);
          return r;
        };
      };
      wrap("sync");
      wrap("writeFile");
      wrap("close");
      wrap("chmod");
      return handle;
    },
    async rename(from, to) {
      await rename(from, to);
      calls.push(`rename ${name(from)} -> ${name(to)}`);
    },
    async unlink(path) {
      await unlink(path);
      calls.push(`unlink ${name(path)}`);
    },
  };
}

/** The calls that carry durability, in order; repeated closes (the finally's) dropped. */
const durable = (calls: string[]) => calls.filter((c) => /^(open|writeFile|sync|rename)/.test(c));

describe("the ledger's write points fsync in the documented order", () => {
  it("creation: exclusive open, write, fsync of the file, then fsync of its folder", async () => {
    const calls: string[] = [];
    await createLedger(join(dir, "ledger.json"), sampleLedger(), { checkouts: [], projectRoot: join(base, "project") }, recordingFiles(calls));
    expect(durable(calls)).toEqual(["open ledger.json wx", "writeFile ledger.json", "sync ledger.json", "open <folder> r", "sync <folder>"]);
    expect(calls.indexOf("close ledger.json")).toBeLessThan(calls.indexOf("open <folder> r"));
  });

  it("every later write: temp written and fsync'd, closed, renamed over the ledger, then the folder fsync'd", async () => {
    const handle = await createLedger(join(dir, "ledger.json"), sampleLedger(), { checkouts: [], projectRoot: join(base, "project") });
    for (const ledger of [
      sampleLedger({ observations: [reservedObservation(0)], budget: { capUsd: 1, attemptBudgetUsd: 0.1, reservedUsd: 0.1, spentUsd: 0.1, cumulativeCapExceeded: false } }),
      sampleLedger({ status: "blocked", statusReason: "stopped" }),
    ]) {
      const calls: string[] = [];
      await writeLedger(handle, ledger, recordingFiles(calls));
      expect(durable(calls)).toEqual(["open <temp> wx", "writeFile <temp>", "sync <temp>", "rename <temp> -> ledger.json", "open <folder> r", "sync <folder>"]);
      expect(calls.indexOf("close <temp>")).toBeLessThan(calls.indexOf("rename <temp> -> ledger.json"));
      expect(JSON.parse(await readFile(handle.path, "utf8")).status).toBe(ledger.status);
    }
  });
});
