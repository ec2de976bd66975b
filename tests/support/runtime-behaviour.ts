import { randomUUID } from "node:crypto";
import { text } from "node:stream/consumers";
import tar from "tar-stream";
import { buffer as readAll } from "node:stream/consumers";
import { afterAll, describe, expect, it } from "vitest";
import { ContainerRuntimeError, type ContainerRuntime, type ContainerSpec } from "../../src/sandbox/port.ts";
import type { FakeProgram } from "./fake-runtime.ts";

/**
 * One behaviour suite for the `ContainerRuntime` port, run against `FakeRuntime` (unit)
 * and `DockerRuntime` (integration, real engine). The programs below exist twice: as a
 * Node script for a real container and as a JS function for the fake; the suite asserts
 * only what a caller of the port can observe, so both must behave alike.
 */
export type ProgramName = "echo" | "sleep" | "big" | "oom";

export const BIG_BYTES = 1 << 20;

/** Node scripts for a real container (`node -e`). */
export const PROGRAM_SCRIPTS: Record<ProgramName, string> = {
  echo: `process.stdout.write("out:" + process.env.GREETING + "\\n"); process.stderr.write("err\\n"); process.exitCode = Number(process.env.EXIT_CODE ?? 0);`,
  sleep: `setTimeout(() => {}, 3600e3);`,
  big: `let s = ""; for (let i = 0; i < ${BIG_BYTES / 8}; i++) s += String(i % 10000000).padStart(8, "0"); process.stdout.write(s);`,
  oom: `const keep = []; for (;;) keep.push(Buffer.alloc(16 << 20, 1));`,
};

/** The same programs for `FakeRuntime`, dispatched on `cmd[0]`. */
export const fakePrograms: FakeProgram = async ({ spec, stdout, stderr, signal }) => {
  switch (spec.cmd[0] as ProgramName) {
    case "echo":
      stdout.write(`out:${spec.env.GREETING}\n`);
      stderr.write("err\n");
      return Number(spec.env.EXIT_CODE ?? 0);
    case "sleep":
      await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve()));
      return 0;
    case "big": {
      let s = "";
      for (let i = 0; i < BIG_BYTES / 8; i++) s += String(i % 10000000).padStart(8, "0");
      stdout.write(s);
      return 0;
    }
    case "oom":
      return { exitCode: 137, oomKilled: true };
    default:
      throw new Error(`unknown program ${spec.cmd[0]}`);
  }
};

export interface SuiteHarness {
  runtime: ContainerRuntime;
  /** An existing image the programs run in. */
  image: string;
  /** Entrypoint and cmd that run the named program in `image`. */
  program(name: ProgramName): Pick<ContainerSpec, "entrypoint" | "cmd">;
}

function expectedBig(): string {
  let s = "";
  for (let i = 0; i < BIG_BYTES / 8; i++) s += String(i % 10000000).padStart(8, "0");
  return s;
}

async function tinyContext(): Promise<Buffer> {
  const pack = tar.pack();
  const out = readAll(pack);
  pack.entry({ name: "Dockerfile", mtime: new Date(0), mode: 0o644 }, 'FROM scratch\nCOPY hello.txt /hello.txt\nLABEL "suite.from-dockerfile"="yes"\n');
  pack.entry({ name: "hello.txt", mtime: new Date(0), mode: 0o644 }, "hello\n");
  pack.finalize();
  return out;
}

export function runtimeBehaviourSuite(name: string, setup: () => Promise<SuiteHarness>): void {
  describe(`ContainerRuntime behaviour: ${name}`, () => {
    const run = `suite-${randomUUID()}`;
    const made: string[] = [];
    let harness: SuiteHarness | undefined;
    const h = async (): Promise<SuiteHarness> => (harness ??= await setup());

    const spec = async (program: ProgramName, extra: Partial<ContainerSpec> = {}): Promise<ContainerSpec> => {
      const { image, program: p } = await h();
      return {
        image,
        ...p(program),
        env: {},
        user: "1000:1000",
        mounts: [],
        tmpfs: { "/tmp": "rw,size=8m" },
        readOnlyRootfs: true,
        networkMode: "none",
        capDrop: ["ALL"],
        securityOpt: ["no-new-privileges"],
        pidsLimit: 64,
        labels: { "suite.run": run },
        ...extra,
      };
    };
    const create = async (s: ContainerSpec): Promise<string> => {
      const id = await (await h()).runtime.create(s);
      made.push(id);
      return id;
    };

    afterAll(async () => {
      if (!harness) return;
      for (const id of made) await harness.runtime.remove(id);
    });

    it("reports the engine it talks to", async () => {
      const info = await (await h()).runtime.ping();
      expect(info.serverVersion).not.toBe("");
      expect(info.apiVersion).toMatch(/^\d+\.\d+$/);
      expect(info.endpoint).toMatch(/^[a-z+]+:\/\//);
      expect(info.runtimes.length).toBeGreaterThan(0);
    });

    it("separates stdout from stderr, reports the exit code, keeps env and labels", async () => {
      const { runtime } = await h();
      const id = await create(await spec("echo", { env: { GREETING: "hi there", EXIT_CODE: "3" }, labels: { "suite.run": run, "suite.kind": "echo" } }));
      const before = await runtime.inspect(id);
      expect(before).toMatchObject({ running: false, exitCode: null });
      const { stdout, stderr } = await runtime.attach(id);
      const [out, err] = [text(stdout), text(stderr)];
      await runtime.start(id);
      expect(await runtime.wait(id)).toEqual({ exitCode: 3, oomKilled: false });
      expect(await out).toBe("out:hi there\n");
      expect(await err).toBe("err\n");
      const after = await runtime.inspect(id);
      expect(after).toMatchObject({ running: false, exitCode: 3, oomKilled: false });
      expect(after?.labels).toMatchObject({ "suite.run": run, "suite.kind": "echo" });
      expect(after?.env).toEqual(expect.arrayContaining(["GREETING=hi there", "EXIT_CODE=3"]));
    });

    it("delivers a megabyte of output whole and in order when attached before start", async () => {
      const { runtime } = await h();
      const id = await create(await spec("big"));
      const { stdout, stderr } = await runtime.attach(id);
      const [out, err] = [text(stdout), text(stderr)];
      await runtime.start(id);
      expect((await runtime.wait(id)).exitCode).toBe(0);
      const got = await out;
      expect(got.length).toBe(BIG_BYTES);
      expect(got === expectedBig()).toBe(true);
      expect(await err).toBe("");
    });

    it("kills a running container (exit 137), and a second kill is no error", async () => {
      const { runtime } = await h();
      const id = await create(await spec("sleep"));
      const { stdout } = await runtime.attach(id);
      const out = text(stdout);
      await runtime.start(id);
      expect((await runtime.inspect(id))?.running).toBe(true);
      await runtime.kill(id);
      expect(await runtime.wait(id)).toEqual({ exitCode: 137, oomKilled: false });
      expect(await out).toBe("");
      await runtime.kill(id);
      expect(await runtime.inspect(id)).toMatchObject({ running: false, exitCode: 137 });
    });

    it("reports an out-of-memory kill as a result, not an error", async () => {
      const { runtime } = await h();
      const id = await create(await spec("oom", { memoryBytes: 96 * 1024 * 1024 }));
      await runtime.attach(id);
      await runtime.start(id);
      const exit = await runtime.wait(id);
      expect(exit.oomKilled).toBe(true);
      expect(exit.exitCode).toBe(137);
    });

    it("removes a container, running or not; removing or killing it again is no error", async () => {
      const { runtime } = await h();
      const id = await create(await spec("sleep"));
      await runtime.attach(id);
      await runtime.start(id);
      await runtime.remove(id);
      expect(await runtime.inspect(id)).toBeUndefined();
      await runtime.remove(id);
      await runtime.kill(id);
    });

    it("lists exactly the containers that carry every given label", async () => {
      const { runtime } = await h();
      const group = randomUUID();
      const a = await create(await spec("sleep", { labels: { "suite.run": run, "suite.group": group, "suite.role": "a" } }));
      const b = await create(await spec("echo", { labels: { "suite.run": run, "suite.group": group, "suite.role": "b" } }));
      await create(await spec("echo", { labels: { "suite.run": run, "suite.group": `${group}-other` } }));
      await runtime.attach(a);
      await runtime.start(a);
      const listed = await runtime.listByLabel({ "suite.group": group });
      expect(listed.map((c) => c.id).sort()).toEqual([a, b].sort());
      expect(listed.find((c) => c.id === a)).toMatchObject({ running: true, labels: { "suite.role": "a" } });
      expect(listed.find((c) => c.id === b)).toMatchObject({ running: false, labels: { "suite.role": "b" } });
      expect(await runtime.listByLabel({ "suite.group": group, "suite.role": "b" })).toHaveLength(1);
      await expect(runtime.listByLabel({})).rejects.toMatchObject({ code: "invalid-spec" });
      await runtime.kill(a);
    });

    it("refuses a host network, a relative bind and a missing image before anything runs", async () => {
      const { runtime } = await h();
      const host = { ...(await spec("echo")), networkMode: "host" } as unknown as ContainerSpec;
      await expect(runtime.create(host)).rejects.toMatchObject({ code: "invalid-spec" });
      await expect(runtime.create(await spec("echo", { mounts: [{ source: "relative/dir", target: "/x", readOnly: true }] }))).rejects.toBeInstanceOf(ContainerRuntimeError);
      await expect(runtime.create(await spec("echo", { image: `study-runner-test/absent:${randomUUID()}` }))).rejects.toMatchObject({ code: "not-found" });
      expect(await runtime.listByLabel({ "suite.run": run, "suite.kind": "never-created" })).toEqual([]);
    });

    it("builds a scratch image from a tar context with Dockerfile and given labels; a missing image inspects as undefined", async () => {
      const { runtime } = await h();
      const built = await runtime.buildImage(await tinyContext(), { tag: "study-runner-test/tiny:suite", labels: { "suite.from-options": "also" } });
      expect(built.id).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect(built.labels).toMatchObject({ "suite.from-dockerfile": "yes", "suite.from-options": "also" });
      expect(await runtime.inspectImage("study-runner-test/tiny:suite")).toEqual(built);
      expect(await runtime.inspectImage(`study-runner-test/absent:${randomUUID()}`)).toBeUndefined();
    });

    it("fails a build whose Dockerfile is broken", async () => {
      const { runtime } = await h();
      const pack = tar.pack();
      const out = readAll(pack);
      pack.entry({ name: "Nothing", mtime: new Date(0) }, "no dockerfile here\n");
      pack.finalize();
      await expect(runtime.buildImage(await out, { tag: "study-runner-test/broken:suite" })).rejects.toMatchObject({ code: "build-failed" });
    });
  });
}
