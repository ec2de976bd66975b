import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { mark, TIMING_FILE_ENV } from "../../src/util/marks.ts";

const saved = process.env[TIMING_FILE_ENV];
afterEach(() => {
  if (saved === undefined) delete process.env[TIMING_FILE_ENV];
  else process.env[TIMING_FILE_ENV] = saved;
});

describe("timing marks", () => {
  it("append one line per mark, in order and with rising times, to the file the environment names", async () => {
    const dir = await mkdtemp(join(tmpdir(), "marks-"));
    try {
      const file = join(dir, "marks.jsonl");
      process.env[TIMING_FILE_ENV] = file;
      const before = Date.now();
      mark("one");
      mark("two");
      const lines = (await readFile(file, "utf8"))
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { mark: string; at: number });
      expect(lines.map((l) => l.mark)).toEqual(["one", "two"]);
      expect(lines[0]!.at).toBeGreaterThanOrEqual(before - 1);
      expect(lines[1]!.at).toBeGreaterThanOrEqual(lines[0]!.at);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
