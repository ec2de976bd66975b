import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tar from "tar-stream";
import { packFolder, treeFromFolder } from "../../src/sandbox/tree.ts";
import { ContainerRuntimeError, assertValidSpec, type ContainerSpec } from "../../src/sandbox/port.ts";
import { DockerRuntime } from "../../src/sandbox/docker.ts";

/** The export handed to the runtime as content: the tar a runtime without the runner's disk would copy in. */

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "sr-unit-tree-"));
  await mkdir(join(dir, "src", "deep"), { recursive: true });
  await writeFile(join(dir, "README.md"), "# demo\n");
  await writeFile(join(dir, "src", "deep", "x.ts"), "export const x = 1;\n");
  await chmod(join(dir, "src", "deep", "x.ts"), 0o640);
  await symlink("../README.md", join(dir, "src", "readme-link"));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

async function unpack(stream: NodeJS.ReadableStream) {
  const extract = tar.extract();
  const entries: Array<{ name: string; type: string; mode: number; body: string; linkname?: string }> = [];
  extract.on("entry", (header, body, next) => {
    let text = "";
    body.on("data", (d: unknown) => (text += (d as Buffer).toString("utf8")));
    body.on("end", () => {
      entries.push({ name: header.name, type: header.type!, mode: header.mode! & 0o777, body: text, ...(header.linkname ? { linkname: header.linkname } : {}) });
      next();
    });
  });
  const done = new Promise<void>((resolve, reject) => {
    extract.on("finish", () => resolve());
    extract.on("error", reject);
  });
  stream.pipe(extract as unknown as NodeJS.WritableStream);
  await done;
  return entries;
}

describe("a folder as the runtime's read-only tree", () => {
  it("streams every folder, file and link (links kept, not followed) in name order, with modes", async () => {
    const entries = await unpack(packFolder(dir));
    expect(entries.map((e) => [e.name, e.type])).toEqual([
      ["README.md", "file"],
      ["src", "directory"],
      ["src/deep", "directory"],
      ["src/deep/x.ts", "file"],
      ["src/readme-link", "symlink"],
    ]);
    expect(entries.find((e) => e.name === "src/deep/x.ts")).toMatchObject({ body: "export const x = 1;\n", mode: 0o640 });
    expect(entries.find((e) => e.name === "src/readme-link")?.linkname).toBe("../README.md");
  });

  it("each tar() call is a new stream of the same tree", async () => {
    const tree = treeFromFolder("/workspace", dir);
    expect(tree.hostPath).toBe(dir);
    const a = await unpack(tree.tar());
    const b = await unpack(tree.tar());
    expect(b).toEqual(a);
  });

  it("a spec's workspace target must be absolute and must not collide with a mount", () => {
    const spec: ContainerSpec = { image: "img:1", cmd: [], env: {}, mounts: [], tmpfs: {}, readOnlyRootfs: true, networkMode: "none", capDrop: [], securityOpt: [], labels: {} };
    expect(() => assertValidSpec({ ...spec, workspace: treeFromFolder("workspace", dir) })).toThrow(/workspace target "workspace" is not absolute/);
    expect(() => assertValidSpec({ ...spec, mounts: [{ source: dir, target: "/workspace", readOnly: true }], workspace: treeFromFolder("/workspace", dir) })).toThrow(/also a mount target/);
    expect(() => assertValidSpec({ ...spec, workspace: treeFromFolder("/workspace", dir) })).not.toThrow();
  });

  // contract: R280
  it("networkDisabled is refused with a network mode other than none", () => {
    const spec: ContainerSpec = { image: "img:1", cmd: [], env: {}, mounts: [], tmpfs: {}, readOnlyRootfs: true, networkMode: "none", capDrop: [], securityOpt: [], labels: {}, networkDisabled: true };
    expect(() => assertValidSpec(spec)).not.toThrow();
    expect(() => assertValidSpec({ ...spec, networkMode: "bridge" })).toThrow(/networkDisabled needs networkMode none, not "bridge"/);
    expect(() => assertValidSpec({ ...spec, networkMode: "container:abc" })).toThrow(/networkDisabled needs networkMode none/);
  });

  it("the Docker adapter, on the runner's host, needs the tree's host copy to bind it read-only", async () => {
    const spec: ContainerSpec = { image: "img:1", cmd: [], env: {}, mounts: [], tmpfs: {}, readOnlyRootfs: true, networkMode: "none", capDrop: [], securityOpt: [], labels: {} };
    const err = await new DockerRuntime({ socketPath: "/nonexistent.sock" }).create({ ...spec, workspace: { target: "/workspace", tar: () => packFolder(dir) } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ContainerRuntimeError);
    expect((err as Error).message).toMatch(/binds the workspace from the runner's host; give workspace.hostPath/);
  });
});
