import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Ahead } from "../../src/util/ahead.ts";
import { removeExport, type ExportOptions, type ExportResult } from "../../src/export/export.ts";
import { makeRunnerFolder } from "../../src/util/orphans.ts";

let parent: string;
let made: string[];
beforeEach(async () => {
  parent = await mkdtemp(join(tmpdir(), "sr-ahead-"));
  made = [];
});
afterEach(() => rm(parent, { recursive: true, force: true }));

/**
 * Stands in for exportAtPin: a real export folder per call, made for one attempt. `made` records
 * the calls in the order they were made (before any await: two makes under way together finish
 * their folders in either order).
 */
async function make(o: ExportOptions): Promise<ExportResult> {
  made.push(o.labels.attempt);
  const dir = await makeRunnerFolder("export", parent);
  return { dir, files: [], excluded: {} as ExportResult["excluded"], answerKeys: [], exportHash: o.labels.attempt, labels: o.labels };
}
const options = (attempt: string): ExportOptions => ({ repoDir: "/nowhere", pin: "0".repeat(40), labels: { run: "r", attempt } });

describe("exports made one attempt ahead (src/util/ahead.ts)", () => {
  it("hands an attempt the export prepared for it, makes one when none was, and never makes one twice", async () => {
    const ahead = new Ahead<ExportResult>((e) => removeExport(e.dir));
    ahead.prepare("1", () => make(options("1")));
    ahead.prepare("1", () => make(options("1")));
    expect((await ahead.take("1", () => make(options("1")))).exportHash).toBe("1");
    expect((await ahead.take("0", () => make(options("0")))).exportHash).toBe("0");
    // Taken already (two attempts that started together): nothing is made for it again.
    ahead.prepare("0", () => make(options("0")));
    expect(made).toEqual(["1", "0"]);
    await ahead.close();
  });

  it("removes on close what was prepared and never taken (the run stopped first), and prepares nothing after", async () => {
    const ahead = new Ahead<ExportResult>((e) => removeExport(e.dir));
    ahead.prepare("2", () => make(options("2")));
    const taken = await ahead.take("1", () => make(options("1")));
    await ahead.close();
    // Only the taken export is left: its attempt removes it.
    expect(await readdir(parent)).toEqual([taken.dir.slice(parent.length + 1)]);
    ahead.prepare("3", () => make(options("3")));
    expect(made).toEqual(["2", "1"]);
  });

  it("leaves a failed export to the attempt that takes it", async () => {
    const ahead = new Ahead<ExportResult>((e) => removeExport(e.dir));
    const failing = async (o: ExportOptions): Promise<ExportResult> => {
      throw new Error(`commit ${o.pin} is not in the repository`);
    };
    ahead.prepare("1", () => failing(options("1")));
    await expect(ahead.take("1", () => make(options("1")))).rejects.toThrow(/is not in the repository/);
    await ahead.close();
  });
});
