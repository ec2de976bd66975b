import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm, symlink, truncate, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readEvidenceFile, transcriptNames } from "../../src/ledger/transcripts.ts";

// The one reader of evidence files: every kind of file a hand could put where a transcript
// belongs is named, within a bound of time, and only a regular file is read.

let dir = "";
let server: Server;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "sr-evidence-"));
  await writeFile(join(dir, "0000.jsonl"), "{}\n", { mode: 0o600 });
  await mkdir(join(dir, "0001.jsonl"));
  execFileSync("mkfifo", [join(dir, "0002.jsonl")]);
  await symlink(join(dir, "0000.jsonl"), join(dir, "0003.jsonl"));
  await writeFile(join(dir, "0004.jsonl"), "", { mode: 0o600 });
  await truncate(join(dir, "0004.jsonl"), 65);
  server = createServer();
  await new Promise<void>((resolve) => server.listen(join(dir, "0005.jsonl"), resolve));
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await rm(dir, { recursive: true, force: true });
});

describe("readEvidenceFile", () => {
  // contract: R183
  it("reads a regular file within the bound and names a folder, a FIFO, a link, a socket, a file above the bound and a missing file", async () => {
    const read = (name: string, followLinks = false) => readEvidenceFile(join(dir, name), { maxBytes: 64, followLinks });
    expect(await read("0000.jsonl")).toMatchObject({ kind: "file", bytes: Buffer.from("{}\n"), mode: 0o600 });
    expect(await read("0001.jsonl")).toMatchObject({ kind: "refused", problem: "is a folder, not a regular file" });
    // Without O_NONBLOCK this open would wait for a writer for ever.
    expect(await read("0002.jsonl")).toMatchObject({ kind: "refused", problem: "is a FIFO, not a regular file" });
    expect(await read("0003.jsonl")).toMatchObject({ kind: "refused", problem: "is a symbolic link; evidence is never read through a link" });
    expect(await read("0003.jsonl", true)).toMatchObject({ kind: "file", bytes: Buffer.from("{}\n") });
    expect(await read("0004.jsonl")).toMatchObject({ kind: "refused", problem: "is 65 bytes, above the bound of 64 bytes" });
    expect(await read("0005.jsonl")).toMatchObject({ kind: "refused", problem: "is a socket, not a regular file" });
    expect(await read("0006.jsonl")).toMatchObject({ kind: "missing" });
  });

  // contract: R183
  it("lists only transcripts' names, naming every other entry, and does not read a transcripts folder that is a link", async () => {
    const ledger = join(dir, "ledger.json");
    await mkdir(`${ledger}.transcripts`);
    for (const name of ["0000.jsonl", "s0001-c0002.jsonl", "notes.txt", "0000.jsonl.bak"]) await writeFile(join(`${ledger}.transcripts`, name), "", { mode: 0o600 });
    const listed = await transcriptNames(ledger);
    expect(listed.names).toEqual(["0000.jsonl", "s0001-c0002.jsonl"]);
    expect(listed.problems).toEqual([
      `${ledger}.transcripts/0000.jsonl.bak: is not a transcript's name (NNNN.jsonl or sNNNN-cNNNN.jsonl); it was not made by the runner`,
      `${ledger}.transcripts/notes.txt: is not a transcript's name (NNNN.jsonl or sNNNN-cNNNN.jsonl); it was not made by the runner`,
    ]);
    const linked = join(dir, "linked.json");
    await symlink(`${ledger}.transcripts`, `${linked}.transcripts`);
    expect(await transcriptNames(linked)).toEqual({ names: [], problems: [`${linked}.transcripts: is a symbolic link, not the transcripts folder the runner makes; its contents are not read`] });
  });
});
