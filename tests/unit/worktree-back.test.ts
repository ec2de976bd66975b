import { lstat, mkdir, mkdtemp, readdir, readFile, readlink, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import tar from "tar-stream";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { replaceFromArchive } from "../../src/sandbox/worktree-back.ts";

/**
 * A session's worktree coming back from the engine-api channel: what `getArchive` of the
 * container's /workspace gives (entries under `workspace/`), written by the agent, so untrusted.
 */

type Entry = { path: string; type?: "file" | "directory" | "symlink" | "fifo"; body?: string; mode?: number; linkname?: string; size?: number };

function archive(entries: Entry[]): NodeJS.ReadableStream {
  const pack = tar.pack();
  for (const e of entries) {
    const type = e.type ?? "file";
    const header = { name: e.path, type, mode: e.mode ?? (type === "directory" ? 0o755 : 0o644), ...(e.linkname !== undefined ? { linkname: e.linkname } : {}) };
    if (type === "file") pack.entry({ ...header, ...(e.size !== undefined ? { size: e.size } : {}) }, e.body ?? "");
    else pack.entry(header);
  }
  pack.finalize();
  return Readable.from(pack as AsyncIterable<Buffer>, { objectMode: false });
}

let work: string;
let worktree: string;
beforeEach(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-worktree-back-"));
  worktree = join(work, "worktree");
  await mkdir(join(worktree, "src"), { recursive: true });
  await writeFile(join(worktree, "src", "a.js"), "before\n");
  await writeFile(join(worktree, "gone.txt"), "deleted by the agent\n");
});
afterEach(() => rm(work, { recursive: true, force: true }));

describe("a worktree copied back from the engine (contract R245)", () => {
  // contract: R245
  it("replaces the runner's copy whole: edits, new files and folders, deletions, modes and links as links", async () => {
    const problems = await replaceFromArchive(
      archive([
        { path: "workspace/", type: "directory", mode: 0o755 },
        { path: "workspace/src/", type: "directory", mode: 0o750 },
        { path: "workspace/src/a.js", body: "after\n" },
        { path: "workspace/run.sh", body: "#!/bin/sh\n", mode: 0o755 },
        { path: "workspace/notes/", type: "directory" },
        { path: "workspace/notes/NOTES.md", body: "new\n" },
        { path: "workspace/link", type: "symlink", linkname: "/etc/passwd" },
      ]),
      worktree,
    );
    expect(problems).toEqual([]);
    expect(await readFile(join(worktree, "src", "a.js"), "utf8")).toBe("after\n");
    expect(await readFile(join(worktree, "notes", "NOTES.md"), "utf8")).toBe("new\n");
    expect((await readdir(worktree)).sort()).toEqual(["link", "notes", "run.sh", "src"]);
    expect((await lstat(join(worktree, "run.sh"))).mode & 0o777).toBe(0o755);
    expect((await lstat(join(worktree, "src"))).mode & 0o777).toBe(0o750);
    // The link is kept as a link and never followed.
    expect((await lstat(join(worktree, "link"))).isSymbolicLink()).toBe(true);
    expect(await readlink(join(worktree, "link"))).toBe("/etc/passwd");
    // Nothing is left beside the worktree.
    expect((await readdir(work)).sort()).toEqual(["worktree"]);
  });

  // contract: R245
  it("keeps the runner's copy as it was and names the problem: a name that leaves it, an entry beneath a link, a special file, too many bytes or entries", async () => {
    const cases: Array<[Entry[], RegExp]> = [
      [[{ path: "workspace/../escaped", body: "x" }], /not a plain relative name/],
      [
        [
          { path: "workspace/out", type: "symlink", linkname: "/tmp" },
          { path: "workspace/out/x", body: "x" },
        ],
        /beneath a symbolic link/,
      ],
      [[{ path: "workspace/pipe", type: "fifo" }], /a fifo, not a regular file/],
      [[{ path: "workspace/big", body: "x".repeat(2048) }], /past the bound of 1024 bytes/],
      [Array.from({ length: 5 }, (_, k) => ({ path: `workspace/f${k}`, body: "x" })), /past the bound of 4 entries/],
    ];
    for (const [entries, problem] of cases) {
      const problems = await replaceFromArchive(archive([{ path: "workspace/", type: "directory" }, ...entries]), worktree, { bytes: 1024, entries: 4 });
      expect(problems.join("\n")).toMatch(problem);
      expect(await readFile(join(worktree, "src", "a.js"), "utf8")).toBe("before\n");
      expect(await readFile(join(worktree, "gone.txt"), "utf8")).toBe("deleted by the agent\n");
      expect((await readdir(work)).sort()).toEqual(["worktree"]);
    }
  });
});
