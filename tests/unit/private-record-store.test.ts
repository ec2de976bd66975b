/**
 * The one store of the runner's private records (src/ledger/store.ts, PrivateRecordStore), on a
 * kind of its own: the ledger, the adjudication record and the session ledger are instances of it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { InvalidLedgerError, LEDGER_MODE, PrivateRecordStore } from "../../src/ledger/store.ts";
import { SESSION_LEDGER_STORE } from "../../src/session/store.ts";
import { RECORD_STORE } from "../../src/adjudicate/store.ts";
import { UsageError } from "../../src/util/errors.ts";

const NoteSchema = z.strictObject({ noteId: z.string(), items: z.array(z.number().int()), count: z.number().int().optional() });
type Note = z.output<typeof NoteSchema>;

const NOTES = new PrivateRecordStore({
  noun: "note",
  schema: NoteSchema,
  readFix: "check --note",
  id: { field: "noteId", of: "note" },
  derive: (n: Note) => ({ ...n, count: n.items.length }),
});

let dir: string;
const context = () => ({ checkouts: [], projectRoot: join(dir, "project") });
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "sr-unit-store-"));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe("a private record store", () => {
  it("creates the file once, mode 0600, with the derived fields, and refuses a second create naming the kind", async () => {
    const path = join(dir, "a.json");
    const handle = await NOTES.create(path, { noteId: "n1", items: [1, 2] }, context());
    expect(handle).toEqual({ path, id: "n1" });
    expect((await stat(path)).mode & 0o777).toBe(LEDGER_MODE);
    expect(await readFile(path, "utf8")).toBe(`${JSON.stringify({ noteId: "n1", items: [1, 2], count: 2 }, null, 2)}\n`);
    await expect(NOTES.create(path, { noteId: "n2", items: [] }, context())).rejects.toThrow(/already exists; a note is never overwritten or reused/);
  });

  it("writes only a valid record of the id that created it", async () => {
    const path = join(dir, "b.json");
    const handle = await NOTES.create(path, { noteId: "n1", items: [] }, context());
    await NOTES.write(handle, { noteId: "n1", items: [3] });
    expect(await NOTES.read(path)).toEqual({ noteId: "n1", items: [3], count: 1 });
    await expect(NOTES.write(handle, { noteId: "n2", items: [] })).rejects.toThrow(/refusing to write the note .*: noteId 'n2' is not the note 'n1' that created it/);
    const bad = await NOTES.write(handle, { noteId: "n1", items: [1.5] }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(InvalidLedgerError);
    expect((bad as InvalidLedgerError).problems).toEqual(["items[0]: Invalid input: expected int, received number"]);
  });

  it("reads back naming the file and each field, never quoting the content", async () => {
    const torn = join(dir, "torn.json");
    await writeFile(torn, '{"noteId": "secret answer');
    const err = await NOTES.read(torn).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UsageError);
    expect((err as Error).message).toBe(`note ${torn} is not valid JSON; it was not written by this runner or is damaged`);
    const foreign = join(dir, "foreign.json");
    await writeFile(foreign, JSON.stringify({ noteId: 7, items: [] }));
    await expect(NOTES.read(foreign)).rejects.toThrow(`note ${foreign} does not match its schema:\n  noteId: Invalid input: expected string, received number`);
    await expect(NOTES.read(join(dir, "missing.json"))).rejects.toThrow(/^cannot read note .*missing\.json: ENOENT; check --note$/);
  });

  it("is the store of the session ledger and of the adjudication record", async () => {
    const path = join(dir, "not-a-session-ledger.json");
    await writeFile(path, "{}");
    await expect(SESSION_LEDGER_STORE.read(path)).rejects.toThrow(/^session ledger .* does not match its schema:\n {2}kind: /);
    await expect(RECORD_STORE.read(path)).rejects.toThrow(/^adjudication record .* does not match its schema:\n {2}schemaVersion: /);
  });
});
