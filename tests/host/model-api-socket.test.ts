import { createServer, type Server } from "node:net";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { assertModelApiSocket } from "../../src/transport/cli/model-api.ts";
import { RefusalError } from "../../src/util/errors.ts";

const dirs: string[] = [];
const servers: Server[] = [];

afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function socketIn(dir: string, name = "api.sock"): Promise<string> {
  const path = join(dir, name);
  const server = createServer();
  servers.push(server);
  await new Promise<void>((r) => server.listen(path, r));
  return path;
}

async function folder(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), "sr-model-api-"));
  dirs.push(d);
  return d;
}

describe("assertModelApiSocket (preflight of --model-api-socket)", () => {
  it("accepts a listening unix socket alone in its folder", async () => {
    await expect(assertModelApiSocket(await socketIn(await folder()))).resolves.toBeUndefined();
  });

  it("refuses a folder that holds anything besides the socket: the folder is mounted into every attempt", async () => {
    const dir = await folder();
    const socket = await socketIn(dir);
    await writeFile(join(dir, "notes.txt"), "private");
    await expect(assertModelApiSocket(socket)).rejects.toThrow(/also holds notes\.txt/);
  });

  it("refuses a missing socket, a regular file and a relative path", async () => {
    const dir = await folder();
    await expect(assertModelApiSocket(join(dir, "api.sock"))).rejects.toBeInstanceOf(RefusalError);
    await writeFile(join(dir, "api.sock"), "");
    await expect(assertModelApiSocket(join(dir, "api.sock"))).rejects.toThrow(/not a unix socket/);
    await expect(assertModelApiSocket("api.sock")).rejects.toThrow(/absolute/);
  });
});
